"""Alembic environment of the control plane (docs/spec.md R-C-6).

Run through :mod:`rewardseal_control.db` (``upgrade``, ``downgrade``), which builds the Alembic
configuration in code and hands over an open connection in ``config.attributes["connection"]``
(so that the whole migration is one transaction, under the caller's lock). A URL may be given
instead, in ``config.attributes["url"]`` or as the ``sqlalchemy.url`` option (the ``alembic``
command line); offline (``--sql``) runs render SQL for that URL. The environment itself is
:meth:`rewardseal_server.migrating.Migrations.run_environment`, shared with the worker's store.
"""

from rewardseal_control.db import MIGRATIONS

MIGRATIONS.run_environment()
