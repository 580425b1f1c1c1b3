"""``rewardseal-control contracts register BUNDLE_DIR`` (R-C-14): an organization registers a
contract from its bundle directory and issues its certificate before any worker joins.

A real control plane (gRPC on port 0, real SQLite, its own Ed25519 organization key) and no
worker anywhere: the bundle is files on disk, as `rewardseal-worker contract init/seal` leaves
them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf import json_format
from support.control import ControlStack, calibration_summary, start_control, stop_control
from support.control_cli import cli

from rewardseal.core.bundle_files import read_sealed_contract
from rewardseal.core.contract import contract_digest
from rewardseal.core.signing import TrustSet, verify_certificate
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer
from rewardseal_control.settings import ADMIN_TOKEN_ENV, TOKEN_ENV
from rewardseal_mockmed import contract as mockmed

CONTRACT = mockmed.mockmed_contract()
DIGEST = contract_digest(CONTRACT)


@pytest.fixture(autouse=True)
def no_token_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ADMIN_TOKEN_ENV, TOKEN_ENV, "REWARDSEAL_CONTROL_TARGET"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.sqlite'}")
    yield stack
    await stop_control(stack)


def write_bundle_files(directory: Path) -> Path:
    """The MockMed tier-2 bundle as files, written by hand: nothing of the worker runs."""
    directory.mkdir(parents=True)
    text = json_format.MessageToJson(CONTRACT, preserving_proto_field_name=True)
    (directory / "contract.json").write_text(text + "\n")
    for name, document in (
        ("required_effects.json", mockmed.REQUIRED_EFFECTS),
        ("forbidden_effects.json", mockmed.FORBIDDEN_EFFECTS),
        ("oracle_recipe.json", mockmed.TIER2_RECIPE),
    ):
        (directory / name).write_text(json.dumps(document, indent=2))
    return directory


def write_calibration(path: Path) -> Path:
    document = json_format.MessageToDict(
        calibration_summary(DIGEST, held_out=True), preserving_proto_field_name=True
    )
    path.write_text(json.dumps(document))
    return path


async def test_register_then_issue_a_production_certificate_with_no_worker(
    control: ControlStack, tmp_path: Path
) -> None:
    bundle = write_bundle_files(tmp_path / "bundle")
    code, out, err = await cli(control, "contracts", "register", str(bundle))
    assert (code, err) == (0, "")
    assert out.startswith(f"registered: contract {CONTRACT.contract_id}")
    assert DIGEST in out
    # Again: contracts are immutable, a repeat is a no-op that says so.
    code, out, err = await cli(control, "contracts", "register", str(bundle), "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "reward_contract_digest": DIGEST,
        "created": False,
        "contract_id": CONTRACT.contract_id,
        "contract_version": CONTRACT.contract_version,
    }
    code, out, _ = await cli(control, "contracts", "list", "--json")
    assert [c["reward_contract_digest"] for c in json.loads(out)["contracts"]] == [DIGEST]

    calibration = write_calibration(tmp_path / "calibration.json")
    code, out, err = await cli(
        control,
        "certificates",
        "issue",
        "--contract",
        DIGEST,
        "--calibration",
        str(calibration),
        "--scope",
        "production",
        "--reason",
        "certified before any worker joined",
        "--json",
    )
    assert (code, err) == (0, "")
    certificate = json_format.ParseDict(json.loads(out)["certificate"], RewardCertificate())
    assert certificate.reward_contract_digest == DIGEST
    assert certificate.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
    assert certificate.issuer == CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION
    assert verify_certificate(certificate, TrustSet([control.key.public_key]))


async def test_a_bundle_whose_documents_do_not_match_is_refused_locally(
    control: ControlStack, tmp_path: Path
) -> None:
    bundle = write_bundle_files(tmp_path / "bundle")
    edited = dict(mockmed.REQUIRED_EFFECTS, note="edited after sealing")
    (bundle / "required_effects.json").write_text(json.dumps(edited))
    (bundle / "oracle_recipe.json").unlink()
    code, out, err = await cli(control, "contracts", "register", str(bundle))
    assert (code, out) == (2, "")
    assert "required_effects.json: digest mismatch" in err
    assert "bundle file oracle_recipe.json is missing" in err
    code, _, err = await cli(control, "contracts", "register", str(tmp_path / "nowhere"))
    assert code == 2
    assert "does not exist" in err
    code, out, _ = await cli(control, "contracts", "list", "--json")
    assert json.loads(out).get("contracts", []) == []


def test_the_sealed_contract_is_the_one_the_worker_loads(tmp_path: Path) -> None:
    """One reading of a bundle: control's digest is the worker's (rewardseal.core.bundle_files
    is what both use)."""
    from rewardseal_worker.bundle import load_bundle

    bundle = write_bundle_files(tmp_path / "bundle")
    sealed = read_sealed_contract(bundle)
    assert sealed.digest == DIGEST == load_bundle(bundle).contract_digest
    assert sealed.contract == CONTRACT
