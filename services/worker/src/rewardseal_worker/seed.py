"""Seed a worker data directory with MockMed: the synthetic SoR, four bundles, certificates.

A demo and development feature (``rewardseal-worker serve --seed-mockmed``): the worker imports
this module only when asked to seed, and it needs the ``rewardseal-mockmed`` distribution
(the worker's ``mockmed`` extra): :mod:`rewardseal_mockmed.seeding` writes the database and the
screen dump, :mod:`rewardseal_mockmed.contract` is the MockMed contract and
:mod:`rewardseal_mockmed.extradup.calibration` the ExtraDup families' replay (the kit builds on
the same modules; nothing in production imports the kit). What is the worker's here: the bundles,
their calibration with the ExtraDup families (:data:`MOCKMED_FAULT_FAMILIES`), the self-signed
SYNTHETIC certificates, the seeding lock and idempotence.

:func:`seed_mockmed` lays out::

    data_dir/mockmed/mockmed.sqlite        the synthetic EMR (table ``encounters``, R-MM-1)
    data_dir/mockmed/screen.json           the tier-0 screen dump (what the UI shows)
    data_dir/contracts/mockmed/            tier-2 bundle (sql oracle) + certificate.json
                                           + calibration.json
    data_dir/contracts/mockmed-tier0/      tier-0 bundle (screen_dump oracle), no certificate
    data_dir/contracts/mockmed-rest/       tier-2 bundle (rest oracle: MockMed's read API at the
                                           URL in $MOCKMED_API_URL, bearer $MOCKMED_API_TOKEN)
                                           + its own certificate.json + calibration.json
    data_dir/contracts/mockmed-params/     tier-2 bundle (sql oracle) of the parameterized
                                           contract (encounter type and note per episode,
                                           R-MSG-11) + its own certificate.json +
                                           calibration.json (values drawn per trial, R-CAL-6)

Everything is synthetic: the background rows belong to invented patients, and no real patient
data is involved anywhere.

The rest bundle judges the same effects as the sql one but reads through MockMed's HTTP read
API, so a fault on that API (MockMed's fault switch) is an oracle outage the worker reports as
FAILED_PLATFORM. Its contract differs from the sql one only in its id, channel (API) and recipe
digest; it is calibrated with the same generator seed and trial count and self-signed the same
way (a calibration summary names one contract, so each bundle has its own).

Seeding is idempotent. A second run (or a run on a copy of the directory at another path) keeps
the database and its rows, the screen dump, the bundles and the certificate, so every digest and
every receipt that points at a row stays valid; it recalibrates nothing and signs nothing. Files
that exist with other content are never overwritten: seeding refuses instead. Keys, tokens and
receipt stores elsewhere in ``data_dir`` are never touched.

Seeding runs under an exclusive lock (``data_dir/.seed.lock``, ``flock``): two workers started
with ``--seed-mockmed`` on one empty data directory do not both calibrate and sign (the second
used to find the first's certificate.json "with different content" and die); the second waits,
then finds the seed complete and reuses it. (``rewardseal-worker serve`` refuses a second worker
on one data dir and store before it seeds: :mod:`rewardseal_worker.data_dir_lock`; this lock
still serializes workers with stores of their own, and library callers.) The data directory
and ``mockmed/`` are made 0700, the database 0600 (SQLite gives its -wal/-shm files the same
mode).

To stage episodes on a seeded directory (an honest write, a duplicate, the banner lie) use
:mod:`rewardseal_mockmed.seeding` on :data:`DATABASE_PATH` and :data:`SCREEN_PATH`.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rewardseal.core.calibration import epsilon_from_summary
from rewardseal.core.certificates import satisfies, unmet
from rewardseal.core.contract import contract_digest
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.v1.certificate_pb2 import CalibrationSummary, RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import OracleChannel
from rewardseal_mockmed import contract as mockmed
from rewardseal_mockmed.extradup.calibration import EXTRADUP_REPLAY
from rewardseal_mockmed.schema import ENCOUNTERS_TABLE
from rewardseal_mockmed.seeding import DEFAULT_BACKGROUND_ROWS, create_database, create_screen
from rewardseal_mockmed.store import DEFAULT_SEED
from rewardseal_server.service_settings import make_private_dir
from rewardseal_worker.bundle import (
    CALIBRATION_FILE,
    CERTIFICATE_FILE,
    CONTRACT_FILE,
    FORBIDDEN_EFFECTS_FILE,
    ORACLE_RECIPE_FILE,
    REQUIRED_EFFECTS_FILE,
    ContractBundle,
    load_bundle,
    write_bundle,
)
from rewardseal_worker.calibration import (
    DEFAULT_TRIALS,
    FaultFamilies,
    ProgressCallback,
    calibrate,
    checker_configuration_digest,
    self_signed_certificate,
    summary_from_json,
    summary_to_json,
)

__all__ = [
    "DATABASE_PATH",
    "DEFAULT_SEED",
    "MOCKMED_FAULT_FAMILIES",
    "PARAMS_BUNDLE",
    "REST_BUNDLE",
    "REST_RECIPE",
    "REST_TOKEN_ENV",
    "REST_URL_ENV",
    "SCREEN_PATH",
    "TIER0_BUNDLE",
    "TIER2_BUNDLE",
    "SeedResult",
    "rest_contract",
    "seed_mockmed",
]

DATABASE_PATH: Final = Path("mockmed") / "mockmed.sqlite"
"""The MockMed SoR, relative to the data directory (the tier-2 recipe points here)."""
SCREEN_PATH: Final = Path("mockmed") / "screen.json"
"""The tier-0 screen dump, relative to the data directory (the tier-0 recipe points here)."""
TIER2_BUNDLE: Final = Path("contracts") / "mockmed"
"""The tier-2 bundle directory, relative to the data directory."""
TIER0_BUNDLE: Final = Path("contracts") / "mockmed-tier0"
"""The tier-0 bundle directory, relative to the data directory."""
REST_BUNDLE: Final = Path("contracts") / "mockmed-rest"
"""The tier-2 rest bundle directory (MockMed's HTTP read API), relative to the data directory."""
PARAMS_BUNDLE: Final = Path("contracts") / "mockmed-params"
"""The parameterized tier-2 bundle directory (sql oracle), relative to the data directory."""
REST_URL_ENV: Final = "MOCKMED_API_URL"
"""The variable the rest recipe reads MockMed's base URL from (never stored in the bundle)."""
REST_TOKEN_ENV: Final = "MOCKMED_API_TOKEN"
"""The variable the rest recipe reads MockMed's client bearer token from."""
REST_RECIPE: Final[Mapping[str, Any]] = {
    "kind": "rest",
    "base_url_env": REST_URL_ENV,
    "token_env": REST_TOKEN_ENV,
    "path": "/api/encounters",
    "collection": ENCOUNTERS_TABLE,
    "identity_params": {mockmed.IDENTITY_KEY: "patient_id"},
    "timeout_seconds": 2.0,
}
"""``GET $MOCKMED_API_URL/api/encounters?patient_id=P``: the rest oracle's read of MockMed."""
MOCKMED_FAULT_FAMILIES: Final = FaultFamilies(
    task_id=mockmed.mockmed_contract().task_id,
    identity_keys=(mockmed.IDENTITY_KEY,),
    required_effects=mockmed.REQUIRED_EFFECTS,
    replay=EXTRADUP_REPLAY,
)
"""The MockMed task's ExtraDup families (R-MM-3): what the seeded bundles calibrate with."""
SEED_LOCK: Final = ".seed.lock"
"""The lock file in the data directory that seeding holds (see the module docstring)."""

_CORE_FILES = (CONTRACT_FILE, REQUIRED_EFFECTS_FILE, FORBIDDEN_EFFECTS_FILE, ORACLE_RECIPE_FILE)


@dataclass(frozen=True)
class SeedResult:
    """Where the seeded MockMed pieces are and what they are.

    ``created`` is True when this call wrote anything (database, screen dump, a bundle file or
    the certificate); False when it found everything in place and reused it.
    """

    tier2_bundle_dir: Path
    tier0_bundle_dir: Path
    rest_bundle_dir: Path
    params_bundle_dir: Path
    database_path: Path
    screen_path: Path
    contract_digest: str
    tier0_contract_digest: str
    rest_contract_digest: str
    params_contract_digest: str
    certificate: RewardCertificate
    epsilon: float
    created: bool
    calibration: CalibrationSummary


# --------------------------------------------------------------------------------------------
# Bundles and the certificate
# --------------------------------------------------------------------------------------------


_SQL: Final = "sql"
_SCREEN: Final = "screen"
_REST: Final = "rest"
_PARAMS: Final = "params"


def rest_contract() -> RewardContract:
    """The MockMed tier-2 contract read through MockMed's HTTP API (:data:`REST_RECIPE`).

    The sql contract with its own id, the API channel and the rest recipe's digest.
    """
    contract = mockmed.mockmed_contract(tier=2)
    contract.contract_id = "mockmed.triage-create.tier2-rest"
    contract.oracle.channel = OracleChannel.ORACLE_CHANNEL_API
    contract.oracle.oracle_recipe_digest = digest_json(dict(REST_RECIPE))
    return contract


def _documents(reader: str) -> dict[str, Any]:
    """The bundle documents of the MockMed contract read by ``reader`` (sql, screen or rest;
    params: the parameterized contract, read by sql)."""
    if reader == _PARAMS:
        return {
            "contract": mockmed.mockmed_parameterized_contract(),
            "required_doc": mockmed.PARAMETERIZED_REQUIRED_EFFECTS,
            "forbidden_doc": mockmed.FORBIDDEN_EFFECTS,
            "recipe_doc": mockmed.TIER2_RECIPE,
        }
    if reader == _REST:
        contract, recipe = rest_contract(), dict(REST_RECIPE)
    elif reader == _SQL:
        contract, recipe = mockmed.mockmed_contract(tier=2), mockmed.TIER2_RECIPE
    else:
        contract, recipe = mockmed.mockmed_contract(tier=0), mockmed.TIER0_RECIPE
    return {
        "contract": contract,
        "required_doc": mockmed.REQUIRED_EFFECTS,
        "forbidden_doc": mockmed.FORBIDDEN_EFFECTS,
        "recipe_doc": recipe,
    }


def _ensure_bundle(directory: Path, reader: str, trust: TrustSet) -> tuple[ContractBundle, bool]:
    """Load the MockMed bundle read by ``reader`` at ``directory``, writing missing files first.

    Existing files are never replaced: write_bundle refuses any that differ, and a bundle that
    loads but holds another contract is refused here.
    """
    docs = _documents(reader)
    contract: RewardContract = docs["contract"]
    created = False
    if not all((directory / name).exists() for name in _CORE_FILES):
        # write_bundle leaves identical files alone and refuses differing or stale ones.
        write_bundle(directory, **docs)
        created = True
    bundle = load_bundle(directory, trust=trust)
    expected = contract_digest(contract)
    if bundle.contract_digest != expected:
        raise ValidationError(
            f"{directory} holds contract {bundle.contract_digest}, not the MockMed {reader} "
            f"contract {expected}; refusing to overwrite it"
        )
    return bundle, created


def _reused_certificate(bundle: ContractBundle) -> tuple[RewardCertificate, CalibrationSummary]:
    """The bundle's existing certificate and summary, checked against each other."""
    certificate = bundle.certificate
    assert certificate is not None
    if bundle.calibration is None:
        raise ValidationError(
            f"{bundle.path / CERTIFICATE_FILE} has no {CALIBRATION_FILE} beside it; "
            "refusing to guess the calibration it rests on"
        )
    summary = summary_from_json(bundle.calibration)
    epsilon = epsilon_from_summary(summary)
    if not math.isclose(certificate.epsilon, epsilon, rel_tol=1e-12, abs_tol=0.0):
        raise ValidationError(
            f"{CERTIFICATE_FILE} states epsilon {certificate.epsilon!r} but {CALIBRATION_FILE} "
            f"gives {epsilon!r}"
        )
    for name in ("checker_configuration_digest", "calibration_corpus_digest"):
        if getattr(certificate, name) != getattr(summary, name):
            raise ValidationError(f"{CERTIFICATE_FILE} and {CALIBRATION_FILE} differ in {name}")
    policy = bundle.contract.certificate_policy
    if not satisfies(certificate, policy):
        raise ValidationError(
            f"{CERTIFICATE_FILE} does not satisfy the contract's policy: "
            + "; ".join(unmet(certificate, policy))
        )
    return certificate, summary


def _ensure_certificate(
    bundle: ContractBundle,
    reader: str,
    key: SigningKey,
    *,
    seed: int,
    trials: int,
    progress: ProgressCallback | None,
) -> tuple[ContractBundle, RewardCertificate, CalibrationSummary, bool]:
    """``bundle`` with its certificate: the existing one (checked), else calibrate and sign.

    Returns the (re)loaded bundle, its certificate, the calibration summary and whether this
    call signed a certificate.
    """
    if bundle.certificate is not None:
        certificate, summary = _reused_certificate(bundle)
        return bundle, certificate, summary, False
    # The ExtraDup families play the fixed task's write; the parameterized task has its own.
    families = None if reader == _PARAMS else MOCKMED_FAULT_FAMILIES
    result = calibrate(bundle, seed=seed, trials=trials, families=families, progress=progress)
    summary = result.summary
    calibration_doc = summary_to_json(summary)
    if bundle.calibration is not None and dict(bundle.calibration) != calibration_doc:
        # Left by an interrupted run with other parameters: not ours to replace.
        raise ValidationError(
            f"{bundle.path / CALIBRATION_FILE} exists without a certificate and differs from "
            "this calibration; refusing to overwrite it"
        )
    if summary.checker_configuration_digest != checker_configuration_digest(bundle):
        raise ValidationError("calibration ran with another checker configuration")
    certificate = self_signed_certificate(bundle, summary, key)
    write_bundle(
        bundle.path,
        **_documents(reader),
        certificate=certificate,
        calibration=calibration_doc,
    )
    reloaded = load_bundle(bundle.path, trust=TrustSet([key.public_key]))
    return reloaded, certificate, summary, True


def seed_mockmed(
    data_dir: Path,
    *,
    key: SigningKey,
    trials: int = DEFAULT_TRIALS,
    seed: int = DEFAULT_SEED,
    background_rows: int = DEFAULT_BACKGROUND_ROWS,
    progress: ProgressCallback | None = None,
) -> SeedResult:
    """Seed (or re-open) MockMed in ``data_dir`` and return where everything is.

    On first run: create the database with ``background_rows`` synthetic rows, the empty screen
    dump, the tier-2 (sql), tier-0, rest and parameterized bundles, run ``trials`` calibration
    trials on the sql, rest and parameterized bundles (generator seed ``seed``; the ExtraDup
    families on the first two), and self-sign for each a SYNTHETIC certificate with ``key``
    that satisfies the contract's certificate policy. Later runs reuse what exists (see the
    module docstring).

    Raises:
        ValidationError: an existing file differs from what seeding would write, the existing
            certificate does not verify against ``key`` or does not match its calibration, or
            the calibration does not earn a certificate the contract accepts (too few trials,
            or false accepts).
    """
    data_dir = make_private_dir(Path(data_dir))
    with _seed_lock(data_dir):
        return _seed_locked(
            data_dir,
            key=key,
            trials=trials,
            seed=seed,
            background_rows=background_rows,
            progress=progress,
        )


@contextlib.contextmanager
def _seed_lock(data_dir: Path) -> Iterator[None]:
    """Hold the exclusive seeding lock of ``data_dir`` (waits for another seeder to finish).

    ``flock`` is released by the kernel when the holder exits, however it exits, so a seeder
    that crashed never leaves the directory locked.
    """
    fd = os.open(
        data_dir / SEED_LOCK,
        os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0),
        0o600,
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _seed_locked(
    data_dir: Path,
    *,
    key: SigningKey,
    trials: int,
    seed: int,
    background_rows: int,
    progress: ProgressCallback | None,
) -> SeedResult:
    """:func:`seed_mockmed`'s work, run under the seeding lock."""
    trust = TrustSet([key.public_key])
    database_path = data_dir / DATABASE_PATH
    screen_path = data_dir / SCREEN_PATH
    created = create_database(database_path, background_rows=background_rows, seed=seed)
    created = create_screen(screen_path) or created

    tier0, tier0_created = _ensure_bundle(data_dir / TIER0_BUNDLE, _SCREEN, trust)
    tier2, tier2_created = _ensure_bundle(data_dir / TIER2_BUNDLE, _SQL, trust)
    rest, rest_created = _ensure_bundle(data_dir / REST_BUNDLE, _REST, trust)
    params, params_created = _ensure_bundle(data_dir / PARAMS_BUNDLE, _PARAMS, trust)
    created = created or tier0_created or tier2_created or rest_created or params_created

    tier2, certificate, summary, tier2_signed = _ensure_certificate(
        tier2, _SQL, key, seed=seed, trials=trials, progress=progress
    )
    rest, _, _, rest_signed = _ensure_certificate(
        rest, _REST, key, seed=seed, trials=trials, progress=progress
    )
    params, _, _, params_signed = _ensure_certificate(
        params, _PARAMS, key, seed=seed, trials=trials, progress=progress
    )
    created = created or tier2_signed or rest_signed or params_signed

    return SeedResult(
        tier2_bundle_dir=tier2.path,
        tier0_bundle_dir=tier0.path,
        rest_bundle_dir=rest.path,
        params_bundle_dir=params.path,
        database_path=database_path.resolve(),
        screen_path=screen_path.resolve(),
        contract_digest=tier2.contract_digest,
        tier0_contract_digest=tier0.contract_digest,
        rest_contract_digest=rest.contract_digest,
        params_contract_digest=params.contract_digest,
        certificate=certificate,
        epsilon=epsilon_from_summary(summary),
        created=created,
        calibration=summary,
    )
