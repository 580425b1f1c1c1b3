"""Run the proof: start (or reach) MockMed and the tier-2 rest worker, play every trial.

:func:`local_services` starts both as child processes in a directory of the caller's choice
(free loopback ports, fresh tokens) and stops them when its ``with`` block ends. The worker
serves the seeded ``contracts/mockmed-rest`` bundle: it reads the system of record through
MockMed's HTTP read API, so MockMed's fault switch (``down``) is a real oracle outage while the
UI still answers with its banner. Beside them it starts the seeded parameterized bundle
(``contracts/mockmed-params``, task parameters per episode) on a second worker over the same
seeded data, and a second MockMed over the SQLite system of record that bundle reads (the
seeded ``mockmed/mockmed.sqlite``), through which the parameterized conditions act.
:func:`run_trials` plays every condition ``trials`` times
against any :class:`Services`, local or already running.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.worker_client import WorkerClient, make_descriptor
from rewardseal_kit.proof.conditions import (
    CONDITIONS,
    OUTAGE,
    PARAMS_CONDITIONS,
    MockMedUI,
    play,
    task_parameters,
)
from rewardseal_kit.proof.rewards import TrialResult, certified_result, screen_result
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_server.localstack import HOST, LocalServices, serve_command

__all__ = [
    "MIN_TRIALS",
    "PARAMS_CONTRACT",
    "REST_CONTRACT",
    "ParamsWorker",
    "Services",
    "local_services",
    "run_trial",
    "run_trials",
    "start_mockmed",
]

MIN_TRIALS: Final = 3
CHECKPOINT: Final = "policy_checkpoint_proof_0"
REST_CONTRACT: Final = Path("contracts") / "mockmed-rest"
"""The worker's seeded rest bundle, relative to its data directory (``--seed-mockmed``)."""
PARAMS_CONTRACT: Final = Path("contracts") / "mockmed-params"
"""The seeded parameterized bundle (encounter type and note per episode), likewise."""
SEEDED_DATABASE: Final = Path("mockmed") / "mockmed.sqlite"
"""The SQLite system of record the parameterized bundle reads, relative to the data directory."""
MOCKMED_START_SECONDS: Final = 60.0
WORKER_START_SECONDS: Final = 300.0
FAULT_DOWN: Final = "down"
FAULT_NONE: Final = "none"


@dataclass(frozen=True)
class ParamsWorker:
    """The worker serving the parameterized bundle and the MockMed over the SoR it reads."""

    worker_target: str
    worker_public_key: bytes
    contract_digest: str
    mockmed_url: str


@dataclass(frozen=True)
class Services:
    """Where the proof reaches the tier-2 worker and MockMed, and with which credentials.

    The worker must serve a tier-2 contract that reads MockMed through its HTTP API (the
    seeded rest bundle), or the outage stages nothing. ``mockmed_admin_token`` sets the fault
    switch. ``params`` (None: the parameterized conditions are not played) shares
    ``worker_token`` and ``mockmed_token``.
    """

    worker_target: str
    worker_token: str
    worker_public_key: bytes
    contract_digest: str
    mockmed_url: str
    mockmed_token: str
    mockmed_admin_token: str
    params: ParamsWorker | None = None


def start_mockmed(
    local: LocalServices, database: Path, token: str, admin_token: str, seconds: float
) -> str:
    """Start MockMed in ``local`` on the SQLite file ``database`` with its two bearer tokens,
    waiting at most ``seconds`` for it; its base URL. The one way both proofs start it.

    Raises:
        Unavailable: it did not start (the message ends with its log).
    """
    # Imported here: the core package loads SQLAlchemy only where a store is used.
    from rewardseal_server.sqlstore import sqlite_url

    mockmed = local.start(
        "mockmed",
        serve_command(
            "rewardseal-mockmed",
            local.ready_file("mockmed"),
            "--db-url",
            sqlite_url(database),
        ),
        {"MOCKMED_TOKEN": token, "MOCKMED_ADMIN_TOKEN": admin_token},
        seconds,
    )
    return f"http://{HOST}:{mockmed['port']}"


@contextmanager
def local_services(run_dir: Path, *, params: bool = True) -> Iterator[Services]:
    """MockMed and the seeded rest worker as child processes of this one, stopped on exit.

    ``run_dir`` holds MockMed's database, the worker's data directory, ready files and logs.
    ``params`` False: no parameterized worker and MockMed (``Services.params`` None), for a
    caller that only needs the rest worker.

    Raises:
        Unavailable: a service did not start (the message ends with its log).
        ValidationError: the worker does not serve a tier-2 contract.
    """
    worker_token, mockmed_token, admin_token = (secrets.token_urlsafe(32) for _ in range(3))
    worker_data = run_dir / "worker"
    with LocalServices(run_dir) as local:
        mockmed_url = start_mockmed(
            local,
            run_dir / "mockmed.sqlite",
            mockmed_token,
            admin_token,
            MOCKMED_START_SECONDS,
        )
        worker = local.start(
            "worker",
            serve_command(
                "rewardseal-worker",
                local.ready_file("worker"),
                "--seed-mockmed",
                "--data-dir",
                str(worker_data),
                "--contract",
                str(worker_data / REST_CONTRACT),
            ),
            {
                "REWARDSEAL_WORKER_TOKEN": worker_token,
                # The rest recipe names these variables; the bundle holds neither value.
                "MOCKMED_API_URL": mockmed_url,
                "MOCKMED_API_TOKEN": mockmed_token,
            },
            WORKER_START_SECONDS,
        )
        if worker.get("oracle_tier") != 2:
            raise ValidationError(f"the worker serves tier {worker.get('oracle_tier')}, not 2")
        # The seeded worker has written its data by now, so the parameterized one can share it.
        found = None
        if params:
            tokens = (mockmed_token, admin_token)
            found = _start_params(local, run_dir, worker_data, tokens, worker_token)
        yield Services(
            worker_target=f"{HOST}:{worker['port']}",
            worker_token=worker_token,
            worker_public_key=bytes.fromhex(str(worker["public_key"])),
            contract_digest=str(worker["contract_digest"]),
            mockmed_url=mockmed_url,
            mockmed_token=mockmed_token,
            mockmed_admin_token=admin_token,
            params=found,
        )


