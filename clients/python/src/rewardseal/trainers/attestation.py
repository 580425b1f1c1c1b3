"""Writing a reward attestation beside a saved checkpoint (R-A-5, R-A-6; docs/provenance.md).

:class:`CheckpointAttester` is what the TRL callback
(:mod:`rewardseal.trainers.trl.attestation`) and the verl hook
(:mod:`rewardseal.trainers.verl.attestation`) share: hash the checkpoint directory's files
(:func:`rewardseal.core.attestation.checkpoint_subjects`), ask control to attest the receipts
that trained it (``AttestCheckpoint``, R-C-15), and write the signed DSSE JSON into the
directory as :data:`~rewardseal.core.attestation.ATTESTATION_FILE`
(:func:`~rewardseal.core.attestation.write_attestation`: a reader never sees half a file).

Receipts reach control through the worker's outbox a moment after they are scored, so the
attester waits until the scope's receipt count holds still over ``settle_seconds`` (at most
``timeout_seconds``) before it keeps an attestation; the attestation states exactly what it
covers (its tally and Merkle size), so a receipt that arrived later is visibly not in it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rewardseal.core.attestation import checkpoint_subjects, write_attestation
from rewardseal.core.errors import NothingToAttest, RewardSealError, ValidationError
from rewardseal.rpc.control_client import AttestationScope, ControlClient
from rewardseal.v1 import control_service_pb2 as pb

__all__ = ["DEFAULT_SETTLE_SECONDS", "AttestedCheckpoint", "CheckpointAttester"]

logger = logging.getLogger(__name__)

DEFAULT_SETTLE_SECONDS: Final = 1.0
DEFAULT_TIMEOUT_SECONDS: Final = 60.0


@dataclass(frozen=True)
class AttestedCheckpoint:
    """An attestation written: where, over how many receipts, under which Merkle root."""

    path: Path
    receipt_count: int
    merkle_root: str


class CheckpointAttester:
    """Attests checkpoint directories against one control plane for one run.

    ``contracts`` and ``checkpoint_ids`` select the run's receipts (the reward function's
    ``reward_contract_digest`` and ``policy_checkpoint_id``); ``first_update`` is the run's
    first policy update; ``integrity_run_id`` names the integrity run whose decisions in force
    the attestation carries. ``required``: raise when a checkpoint cannot be attested (default:
    log it as an error and keep training; :attr:`unattested` lists them).
    """

    def __init__(
        self,
        control: ControlClient,
        *,
        contracts: Sequence[str],
        checkpoint_ids: Sequence[str] = (),
        first_update: int = 0,
        integrity_run_id: str = "",
        required: bool = False,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Raises ValidationError: no contract, a negative first update or wait."""
        if not contracts:
            raise ValidationError("contracts must name at least one reward contract digest")
        if first_update < 0:
            raise ValidationError(f"first_update must not be negative, got {first_update}")
        if settle_seconds < 0 or timeout_seconds < 0:
            raise ValidationError("settle_seconds and timeout_seconds must not be negative")
        self.control = control
        self.contracts = list(contracts)
        self.checkpoint_ids = list(checkpoint_ids)
        self.first_update = first_update
        self.integrity_run_id = integrity_run_id
        self.required = required
        self.settle_seconds = settle_seconds
        self.timeout_seconds = timeout_seconds
        self._sleep = sleep
        self.attested: list[AttestedCheckpoint] = []
        """Every attestation written, in order."""
        self.unattested: list[tuple[Path, str]] = []
        """``(directory, why)`` of each checkpoint left without an attestation."""

    def attest(self, directory: Path, last_update: int) -> AttestedCheckpoint | None:
        """Attest ``directory`` over the receipts of ``first_update..last_update``; write the
        attestation into it. None when it could not be attested (logged; raised if
        ``required``).

        Raises:
            RewardSealError: with ``required``, whatever kept the checkpoint unattested.
        """
        try:
            written = self._attest(Path(directory), last_update)
        except (RewardSealError, OSError) as exc:
            why = exc.message if isinstance(exc, RewardSealError) else str(exc)
            self.unattested.append((Path(directory), why))
            logger.error("reward attestation: checkpoint %s is not attested: %s", directory, why)
            if self.required:
                raise
            return None
        self.attested.append(written)
        logger.info(
            "reward attestation: %s over %d receipt(s), Merkle root %s",
            written.path,
            written.receipt_count,
            written.merkle_root,
        )
        return written

    def _attest(self, directory: Path, last_update: int) -> AttestedCheckpoint:
        if last_update < self.first_update:
            raise NothingToAttest(
                f"no policy update in {self.first_update}..{last_update}: nothing trained "
                f"{directory} under this run's rewards"
            )
        subjects = checkpoint_subjects(directory)
        scope = AttestationScope(
            contracts=self.contracts,
            first=self.first_update,
            last=last_update,
            checkpoint_ids=self.checkpoint_ids,
            integrity_run_id=self.integrity_run_id,
        )
        answer = self._settled(scope, subjects)
        target = write_attestation(directory, json.loads(answer.attestation_json))
        return AttestedCheckpoint(target, int(answer.receipt_count), answer.merkle_root)

    def _settled(
        self, scope: AttestationScope, subjects: list[dict[str, Any]]
    ) -> pb.AttestCheckpointResponse:
        """Attest until two answers ``settle_seconds`` apart cover the same receipts (the
        outbox has delivered), or the timeout passes (then the last answer)."""
        deadline = time.monotonic() + self.timeout_seconds
        previous: pb.AttestCheckpointResponse | None = None
        while True:
            try:
                answer = self.control.attest_checkpoint(scope, subjects)
            except NothingToAttest:
                if time.monotonic() >= deadline:
                    raise
                self._sleep(max(self.settle_seconds, 0.05))
                continue
            if previous is not None and answer.merkle_root == previous.merkle_root:
                return answer
            if self.settle_seconds == 0 or time.monotonic() >= deadline:
                return answer
            previous = answer
            self._sleep(self.settle_seconds)
