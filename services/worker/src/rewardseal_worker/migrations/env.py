"""Alembic environment of the worker store (docs/spec.md R-W-17).

Run through :mod:`rewardseal_worker.store.migrating` (``rewardseal-worker migrate``, and the
store's own open), which builds the Alembic configuration in code and hands over an open
connection in ``config.attributes["connection"]`` (the whole migration is one transaction, under
the caller's lock). A URL may be given instead, in ``config.attributes["url"]`` or as the
``sqlalchemy.url`` option (the ``alembic`` command line); offline (``--sql``) runs render SQL for
that URL. The environment itself is
:meth:`rewardseal_server.migrating.Migrations.run_environment`, shared with the control plane.
"""

from rewardseal_worker.store.migrating import MIGRATIONS

MIGRATIONS.run_environment()