def _start_params(
    local: LocalServices,
    run_dir: Path,
    worker_data: Path,
    mockmed_tokens: tuple[str, str],
    worker_token: str,
) -> ParamsWorker:
    """Start the parameterized bundle's worker on the seeded ``worker_data`` (keys, bundles,
    certificates; its own receipt store, as make demo's) and a MockMed over the SQLite system
    of record that bundle reads."""
    from rewardseal_server.sqlstore import sqlite_url

    mockmed_token, admin_token = mockmed_tokens
    mockmed = local.start(
        "mockmed-params",
        serve_command(
            "rewardseal-mockmed",
            local.ready_file("mockmed-params"),
            "--db-url",
            sqlite_url(worker_data / SEEDED_DATABASE),
        ),
        {"MOCKMED_TOKEN": mockmed_token, "MOCKMED_ADMIN_TOKEN": admin_token},
        MOCKMED_START_SECONDS,
    )
    worker = local.start(
        "worker-params",
        serve_command(
            "rewardseal-worker",
            local.ready_file("worker-params"),
            "--data-dir",
            str(worker_data),
            "--contract",
            str(worker_data / PARAMS_CONTRACT),
            "--db-url",
            sqlite_url(run_dir / "worker-params.sqlite"),
        ),
        {"REWARDSEAL_WORKER_TOKEN": worker_token},
        WORKER_START_SECONDS,
    )
    return ParamsWorker(
        worker_target=f"{HOST}:{worker['port']}",
        worker_public_key=bytes.fromhex(str(worker["public_key"])),
        contract_digest=str(worker["contract_digest"]),
        mockmed_url=f"http://{HOST}:{mockmed['port']}",
    )


def run_trial(
    worker: WorkerClient, ui: MockMedUI, digest: str, condition: str, trial: int
) -> tuple[TrialResult, TrialResult]:
    """One trial of ``condition``: begin, act through MockMed, score both ways.

    A fresh synthetic patient per trial. The screen reward reads the screen the episode ended
    on; the worker scores the same episode (for the outage, with MockMed's read API down).
    """
    suffix = secrets.token_hex(6)
    patient = f"patient-proof-{suffix}"
    episode_id = f"proof-{condition.replace('_', '-')}-{trial}-{suffix}"
    identity = {IDENTITY_KEY: patient}
    values = task_parameters(condition) if condition in PARAMS_CONDITIONS else None
    worker.begin(episode_id, digest, identity, task_parameters=values)
    screen = play(condition, patient, ui)
    on_screen = screen_result(condition, trial, episode_id, screen)
    descriptor = make_descriptor(
        episode_id=episode_id,
        policy_checkpoint_id=CHECKPOINT,
        policy_update=0,
        reward_contract_digest=digest,
        oracle_identity=identity,
    )
    outage = condition == OUTAGE
    if outage:
        ui.set_fault(FAULT_DOWN)
    try:
        got = worker.score(descriptor)
    finally:
        if outage:
            ui.set_fault(FAULT_NONE)
    return on_screen, certified_result(condition, trial, got)


def run_trials(services: Services, trials: int) -> list[TrialResult]:
    """Every condition ``trials`` times (at least :data:`MIN_TRIALS`), both rewards each; the
    parameterized ones only where ``services.params`` names their worker."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < MIN_TRIALS:
        raise ValidationError(f"the proof needs at least {MIN_TRIALS} trials per condition")
    ui = MockMedUI(services.mockmed_url, services.mockmed_token, services.mockmed_admin_token)
    results: list[TrialResult] = []
    try:
        with WorkerClient(
            services.worker_target,
            token=services.worker_token,
            trust=TrustSet([services.worker_public_key]),
        ) as worker:
            for condition in CONDITIONS:
                if condition in PARAMS_CONDITIONS:
                    continue
                for trial in range(1, trials + 1):
                    results += run_trial(worker, ui, services.contract_digest, condition, trial)
    finally:
        ui.close()
    if services.params is not None:
        results += _run_params_trials(services, services.params, trials)
    return results


def _run_params_trials(services: Services, params: ParamsWorker, trials: int) -> list[TrialResult]:
    """The parameterized conditions on their own worker, acting through their own MockMed."""
    ui = MockMedUI(params.mockmed_url, services.mockmed_token)
    results: list[TrialResult] = []
    try:
        with WorkerClient(
            params.worker_target,
            token=services.worker_token,
            trust=TrustSet([params.worker_public_key]),
        ) as worker:
            for condition in PARAMS_CONDITIONS:
                for trial in range(1, trials + 1):
                    results += run_trial(worker, ui, params.contract_digest, condition, trial)
    finally:
        ui.close()
    return results
