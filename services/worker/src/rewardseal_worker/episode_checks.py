"""The checks of an episode that need no read: its contract and its oracle identity (R-W-2,
docs/spec.md §8).

The scorer (:mod:`rewardseal_worker.engine`) makes them before it reads the store or the
system of record, for BeginEpisode and for scoring alike; :meth:`EpisodeChecks.identity` is the
one place an :class:`~rewardseal_worker.identity.Identity` (and its key) is made for either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from rewardseal.core.errors import (
    ContractMismatch,
    IdentityConflict,
    IdentityMismatch,
    IdentityMissing,
    InvalidEpisode,
    InvalidTaskParameters,
    preview,
)
from rewardseal.core.task_parameters import ParameterValue, bound_values, parameters_digest
from rewardseal.core.validation import check_identity_values, validate_digest
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.episode_pb2 import EpisodeDescriptor, TaskParameterValue
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

    def task_parameters(
        self, values: Mapping[str, TaskParameterValue]
    ) -> dict[str, ParameterValue] | None:
        """The values a begin binds, checked against the contract's declaration (R-W-18);
        None for a contract that declares none (and was sent none).

        Raises:
            InvalidTaskParameters: a parameter missing, extra, ill-typed or out of range.
        """
        bound = bound_values(self._contract, values)
        return bound if self._contract.task_parameters else None

    def resolve_parameters(
        self, descriptor: EpisodeDescriptor, registered: Mapping[str, Any] | None, begun: bool
    ) -> dict[str, ParameterValue] | None:
        """The task parameters an episode is judged with (R-W-18): those its begin bound
        (``begun``: the episode has a registration), which a descriptor may repeat but must
        then equal; without a begin, the descriptor's own, checked like a begin's.

        Raises:
            InvalidTaskParameters: the descriptor's values are refused, or differ from the
                begin's (``metadata["parameter"]`` names the first that differs).
        """
        if not begun:
            return self.task_parameters(descriptor.task_parameters)
        if not self._contract.task_parameters:
            if descriptor.task_parameters:
                self.task_parameters(descriptor.task_parameters)  # raises: none are declared
            return None
        if registered is None:
            # A registration made before this worker stored parameters (or by a downgrade).
            raise InvalidTaskParameters(
                "the episode's begin bound no task parameters; begin it again",
                metadata={"parameter": sorted(p.name for p in self._contract.task_parameters)[0]},
            )
        bound = dict(registered)
        if descriptor.task_parameters:
            repeated = self.task_parameters(descriptor.task_parameters) or {}
            if parameters_digest(self._contract, repeated) != parameters_digest(
                self._contract, bound
            ):
                differing = sorted(
                    name
                    for name in bound
                    if type(bound[name]) is not type(repeated[name])
                    or bound[name] != repeated[name]
                )
                named = (differing or sorted(bound))[0]
                raise InvalidTaskParameters(
                    f"task parameter {named} differs from the value the begin bound",
                    metadata={"parameter": named},
                )
        return bound

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
