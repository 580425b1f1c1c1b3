""":class:`ControlStore`: the control plane's one entry point to its durable state.

It opens the database (migrating it first, or checking that it is current), owns the engine
and hands each aggregate the same engine: ``store.contracts``, ``store.keys``,
``store.certificates``, ``store.revocations``, ``store.receipts``, ``store.audit_log``, and for
reward integrity
``store.integrity_revisions``, ``store.integrity_shards``, ``store.integrity_audits`` and
``store.integrity_decisions`` (:mod:`rewardseal_control.integrity.store`). The service, the app and
the tests hold one ControlStore and reach the aggregate they mean by name, so a call reads as
what it touches (``store.revocations.revoke(...)``).
"""

from __future__ import annotations

from typing import Final

from rewardseal_control import db
from rewardseal_control.store.attestation_scope import AttestationScopes
from rewardseal_control.store.audit_log import AuditLogStore
from rewardseal_control.store.certificates import CertificateStore
from rewardseal_control.store.contracts import ContractStore
from rewardseal_control.store.key_bindings import KeyBindingStore
from rewardseal_control.store.keys import IssuerKeyStore
from rewardseal_control.store.receipts import ReceiptIndex
from rewardseal_control.store.revocations import RevocationStore
from rewardseal_server.sqlstore import StoreEngine

__all__ = ["ControlStore"]


class ControlStore:
    """The control plane's durable state on SQLite (default) or PostgreSQL.

    Thread-safe: one instance may be used from many threads (a connection pool backs it).
    """

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        """Open the control store at ``url``.

        ``migrate``: bring the schema to the newest revision first (Alembic, one transaction,
        serialized against other replicas). With ``migrate=False`` the schema must already be
        at the newest revision, else :class:`Unavailable`.

        Raises:
            ValidationError: the URL is not usable.
            Unavailable: the database cannot be reached, or its schema is not current.
        """
        if migrate:
            db.upgrade(url)
        self._db: StoreEngine = db.make_store_engine(url)
        try:
            if not migrate:
                self._check_schema()
        except BaseException:
            self._db.dispose()
            raise
        self.contracts: Final = ContractStore(self._db)
        self.keys: Final = IssuerKeyStore(self._db)
        self.bindings: Final = KeyBindingStore(self._db)
        self.certificates: Final = CertificateStore(self._db)
        self.revocations: Final = RevocationStore(self._db)
        self.receipts: Final = ReceiptIndex(self._db)
        self.audit_log: Final = AuditLogStore(self._db)
        self.attestation_scopes: Final = AttestationScopes(self._db)
        # Reward integrity (docs/spec.md §12). Its aggregates (rewardseal_control.integrity.store)
        # build on this package's tables and inputs, so they are imported here, when a store
        # opens: importing them at the top would make loading one of them first load this
        # package, which would need it before it exists.
        from rewardseal_control.integrity.store.audits import IntegrityAuditStore
        from rewardseal_control.integrity.store.decisions import IntegrityDecisionStore
        from rewardseal_control.integrity.store.revisions import IntegrityRevisionStore
        from rewardseal_control.integrity.store.shards import SignalShardStore

        self.integrity_revisions: Final = IntegrityRevisionStore(self._db)
        self.integrity_shards: Final = SignalShardStore(self._db, self.integrity_revisions)
        self.integrity_audits: Final = IntegrityAuditStore(self._db, self.integrity_revisions)
        self.integrity_decisions: Final = IntegrityDecisionStore(self._db)

    def _check_schema(self) -> None:
        db.MIGRATIONS.check(self._db)

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.backend

    @property
    def store_engine(self) -> StoreEngine:
        """The underlying engine (diagnostics, and the test-only readers of tests/support)."""
        return self._db

    def ping(self) -> None:
        """Check that the database answers; raise :class:`Unavailable` if it does not."""
        self._db.ping()

    def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        self._db.dispose()

    def __enter__(self) -> ControlStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
