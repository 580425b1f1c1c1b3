"""Registering reward contracts (R-C-1): the caller states the digest, the server recomputes it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import ContractMismatch, ValidationError
from rewardseal.core.validation import validate_contract, validate_digest
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal_control.store import ControlStore

__all__ = ["ContractRegistry"]


class ContractRegistry:
    """Registers contracts in ``store`` (immutable, keyed by their digest)."""

    def __init__(self, store: ControlStore, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def register(
        self, contract: RewardContract | None, stated_digest: str
    ) -> tuple[str, bool]:
        """Register ``contract`` under ``stated_digest``; ``(digest, created)``.

        Raises:
            ValidationError: no contract or digest, a malformed one, or an invalid contract.
            ContractMismatch: ``stated_digest`` is not the contract's (metadata: the server's).
        """
        if contract is None:
            raise ValidationError("contract is required")
        if not stated_digest:
            # The caller states what it believes it registers; the server recomputes (R-C-1).
            raise ValidationError("reward_contract_digest is required")
        validate_digest(stated_digest, "reward_contract_digest")
        validate_contract(contract)
        digest = contract_digest(contract)
        if digest != stated_digest:
            raise ContractMismatch(
                f"reward_contract_digest {stated_digest} does not match the "
                f"contract: the server computes {digest}",
                metadata={"reward_contract_digest": digest},
            )
        return await asyncio.to_thread(
            self._store.contracts.register_contract, contract, stated_digest, at=self._clock()
        )
