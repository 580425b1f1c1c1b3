"""Registered reward contracts (R-C-1): immutable, addressed by their digest.

The digest is recomputed here (core's :func:`~rewardseal.core.contract.contract_digest`) and the
normalized contract is stored, so a contract is registered once whatever defaults its caller
spelled out; a change to a contract is a new digest, never an update.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlalchemy import select
from sqlalchemy.engine import Connection

from rewardseal.core.contract import contract_digest, normalize_contract
from rewardseal.core.errors import NotFound, ValidationError
from rewardseal.core.validation import validate_contract, validate_digest
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.control_service_pb2 import RegisteredContract
from rewardseal_control.store import inputs, tables
from rewardseal_control.store.pagination import Listing, Page, fingerprint
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import StoreEngine

__all__ = ["MAX_CONTRACT_VERSION_LENGTH", "ContractStore", "require_contract"]

MAX_CONTRACT_VERSION_LENGTH: Final = 128

_contracts = tables.contracts
_COLUMNS = (_contracts.c.digest, _contracts.c.body, _contracts.c.registered_at)
_LISTING = Listing(
    kind="contracts", order=(_contracts.c.registered_at, _contracts.c.digest), shape=(datetime, str)
)


def require_contract(conn: Connection, digest: str) -> None:
    """Raise NotFound unless a contract with ``digest`` is registered (inside ``conn``)."""
    found = conn.execute(select(_contracts.c.digest).where(_contracts.c.digest == digest))
    if found.first() is None:
        raise NotFound(f"reward contract {digest} is not registered")


class ContractStore:
    """Register, read and list reward contracts."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db
        self._insert = db.insert_ignore(_contracts).returning(_contracts.c.digest)

    def register_contract(
        self, contract: RewardContract, claimed_digest: str | None, *, at: datetime | None = None
    ) -> tuple[str, bool]:
        """Register a contract (R-C-1); ``(digest, created)``.

        The digest is recomputed here; ``claimed_digest`` (the caller's) must equal it (None
        skips the comparison: for callers that hold no claim). Registering the same contract
        again is a no-op (``created`` False): contracts are immutable, a change is a new digest.
        The normalized contract is stored.

        Raises:
            ValidationError: the contract breaks a rule, carries unknown fields, or its digest
                is not ``claimed_digest``.
        """
        if not isinstance(contract, RewardContract):
            raise ValidationError("contract must be a RewardContract")
        validate_contract(contract)
        inputs.no_unknown_fields(contract)
        inputs.text(
            contract.contract_version,
            "contract_version",
            max_length=MAX_CONTRACT_VERSION_LENGTH,
            required=True,
        )
        digest = contract_digest(contract)
        if claimed_digest is not None:
            validate_digest(claimed_digest, "reward_contract_digest")
            if claimed_digest != digest:
                raise ValidationError(
                    f"reward_contract_digest {claimed_digest} does not match the contract: "
                    f"its digest is {digest}"
                )
        row = {
            "digest": digest,
            "contract_id": contract.contract_id,
            "contract_version": contract.contract_version,
            "body": normalize_contract(contract).SerializeToString(deterministic=True),
            "registered_at": inputs.moment(at),
        }

        def work(conn: Connection) -> bool:
            return conn.execute(self._insert, row).first() is not None

        return digest, self._db.write(work)

    def get_contract(self, digest: str) -> RegisteredContract:
        """The registered contract with ``digest``.

        Raises:
            ValidationError: ``digest`` is not a digest.
            NotFound: no contract has that digest.
        """
        validate_digest(digest, "reward_contract_digest")
        statement = select(*_COLUMNS).where(_contracts.c.digest == digest)
        row = self._db.read(lambda conn: conn.execute(statement).one_or_none())
        if row is None:
            raise NotFound(f"reward contract {digest} is not registered")
        return _registered_contract(row)

    def list_contracts(self, page_size: int = 0, page_token: str = "") -> Page[RegisteredContract]:
        """Registered contracts, oldest registration first."""
        rows, token = _LISTING.read(
            self._db,
            select(*_COLUMNS),
            query=fingerprint(),
            page_size=page_size,
            page_token=page_token,
        )
        return Page([_registered_contract(row) for row in rows], token)


def _registered_contract(row: AnyRow) -> RegisteredContract:
    return RegisteredContract(
        reward_contract_digest=row.digest,
        contract=RewardContract.FromString(bytes(row.body)),
        registered_at=inputs.timestamp(row.registered_at),
    )
