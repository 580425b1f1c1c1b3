"""Bounded policy lag (R-W-7, issue 27 item 1): async trainers score step k after step k+1.

A real worker (gRPC on port 0, the seeded MockMed bundle, its SQLite store, its key) scores an
episode at update ``u`` when ``u >= highest - max_policy_lag``: with lag 1, an episode of step
k scored after one of step k+1 gets its receipt; one of step k-1 is refused
``policy_update_regressed`` with the window in ErrorInfo; lag 0 refuses as before. The highest
only moves forward, and each receipt's certificate is judged at its own update (the seeded
certificate covers updates 0..999, so 999 after 1000 is CURRENT and 998 is refused: the reach
back into an expired certificate is bounded by the lag). The setting is checked at start.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.mockmed_episodes import descriptor
from support.worker_stack import RunningStack, start_stack, stop_stack
from worker.test_worker_contract import wire_error

from rewardseal.core.errors import PolicyUpdateRegressed, ValidationError
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import CertificateState
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_worker.settings import DEFAULT_MAX_POLICY_LAG, resolve_settings

CURRENT = CertificateState.CERTIFICATE_STATE_CURRENT
EXPIRED = CertificateState.CERTIFICATE_STATE_EXPIRED

StartStack = Callable[..., Coroutine[Any, Any, RunningStack]]


@pytest.fixture
async def lag_stack(data_dir: Path) -> AsyncIterator[StartStack]:
    """Start a worker over ``data_dir`` with the lag given (flag or environment); stopped after."""
    started: list[RunningStack] = []

    async def start(
        max_policy_lag: int | str | None = None, env: dict[str, str] | None = None
    ) -> RunningStack:
        running = await start_stack(data_dir, max_policy_lag=max_policy_lag, env=env)
        started.append(running)
        return running

    yield start
    for running in started:
        await stop_stack(running)


_numbers = iter(range(1, 10_000))


def step(stack: RunningStack, update: int) -> EpisodeDescriptor:
    """A fresh episode of ``update`` (its own identity: no begin is needed to be scored)."""
    n = next(_numbers)
    return descriptor(
        stack.digest,
        f"episode.lag.{n:04d}",
        update=update,
        oracle_identity={"patient_id": f"patient-lag-{n:04d}"},
    )


async def refused(stack: RunningStack, update: int) -> dict[str, str]:
    """Score an episode of ``update``, expecting ``policy_update_regressed``; its ErrorInfo
    metadata (the window)."""
    late = step(stack, update)
    code, reason, window = await wire_error(
        stack, "ScoreEpisode", pb.ScoreEpisodeRequest(descriptor=late)
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "policy_update_regressed")
    assert stack.app.store.receipt_by_episode(late.episode_id) is None
    return window


def highest(stack: RunningStack) -> int | None:
    return stack.app.store.highest_policy_update(stack.digest)


async def test_lag_one_scores_step_k_after_step_k_plus_one(lag_stack: StartStack) -> None:
    stack = await lag_stack(max_policy_lag=1)
    assert stack.app.settings.max_policy_lag == 1
    await stack.client.score(step(stack, 5))  # step k
    await stack.client.score(step(stack, 6))  # step k+1 starts scoring
    late = await stack.client.score(step(stack, 5))  # step k, scored after k+1
    assert late.receipt.policy_update == 5
    assert highest(stack) == 6, "an episode within the lag never lowers the highest"
    assert (await stack.client.health()).highest_policy_update == 6

    # Step k-1 after k+1: below the window, refused with the window and the setting named.
    assert await refused(stack, 4) == {
        "highest": "6",
        "max_policy_lag": "1",
        "lowest_accepted": "5",
    }
    with pytest.raises(PolicyUpdateRegressed) as caught:
        await stack.client.score(step(stack, 4))
    assert "--max-policy-lag" in caught.value.message
    assert "REWARDSEAL_WORKER_MAX_POLICY_LAG" in caught.value.message
    assert caught.value.metadata["lowest_accepted"] == "5"
    assert highest(stack) == 6


async def test_lag_zero_refuses_any_update_below_the_highest(lag_stack: StartStack) -> None:
    stack = await lag_stack(env={"REWARDSEAL_WORKER_MAX_POLICY_LAG": "0"})
    assert stack.app.settings.max_policy_lag == 0
    await stack.client.score(step(stack, 6))
    await stack.client.score(step(stack, 6))  # equal is not below
    assert await refused(stack, 5) == {
        "highest": "6",
        "max_policy_lag": "0",
        "lowest_accepted": "6",
    }
    assert highest(stack) == 6


async def test_a_batch_of_interleaved_steps_is_judged_item_by_item(
    lag_stack: StartStack,
) -> None:
    """One ScoreEpisodes call holding steps k+1, k, k-1 and k+2 (lag 1): the commit's window
    moves with the items it stores, under the ledger lock, so an item the read before judging
    let through is refused once an earlier item of the batch raised the highest."""
    stack = await lag_stack(max_policy_lag=1)
    await stack.client.score(step(stack, 10))
    batch = [step(stack, u) for u in (11, 10, 9, 12, 11, 10)]
    answers = await stack.client.score_many(batch)
    kinds = [type(a).__name__ for a in answers]
    assert kinds == [
        "VerifiedReceipt",  # 11 raises the highest
        "VerifiedReceipt",  # 10 = 11 - 1
        "PolicyUpdateRegressed",  # 9: in the lookup's window (10 - 1), not once 11 is stored
        "VerifiedReceipt",  # 12
        "VerifiedReceipt",  # 11 = 12 - 1
        "PolicyUpdateRegressed",  # 10: below 11 once 12 is stored, refused by the commit
    ]
    windows = [a.metadata for a in answers if isinstance(a, PolicyUpdateRegressed)]
    assert windows == [
        {"highest": "11", "max_policy_lag": "1", "lowest_accepted": "10"},
        {"highest": "12", "max_policy_lag": "1", "lowest_accepted": "11"},
    ]
    assert highest(stack) == 12


async def test_the_certificate_is_judged_at_the_episodes_own_update(
    lag_stack: StartStack,
) -> None:
    """The seeded certificate is current for updates 0..999. With lag 1, an episode of 999
    scored after one of 1000 is certified (its own update is covered); 998 is refused: an
    expired certificate is reached back into by at most the lag."""
    stack = await lag_stack(max_policy_lag=1)
    certificate = stack.app.scorer.certificate
    assert certificate is not None
    last = certificate.issued_at_policy_update + certificate.expiry_policy_updates - 1
    ahead = await stack.client.score(step(stack, last + 1))
    assert ahead.receipt.certificate_state == EXPIRED
    assert not ahead.receipt.certified
    behind = await stack.client.score(step(stack, last))
    assert behind.receipt.certificate_state == CURRENT
    assert behind.receipt.policy_update == last
    assert (await stack.client.health()).certificate_state == EXPIRED, "read at the highest"
    window = await refused(stack, last - 1)
    assert window["lowest_accepted"] == str(last)


def test_the_default_lag_is_the_documented_one(tmp_path: Path) -> None:
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    assert settings.max_policy_lag == DEFAULT_MAX_POLICY_LAG == 2


def test_the_flag_wins_over_the_environment(tmp_path: Path) -> None:
    env = {"REWARDSEAL_WORKER_MAX_POLICY_LAG": "7"}
    assert resolve_settings(data_dir=tmp_path / "d", env=env).max_policy_lag == 7
    assert (
        resolve_settings(data_dir=tmp_path / "d", max_policy_lag="3", env=env).max_policy_lag == 3
    )


@pytest.mark.parametrize("raw", ["-1", "ten", "1.5", "", "9007199254740992"])
def test_a_bad_flag_is_refused_before_anything_is_written(tmp_path: Path, raw: str) -> None:
    data = tmp_path / "never-made"
    with pytest.raises(ValidationError, match="--max-policy-lag must be a whole number") as caught:
        resolve_settings(data_dir=data, max_policy_lag=raw, env={})
    assert "\n" not in caught.value.message
    assert not data.exists()


@pytest.mark.parametrize("raw", ["-1", "ten", "1.5"])
def test_a_bad_variable_is_refused(tmp_path: Path, raw: str) -> None:
    with pytest.raises(ValidationError, match="REWARDSEAL_WORKER_MAX_POLICY_LAG must be"):
        resolve_settings(data_dir=tmp_path / "data", env={"REWARDSEAL_WORKER_MAX_POLICY_LAG": raw})
