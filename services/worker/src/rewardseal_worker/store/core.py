"""What the parts of the worker store share: the engine, the outbox switch, the statements.

:class:`~rewardseal_worker.store.WorkerStore` is made of parts (episodes, receipts, outbox,
worker state), one module each; every part is a :class:`StorePart`, so all of them run on the
one engine and its transaction rules (:class:`~rewardseal_server.sqlstore.StoreEngine`).
"""

from __future__ import annotations

from rewardseal_server.sqlstore import StoreEngine
from rewardseal_worker.store.hot_sql import HotSql
from rewardseal_worker.store.schema import Inserts

STORE_NAME = "worker store"
"""How errors and the engine name this store."""


class StorePart:
    """The state every part of the store works with.

    Parts add methods only; the store is built once, by
    :meth:`WorkerStore.__init__ <rewardseal_worker.store.WorkerStore>`.
    """

    def __init__(self, db: StoreEngine, *, outbox: bool) -> None:
        """Share ``db`` and build its backend's insert statements once.

        ``outbox``: every receipt a commit stores also gets an outbox row (see
        :mod:`rewardseal_worker.store.outbox`).
        """
        self._db = db
        self._outbox = outbox
        self._inserts = Inserts.for_engine(db)
        self._hot = HotSql(db.backend)
