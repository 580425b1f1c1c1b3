"""Episodes at a real reward worker: begin before the first tool call, score after the last.

:class:`WorkerEpisodes` is what the ``rewardseal-mockmed-tools`` taskset calls: :meth:`begin`
mints a fresh episode id (never a trainer's row or sample id, which a trainer may dispatch
again), derives the episode's sandbox patient from the row's patient and that id, and records
the worker's baseline read (BeginEpisode, R-W-1); :meth:`score` sends the descriptor and returns
the verified receipt's row (``rewardseal.trainers.groups.SampleResult``).

**Unscored raises.** An episode the worker could not score (RECONCILIATION_REQUIRED,
FAILED_PLATFORM, a passing outage, a refusal such as ``policy_update_regressed``) raises
:class:`~rewardseal.core.errors.Unscored`: inside a verifiers reward that marks the trace as
errored (``trace.has_error``), and prime-rl drops an errored trace from its group, so it is never
paid 0.0 (R-T-1). A setup error (bad token, wrong contract, a receipt for another request) is
raised as itself: every episode would get it, and it must stop the run.

The connection settings are verl's ``reward_kwargs`` keys (``worker_ready_file``, or
``worker_target`` + ``token``/``token_env`` + ``worker_public_key`` + ``reward_contract_digest``;
``policy_checkpoint_id``, ``policy_update``, ``require_certified``), read by
``rewardseal.trainers.verl.settings.ManagerSettings`` (which imports no verl).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from rewardseal.core.errors import RewardSealError, Unscored, ValidationError
from rewardseal.rpc.worker_client import AsyncWorkerClient, make_descriptor
from rewardseal.trainers.actors import sandbox_identity
from rewardseal.trainers.groups import SampleResult, enforce_certified, is_setup_error
from rewardseal.trainers.verl.settings import ManagerSettings
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal_mockmed.contract import IDENTITY_KEY

__all__ = ["EPISODE_PREFIX", "OpenEpisode", "WorkerEpisodes", "receipt_info"]

EPISODE_PREFIX: Final = "vf-tools-"
"""How the episode ids this taskset mints start."""
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class OpenEpisode:
    """A begun episode: its id, the sandbox identity it acts on, and the row's identity."""

    episode_id: str
    identity: dict[str, str]
    row_identity: dict[str, str]

    def to_info(self) -> dict[str, Any]:
        """JSON-ready, for ``trace.info`` (no credentials)."""
        return {
            "episode_id": self.episode_id,
            "identity": dict(self.identity),
            "row_identity": dict(self.row_identity),
        }


def receipt_info(row: SampleResult) -> dict[str, Any]:
    """What a trace records of a scored episode: receipt id, outcome, certified, findings."""
    return {
        "episode_id": row.episode_id,
        "receipt_id": "" if row.receipt is None else row.receipt.receipt.receipt_id,
        "outcome": row.outcome,
        "certified": row.certified,
        "certificate_state": row.certificate_state,
        "findings": row.findings,
        "reward": row.scalar,
        "error": row.error_reason,
    }


class WorkerEpisodes:
    """Begins and scores this taskset's episodes at one worker (see the module docstring)."""

    def __init__(self, settings: ManagerSettings) -> None:
        self.settings = settings

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> WorkerEpisodes:
        """From verl-style ``reward_kwargs`` (see the module docstring)."""
        return cls(ManagerSettings.from_reward_kwargs(dict(kwargs)))

    def _client(self) -> AsyncWorkerClient:
        """A fresh pinned client (one per call: the caller's event loop may change)."""
        settings = self.settings
        return AsyncWorkerClient(
            settings.target,
            token=settings.token,
            trust=settings.trust,
            timeout=settings.timeout,
            tls=settings.tls,
        )

    def policy_update_for(self, sent: int | None) -> tuple[int, str]:
        """The update to score at and where it came from: ``sent`` (the trainer's, e.g.
        prime-rl's ``cache_salt``) when given, else the settings' ``policy_update``, else 0
        (``"sent"``, ``"worker.policy_update"``, ``"default"``; R-T-6)."""
        if sent is not None:
            return sent, "sent"
        configured = self.settings.policy_update
        if configured is None:
            return 0, "default"
        return configured, "worker.policy_update"

    async def begin(self, row_identity: Mapping[str, str]) -> OpenEpisode:
        """Mint the episode, derive its sandbox patient, record the baseline read.

        A refused begin raises :class:`Unscored` (the episode cannot be scored, so it must be
        dropped), except a setup error, raised as itself.
        """
        row = {str(k): str(v) for k, v in row_identity.items()}
        if not row.get(IDENTITY_KEY):
            raise ValidationError(f"the task row has no {IDENTITY_KEY!r} in its identity")
        episode_id = f"{EPISODE_PREFIX}{uuid.uuid4().hex}"
        identity = {IDENTITY_KEY: sandbox_identity(row[IDENTITY_KEY], episode_id)}
        client = self._client()
        try:
            await client.begin(episode_id, self.settings.reward_contract_digest, identity)
        except RewardSealError as error:
            if is_setup_error(error):
                raise
            raise Unscored(f"episode {episode_id} could not begin: {error.reason}") from error
        finally:
            await client.close()
        return OpenEpisode(episode_id, identity, row)

    async def score(
        self,
        episode: OpenEpisode,
        *,
        runtime_signal: RuntimeSignal.ValueType = RuntimeSignal.RUNTIME_SIGNAL_COMPLETED,
        policy_update: int | None = None,
    ) -> SampleResult:
        """Score ``episode`` at ``policy_update`` (None: the settings' ``policy_update``, else
        0); the verified receipt's row.

        Raises:
            Unscored: the worker gave no scalar (an unscored outcome or a passing refusal).
            RewardSealError: a setup error, or ``require_certified`` and the receipt is not
                certified (CertificationRefused).
        """
        settings = self.settings
        update, _ = self.policy_update_for(policy_update)
        descriptor = make_descriptor(
            episode_id=episode.episode_id,
            policy_checkpoint_id=settings.policy_checkpoint_id,
            policy_update=update,
            reward_contract_digest=settings.reward_contract_digest,
            runtime_signal=runtime_signal,
        )
        client = self._client()
        try:
            receipt = await client.score(descriptor)
            row = SampleResult(episode_id=episode.episode_id, receipt=receipt, error=None)
        except RewardSealError as error:
            if is_setup_error(error):
                raise
            row = SampleResult(episode_id=episode.episode_id, receipt=None, error=error)
        finally:
            await client.close()
        if row.unscored:
            reason = row.error_reason or row.outcome
            logger.warning("episode %s unscored (%s): dropped", episode.episode_id, reason)
            raise Unscored(f"episode {episode.episode_id} is unscored ({reason}): dropped")
        enforce_certified([row], require_certified=settings.require_certified)
        return row
