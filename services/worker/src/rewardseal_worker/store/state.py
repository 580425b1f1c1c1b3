"""Small facts the worker keeps across restarts, by name; values only ever rise.

The highest revocation-list version the worker accepted (:data:`REVOCATION_VERSION`, R-C-4) is
one: a restart, or a slower replica sharing the database, can then never be fed an older list.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from rewardseal.core.errors import ValidationError
from rewardseal_worker.store import schema
from rewardseal_worker.store.core import StorePart

REVOCATION_VERSION = "revocation_list_version"
"""The worker-state name of the highest revocation-list version accepted (R-C-4)."""


class StateStore(StorePart):
    """The worker-state part of :class:`~rewardseal_worker.store.WorkerStore`."""

    def state_value(self, name: str) -> int | None:
        """The stored value of ``name`` in the worker state, or None if it was never set."""
        value = self._db.read(
            lambda conn: conn.execute(schema.STATE_VALUE, {"name": name}).scalar()
        )
        return None if value is None else int(value)

    def raise_state_value(self, name: str, value: int) -> int:
        """Store ``value`` under ``name`` unless a value at least as high is stored already;
        return the value stored afterwards (never lower than before, across replicas too).

        Raises:
            ValidationError: ``value`` is negative.
        """
        if value < 0:
            raise ValidationError("a worker state value is at least 0")

        def work(conn: Connection) -> int:
            conn.execute(self._inserts.state, {"name": name, "int_value": value})
            conn.execute(schema.STATE_RAISE, {"b_name": name, "b_value": value})
            return int(conn.execute(schema.STATE_VALUE, {"name": name}).scalar_one())

        return self._db.write(work)
