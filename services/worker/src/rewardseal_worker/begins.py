"""Beginning episodes (R-W-1, R-W-3): one baseline read per identity, one store transaction.

Every begin goes through :func:`begin_batch`: the unary ``BeginEpisode`` calls grouped by the
micro-batcher, a ``BeginEpisodes`` call, and the begins a ``StreamEpisodes`` carries. The
checks that need no read (id, contract, identity shape) are the scorer's
(``Scorer.begin_job``); the refusals that need the store (episode scored, identity busy,
episode open elsewhere) are ``WorkerStore.begin_episodes``'s, decided inside its one
transaction, so they hold against concurrent writers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rewardseal.core.clock import timestamp
from rewardseal.core.errors import InvalidEpisode, RewardSealError, preview
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.v1.worker_service_pb2 import BeginEpisodeResponse
from rewardseal_worker.identity import Identity
from rewardseal_worker.oracles.base import OracleReader, OracleUnavailable
from rewardseal_worker.store import BeginDecision, BeginItem, KeptRegistration, WorkerStore

_log = logging.getLogger(__name__)

BeginOutcome = BeginEpisodeResponse | RewardSealError
"""What one begin yields: the registration, or the error for that episode alone."""


@dataclass(frozen=True)
class BeginJob:
    """One begin that passed the checks needing no read."""

    episode_id: str
    identity: Identity
    task_parameters: dict[str, ParameterValue] | None = None
    """The checked values it binds (R-W-18); None when the contract declares none."""


def repeat_of_earlier(episode_id: str, seen: set[str]) -> InvalidEpisode | None:
    """The refusal for an episode id an earlier item of the same batch named (else None, and
    ``episode_id`` is added to ``seen``). Only the repeat is refused: the first item stands."""
    if episode_id in seen:
        return InvalidEpisode(f"episode {preview(episode_id)} appears twice in one batch")
    seen.add(episode_id)
    return None


def begin_batch(
    jobs: Sequence[BeginJob],
    *,
    contract_digest: str,
    store: WorkerStore,
    reader: OracleReader,
    begun_at: datetime,
    ttl_seconds: float,
) -> list[BeginOutcome]:
    """Read every job's baseline, then register them all in ONE store transaction.

    One outcome per job, in order. A baseline that cannot be read is registered as None: the
    episode then scores RECONCILIATION_REQUIRED (unscored), never 0. The store's refusals
    (DuplicateEpisode, IdentityBusy, IdentityConflict) are the refused job's alone. A store
    failure raises (Unavailable when the database cannot be reached) and stores nothing: the
    registrations are one transaction. Blocking: runs in a worker thread.
    """
    if not jobs:
        return []
    stamp = timestamp(begun_at, "begun_at")
    reads = reader.read_many([job.identity for job in jobs])
    items: list[BeginItem] = []
    answers: list[BeginEpisodeResponse] = []
    for job, read in zip(jobs, reads, strict=True):
        baseline = None
        if isinstance(read, OracleUnavailable):
            _log.warning("baseline read failed for episode %s: %s", job.episode_id, read)
        else:
            baseline = read
        items.append(
            BeginItem(
                contract_digest=contract_digest,
                episode_id=job.episode_id,
                identity=job.identity,
                baseline=baseline,
                begun_at=begun_at,
                ttl_seconds=ttl_seconds,
                task_parameters=job.task_parameters,
            )
        )
        answers.append(
            BeginEpisodeResponse(
                episode_id=job.episode_id, begun_at=stamp, baseline_recorded=baseline is not None
            )
        )
    # An already scored episode is refused by the store too (its receipt is read inside the
    # transaction): no separate lookup round trip before the read.
    decisions = store.begin_episodes(items)
    return [_answer(answer, decision) for answer, decision in zip(answers, decisions, strict=True)]


def _answer(answer: BeginEpisodeResponse, decision: BeginDecision) -> BeginOutcome:
    """The outcome of one begin: ``answer`` as prepared, or what the store decided instead."""
    if decision is None:
        return answer
    if isinstance(decision, KeptRegistration):
        # An idempotent re-begin answers the registration that stands: the episode is judged
        # against the first baseline, so "baseline_recorded" must be the first begin's.
        return BeginEpisodeResponse(
            episode_id=answer.episode_id,
            begun_at=timestamp(decision.begun_at, "begun_at"),
            baseline_recorded=decision.baseline_recorded,
        )
    return decision
