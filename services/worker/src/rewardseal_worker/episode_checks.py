"""The checks of an episode that need no read: its contract and its oracle identity (R-W-2,
docs/spec.md §8).

The scorer (:mod:`rewardseal_worker.engine`) makes them before it reads the store or the
system of record, for BeginEpisode and for scoring alike; :meth:`EpisodeChecks.identity` is the
one place an :class:`~rewardseal_worker.identity.Identity` (and its key) is made for either.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf import json_format

from rewardseal.core.errors import (
    ContractMismatch,
    IdentityConflict,
    IdentityMismatch,
    IdentityMissing,
    InvalidEpisode,
    preview,
)
from rewardseal.core.validation import check_identity_values, validate_digest
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_worker.identity import Identity

__all__ = ["EpisodeChecks"]


class EpisodeChecks:
    """The checks against one contract (its digest, task, environment and identity keys)."""

    def __init__(self, contract: RewardContract, contract_digest: str) -> None:
        self._contract = contract
        self._digest = contract_digest
        self._identity_keys = frozenset(contract.oracle.identity_keys)
        """The contract's identity key names (R-W-2), as a set once, not per identity."""

    def contract_digest(self, digest: str) -> None:
        """``digest`` is well formed and names this contract."""
        validate_digest(digest, "reward_contract_digest", error=InvalidEpisode)
        if digest != self._digest:
            raise ContractMismatch(f"this worker scores contract {self._digest}, not {digest}")

    def descriptor_contract(self, descriptor: EpisodeDescriptor) -> None:
        """The descriptor names this contract, and its task and environment when it names
        them."""
        self.contract_digest(descriptor.reward_contract_digest)
        contract = self._contract
        if descriptor.HasField("task_id") and descriptor.task_id != contract.task_id:
            raise ContractMismatch(f"task {descriptor.task_id} is not the contract's task")
        if (
            descriptor.HasField("environment_id")
            and descriptor.environment_id != contract.environment_id
        ):
            raise ContractMismatch(
                f"environment {descriptor.environment_id} is not the contract's environment"
            )

    def identity(self, identity: Mapping[str, object], field: str) -> Identity:
        """The identity, checked: shape first (every entry point: sizes, names, values), then
        its key set against the contract's (R-W-2); ``field`` names it in messages. The one
        place an :class:`Identity` (and its key) is made for scoring or BeginEpisode."""
        if not identity:
            raise IdentityMissing("no oracle identity was given")
        check_identity_values(identity, field)
        expected = self._identity_keys
        if identity.keys() != expected:
            given = preview(", ".join(sorted(identity)), 128, quoted=False)
            raise IdentityMismatch(
                f"oracle identity keys [{given}] differ from the contract's {sorted(expected)}"
            )
        if isinstance(identity, Identity):
            return identity  # its key is already computed
        return Identity({name: str(value) for name, value in identity.items()})

    def resolve_identity(
        self, descriptor: EpisodeDescriptor, registered: Identity | None
    ) -> Identity:
        """Descriptor field, else metadata.oracle_identity, else the registration; a
        registration wins and a descriptor naming another subject is refused (R-W-2)."""
        given: dict[str, str] | None = None
        if descriptor.oracle_identity:
            given = dict(descriptor.oracle_identity)
        elif "oracle_identity" in descriptor.metadata.fields:
            raw = json_format.MessageToDict(descriptor.metadata).get("oracle_identity")
            if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
                raise IdentityMismatch("metadata.oracle_identity must map names to strings")
            # Shape first, so an oversized identity is refused before it is compared or quoted.
            check_identity_values(raw, "metadata.oracle_identity")
            given = raw
        if registered is not None:
            if given is not None and given != dict(registered):
                raise IdentityConflict(
                    "the descriptor names another subject than the BeginEpisode registration"
                )
            return self.identity(registered, "registered oracle_identity")
        if given is None:
            raise IdentityMissing(
                "no oracle identity in the descriptor, its metadata, or a BeginEpisode"
            )
        return self.identity(given, "oracle_identity")
