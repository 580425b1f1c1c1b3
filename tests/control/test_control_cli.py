"""``rewardseal-control`` against a running control plane: tables for people, ``--json`` for
scripts, exit statuses; and ``serve`` / ``migrate`` as real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf import json_format
from support.builders import ISSUED_AT_UPDATE, make_certificate, make_facts
from support.control import (
    ADMIN,
    CLIENT_TOKEN,
    TRAINER,
    ControlStack,
    calibration_summary,
    start_control,
    stop_control,
)
from support.control_cli import cli, table_rows
from support.control_store import list_audit

from rewardseal.core.calibration import clopper_pearson_upper
from rewardseal.core.contract import contract_digest
from rewardseal.core.receipts import build_receipt, seal_receipt
from rewardseal.core.revocation import RevocationFollower
from rewardseal.core.signing import SigningKey, TrustSet, verify_certificate
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationList, RewardCertificate
from rewardseal.v1.enums_pb2 import IssuerKeyRole, RewardOutcome
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.settings import ADMIN_TOKEN_ENV, TOKEN_ENV
from rewardseal_kit.mockmed import mockmed_contract

CONTRACT = mockmed_contract()
DIGEST = contract_digest(CONTRACT)
WORKER_KEY = SigningKey.from_seed(bytes(range(32)))
CLI = Path(sys.executable).with_name("rewardseal-control")


@pytest.fixture(autouse=True)
def no_token_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens come from flags in these tests unless one says otherwise."""
    for name in (ADMIN_TOKEN_ENV, TOKEN_ENV, "REWARDSEAL_CONTROL_TARGET"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.sqlite'}")
    yield stack
    await stop_control(stack)


async def register_contract(stack: ControlStack) -> None:
    await stack.stub().RegisterContract(
        pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest=DIGEST),
        metadata=TRAINER,
    )


def write_calibration(path: Path, **overrides: object) -> Path:
    """calibration.json as the worker writes it, with a bogus convenience epsilon."""
    document = json_format.MessageToDict(
        calibration_summary(DIGEST, **overrides),  # type: ignore[arg-type]
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    document["epsilon"] = 0.000001  # readers recompute; the CLI never sends it
    path.write_text(json.dumps(document))
    return path


# --- contracts and keys ---


async def test_contracts_list_table_and_json(control: ControlStack) -> None:
    code, out, _ = await cli(control, "contracts", "list")
    assert code == 0
    assert "(none)" in out
    await register_contract(control)
    code, out, _ = await cli(control, "contracts", "list", token=CLIENT_TOKEN)
    assert code == 0
    header, row = table_rows(out)
    assert header[:2] == ["DIGEST", "CONTRACT"]
    assert row[:3] == [DIGEST, CONTRACT.contract_id, CONTRACT.contract_version]
    code, out, _ = await cli(control, "contracts", "list", "--json")
    assert code == 0
    document = json.loads(out)
    assert [c["reward_contract_digest"] for c in document["contracts"]] == [DIGEST]
    assert document["contracts"][0]["contract"]["contract_id"] == CONTRACT.contract_id


async def test_keys_list_register_and_retire(control: ControlStack) -> None:
    code, out, _ = await cli(control, "keys", "list")
    assert code == 0
    header, row = table_rows(out)
    assert header[:3] == ["KEY", "ID", "ROLE"]
    assert row[:3] == [control.key.key_id, "ORGANIZATION", "active"]
    code, out, _ = await cli(
        control,
        "keys",
        "register",
        "--public-key",
        WORKER_KEY.public_key.hex(),
        "--role",
        "worker",
        "--name",
        "worker-1",
        "--reason",
        "enrolled",
        "--json",
    )
    assert code == 0
    registered = json.loads(out)["key"]
    assert registered["key_id"] == WORKER_KEY.key_id
    assert registered["role"] == "ISSUER_KEY_ROLE_WORKER"
    code, out, _ = await cli(control, "keys", "list", "--role", "worker", "--json")
    assert [k["key_id"] for k in json.loads(out)["keys"]] == [WORKER_KEY.key_id]
    code, out, _ = await cli(
        control, "keys", "retire", WORKER_KEY.key_id, "--reason", "decommissioned"
    )
    assert code == 0
    assert table_rows(out)[1][:3] == [WORKER_KEY.key_id, "WORKER", "retired"]


async def test_keys_enroll_approve_and_unbind(control: ControlStack) -> None:
    await register_contract(control)
    code, out, err = await cli(control, "keys", "enroll", "--contract", DIGEST, "--ttl", "2h")
    assert (code, err) == (0, "")
    credential, note = out.splitlines()
    assert credential.startswith("rse-enroll.")
    assert "single use" in note
    assert "REWARDSEAL_WORKER_CONTROL_ENROLLMENT_TOKEN" in note
    # Control keeps the hash only: the credential is in no audit entry.
    assert all(credential not in e.details for e in list_audit(control.store).items)
    code, _, err = await cli(control, "keys", "enroll", "--contract", DIGEST, "--ttl", "soon")
    assert code == 2
    assert "--ttl" in err
    code, out, _ = await cli(
        control,
        "keys",
        "register",
        "--public-key",
        WORKER_KEY.public_key.hex(),
        "--role",
        "worker",
        "--json",
    )
    assert code == 0
    code, out, err = await cli(
        control, "keys", "approve", WORKER_KEY.key_id, "--contract", DIGEST, "--reason", "rack 3"
    )
    assert (code, err) == (0, "")
    assert out.strip() == f"{WORKER_KEY.key_id}: admitted; signs receipts for {DIGEST}"
    code, out, err = await cli(
        control,
        "keys",
        "unbind",
        WORKER_KEY.key_id,
        "--contract",
        DIGEST,
        "--reason",
        "rotated",
        "--json",
    )
    assert (code, err) == (0, "")
    answer = json.loads(out)
    assert answer["admission"]["admitted"] is True
    assert "reward_contract_digests" not in answer["admission"]
    actions = [e.action for e in list_audit(control.store).items]
    assert {"enrollment.create", "issuer_key.approve", "issuer_key.unbind"} <= set(actions)


async def test_keys_enroll_and_approve_accept_the_bundle_certificate_only_when_told(
    control: ControlStack,
) -> None:
    await register_contract(control)
    code, out, err = await cli(
        control, "keys", "enroll", "--contract", DIGEST, "--accept-bundle-certificate"
    )
    assert (code, err) == (0, "")
    assert "bundle certificate the key registers with is accepted" in out.splitlines()[1]
    [enrolled] = [e for e in list_audit(control.store).items if e.action == "enrollment.create"]
    assert enrolled.details["accepts_bundle_certificate"] is True
    # A key the admin registers by hand, with the bundle certificate its worker carries.
    bundle = make_certificate(CONTRACT, key=WORKER_KEY, certificate_id="cert.bundle.cli")
    request = pb.RegisterIssuerKeyRequest(
        key=IssuerKey(public_key=WORKER_KEY.public_key, role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER)
    )
    request.bundle_certificate.CopyFrom(bundle)
    await control.stub().RegisterIssuerKey(request, metadata=ADMIN)
    code, out, _ = await cli(control, "keys", "approve", WORKER_KEY.key_id, "--contract", DIGEST)
    assert code == 0
    assert "accepted" not in out
    code, out, _ = await cli(control, "certificates", "list", "--contract", DIGEST, "--json")
    assert json.loads(out).get("certificates", []) == []
    code, out, err = await cli(
        control,
        "keys",
        "approve",
        WORKER_KEY.key_id,
        "--contract",
        DIGEST,
        "--accept-bundle-certificate",
        "--json",
    )
    assert (code, err) == (0, "")
    assert json.loads(out)["accepted_certificate_ids"] == ["cert.bundle.cli"]
    code, out, _ = await cli(control, "certificates", "list", "--contract", DIGEST, "--json")
    [listed] = json.loads(out)["certificates"]
    assert listed["certificate_id"] == "cert.bundle.cli", listed
    # Accepting again is a no-op that still names it; the table form says how to revoke it.
    code, out, _ = await cli(
        control,
        "keys",
        "approve",
        WORKER_KEY.key_id,
        "--contract",
        DIGEST,
        "--accept-bundle-certificate",
    )
    assert code == 0
    assert "accepted bundle certificate cert.bundle.cli" in out
    assert "certificates revoke cert.bundle.cli" in out


# --- certificates and revocation ---


async def test_certificates_issue_recomputes_epsilon_and_writes_the_certificate(
    control: ControlStack, tmp_path: Path
) -> None:
    await register_contract(control)
    calibration = write_calibration(tmp_path / "calibration.json")
    out_file = tmp_path / "certificate.json"
    code, out, err = await cli(
        control,
        "certificates",
        "issue",
        "--contract",
        DIGEST,
        "--calibration",
        str(calibration),
        "--issued-at-update",
        str(ISSUED_AT_UPDATE),
        "--expiry",
        "50",
        "--certificate-id",
        "cert.mockmed.0001",
        "--reason",
        "first calibration",
        "--out",
        str(out_file),
        "--json",
    )
    assert (code, err) == (0, "")
    document = json.loads(out)
    certificate = json_format.ParseDict(document["certificate"], RewardCertificate())
    assert certificate.epsilon == pytest.approx(clopper_pearson_upper(0, 300, 0.05), abs=1e-12)
    assert certificate.calibration_scope == 1  # SYNTHETIC, the default
    assert verify_certificate(certificate, TrustSet([control.key.public_key]))
    written = json_format.Parse(out_file.read_text(), RewardCertificate())
    assert written == certificate
    assert document["certificate_digest"].startswith("sha256:")
    code, out, _ = await cli(
        control,
        "certificates",
        "issue",
        "--contract",
        DIGEST,
        "--calibration",
        str(calibration),
        "--issuer",
        "self_signed",
    )
    assert code == 0
    fields = {row[0]: row[1:] for row in table_rows(out)[1:]}
    assert fields["issuer"] == ["SELF_SIGNED"]
    assert fields["epsilon"][0] == f"{clopper_pearson_upper(0, 300, 0.05):.6g}"
    assert "recomputed" in out
    code, out, _ = await cli(control, "certificates", "list", "--contract", DIGEST, "--json")
    assert len(json.loads(out)["certificates"]) == 2


async def test_certificates_issue_refusals_exit_with_status_one(
    control: ControlStack, tmp_path: Path
) -> None:
    await register_contract(control)
    calibration = write_calibration(tmp_path / "calibration.json", held_out=True)
    arguments = ("certificates", "issue", "--contract", DIGEST, "--calibration", str(calibration))
    code, out, err = await cli(
        control, *arguments, "--scope", "production", "--issuer", "self_signed"
    )
    assert (code, out) == (1, "")
    assert "certification_refused" in err
    assert "SELF_SIGNED" in err
    code, _, err = await cli(control, *arguments, token=CLIENT_TOKEN)
    assert code == 1
    assert "permission_denied" in err
    code, _, err = await cli(
        control,
        "certificates",
        "issue",
        "--contract",
        "sha256:" + "7" * 64,
        "--calibration",
        str(calibration),
    )
    assert code == 1
    assert "contract_mismatch" in err or "not_found" in err


async def test_local_errors_exit_with_status_two(control: ControlStack, tmp_path: Path) -> None:
    code, _, err = await cli(
        control,
        "certificates",
        "issue",
        "--contract",
        DIGEST,
        "--calibration",
        str(tmp_path / "missing.json"),
    )
    assert code == 2
    assert "no such file" in err
    (tmp_path / "bad.json").write_text(json.dumps({"trials": "many"}))
    code, _, err = await cli(
        control,
        "certificates",
        "issue",
        "--contract",
        DIGEST,
        "--calibration",
        str(tmp_path / "bad.json"),
    )
    assert code == 2
    assert "not a calibration summary" in err
    empty = tmp_path / "empty-data-dir"
    empty.mkdir()
    code, _, err = await cli(control, "contracts", "list", "--data-dir", str(empty), token=None)
    assert code == 2
    assert "no token" in err


async def test_token_from_the_environment(
    control: ControlStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, CLIENT_TOKEN)
    code, _, _ = await cli(control, "contracts", "list", token=None)
    assert code == 0
    code, _, err = await cli(
        control, "certificates", "revoke", "cert.x.00000001", "--reason", "x", token=None
    )
    assert code == 1
    assert "permission_denied" in err


async def test_certificates_revoke_and_revocations_show(
    control: ControlStack, tmp_path: Path
) -> None:
    await register_contract(control)
    calibration = write_calibration(tmp_path / "calibration.json")
    code, _, _ = await cli(
        control,
        "certificates",
        "issue",
        "--contract",
        DIGEST,
        "--calibration",
        str(calibration),
        "--certificate-id",
        "cert.mockmed.0001",
    )
    assert code == 0
    code, out, _ = await cli(
        control, "certificates", "revoke", "cert.mockmed.0001", "--reason", "key leaked", "--json"
    )
    assert code == 0
    document = json.loads(out)
    envelope = json_format.ParseDict(document["revocation_list"], SignedEnvelope())
    follower = RevocationFollower(TrustSet([control.key.public_key]))
    assert (
        follower.accept(envelope, control.clock.now).version
        == (document["revocation_list_version"])
    )
    assert follower.is_revoked("cert.mockmed.0001")
    code, out, _ = await cli(control, "revocations", "show")
    assert code == 0
    assert f"version {document['revocation_list_version']}" in out
    assert "cert.mockmed.0001" in out
    assert "key leaked" in out
    code, out, err = await cli(
        control, "certificates", "revoke", "cert.unknown.0001", "--reason", "x"
    )
    assert code == 1
    assert "not_found" in err


async def test_certificates_revoke_a_whole_contract_or_checker_configuration(
    control: ControlStack, tmp_path: Path
) -> None:
    """R-C-13: one signed entry revokes every certificate of a contract (or of a checker
    configuration), admin-only and audited; the list keeps it, and re-sending is a no-op."""
    await register_contract(control)
    calibration = write_calibration(tmp_path / "calibration.json")
    code, out, _ = await cli(
        control, "certificates", "issue", "--contract", DIGEST, "--calibration",
        str(calibration), "--certificate-id", "cert.mockmed.0001", "--json",
    )  # fmt: skip
    assert code == 0
    issued = json_format.ParseDict(json.loads(out)["certificate"], RewardCertificate())
    code, out, _ = await cli(
        control, "certificates", "revoke", "--contract", DIGEST, "--reason", "checker broken",
        "--json",
    )  # fmt: skip
    assert code == 0, out
    document = json.loads(out)
    assert document["reward_contract_digest"] == DIGEST
    envelope = json_format.ParseDict(document["revocation_list"], SignedEnvelope())
    follower = RevocationFollower(control.trust)
    follower.accept(envelope, control.clock.now)
    assert follower.revokes(issued)
    assert not follower.is_revoked("cert.mockmed.0001")  # revoked by contract, not by name
    # Control's own views say so too (GetCertificate, the console, `certificates list`).
    stored = control.store.certificates.get_certificate("cert.mockmed.0001")
    assert stored.revoked
    assert stored.revocation_reason == "checker broken"
    assert control.store.certificates.list_certificates(DIGEST).items[0].revoked
    # Any certificate of the contract, also one issued after the entry.
    later = RewardCertificate()
    later.CopyFrom(issued)
    later.certificate_id = "cert.mockmed.later.0002"
    assert follower.revokes(later)

    # Control issues nothing more under the revoked contract (it would be revoked at birth).
    code, _, err = await cli(
        control, "certificates", "issue", "--contract", DIGEST, "--calibration",
        str(calibration), "--certificate-id", "cert.mockmed.0003",
    )  # fmt: skip
    assert code == 1
    assert "certification_refused" in err
    assert f"contract {DIGEST} is revoked" in err

    checker = issued.checker_configuration_digest
    code, out, _ = await cli(
        control, "certificates", "revoke", "--checker", checker, "--reason", "oracle bug"
    )
    assert code == 0
    assert f"revoked every certificate of checker configuration {checker}" in out
    code, out, _ = await cli(control, "revocations", "show")
    assert code == 0
    assert f"contract {DIGEST}" in out
    assert f"checker {checker}" in out
    assert "checker broken" in out
    # The same contract again: no new list version.
    head = control.store.revocations.revocation_head()
    assert head is not None
    code, _, _ = await cli(
        control, "certificates", "revoke", "--contract", DIGEST, "--reason", "again"
    )
    assert code == 0
    assert control.store.revocations.revocation_head().version == head.version  # type: ignore[union-attr]
    actions = [e.action for e in list_audit(control.store).items]
    assert actions.count("certificate.revoke_contract") == 2
    assert actions.count("certificate.revoke_checker") == 1


async def test_certificates_revoke_scope_errors(control: ControlStack) -> None:
    await register_contract(control)
    # Exactly one target.
    for argv in (
        ("--reason", "x"),
        ("cert.mockmed.0001", "--contract", DIGEST, "--reason", "x"),
        ("--contract", DIGEST, "--checker", DIGEST, "--reason", "x"),
    ):
        code, _, err = await cli(control, "certificates", "revoke", *argv)
        assert code == 2, argv
        assert "exactly one of ID, --contract DIGEST and --checker DIGEST" in err
    # A contract control does not know, a malformed digest, no reason: refused by control.
    unknown = "sha256:" + "0" * 64
    code, _, err = await cli(
        control, "certificates", "revoke", "--contract", unknown, "--reason", "x"
    )
    assert code == 1
    assert "not_found" in err
    code, _, err = await cli(
        control, "certificates", "revoke", "--checker", "sha256:short", "--reason", "x"
    )
    assert code == 1
    assert "invalid_argument" in err or "validation" in err
    code, _, err = await cli(
        control, "certificates", "revoke", "--contract", DIGEST, "--reason", " "
    )
    assert code == 1
    # Admin only: the trainer credential cannot revoke a contract.
    code, _, err = await cli(
        control, "certificates", "revoke", "--contract", DIGEST, "--reason", "x",
        token=CLIENT_TOKEN,
    )  # fmt: skip
    assert code == 1
    assert "permission_denied" in err
    assert control.store.revocations.revocation_head() is None or not any(
        e.reward_contract_digest
        for e in RevocationList.FromString(
            control.store.revocations.revocation_head().envelope.payload  # type: ignore[union-attr]
        ).entries
    )


# --- receipts ---


async def test_receipts_summary_table_and_json(control: ControlStack) -> None:
    await register_contract(control)
    await control.stub().RegisterIssuerKey(
        pb.RegisterIssuerKeyRequest(
            key=IssuerKey(
                public_key=WORKER_KEY.public_key, role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER
            ),
            reward_contract_digests=[DIGEST],
        ),
        metadata=ADMIN,
    )
    outcomes = [RewardOutcome.REWARD_OUTCOME_VERIFIED] * 3 + [
        RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM
    ]
    envelopes = [
        seal_receipt(
            build_receipt(
                make_facts(outcome, episode_id=f"episode.{i:04d}"),
                contract=CONTRACT,
                certificate=None,
                issuer_key_id=WORKER_KEY.key_id,
            ),
            WORKER_KEY,
        )
        for i, outcome in enumerate(outcomes)
    ]
    answer = await control.stub().RecordReceipts(
        pb.RecordReceiptsRequest(receipts=envelopes), metadata=TRAINER
    )
    assert all(r.recorded for r in answer.results)
    code, out, _ = await cli(control, "receipts", "summary")
    assert code == 0
    header, row = table_rows(out)
    assert header == ["CONTRACT", "TOTAL", "CERTIFIED", "UNSCORED", "OUTCOMES"]
    assert row == [DIGEST, "4", "0.0%", "25.0%", "VERIFIED=3", "FAILED_PLATFORM=1"]
    code, out, _ = await cli(control, "receipts", "summary", "--contract", DIGEST, "--json")
    assert code == 0
    assert json.loads(out) == {
        "summaries": [
            {
                "reward_contract_digest": DIGEST,
                "total": 4,
                "counts": {"VERIFIED": 3, "FAILED_PLATFORM": 1},
                "certified_share": 0.0,
                "unscored_share": 0.25,
            }
        ]
    }


# --- serve and migrate as real processes ---


def _wait_for(path: Path, process: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(
                f"serve exited early: {process.stdout.read() if process.stdout else ''}"
            )
        if time.monotonic() > deadline:
            raise AssertionError("serve did not become ready")
        time.sleep(0.1)


def test_serve_and_admin_commands_as_processes(tmp_path: Path) -> None:
    data_dir = tmp_path / "control"
    ready = tmp_path / "ready.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWARDSEAL_CONTROL_")}
    migrate = subprocess.run(
        [str(CLI), "migrate", "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stderr
    assert "revision" in migrate.stdout
    serve = subprocess.Popen(
        [
            str(CLI),
            "serve",
            "--data-dir",
            str(data_dir),
            "--port",
            "0",
            "--revocation-ttl",
            "1h",
            "--ready-file",
            str(ready),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for(ready, serve)
        banner = json.loads(ready.read_text())
        assert banner["revocation_ttl_seconds"] == 3600
        assert (ready.stat().st_mode & 0o777) == 0o600
        for name in ("admin_token", "token", "keys/organization.ed25519"):
            assert ((data_dir / name).stat().st_mode & 0o777) == 0o600, name
        admin_token = (data_dir / "admin_token").read_text().strip()
        assert admin_token not in json.dumps(banner)
        listed = subprocess.run(
            [
                str(CLI),
                "keys",
                "list",
                "--json",
                "--target",
                banner["target"],
                "--data-dir",
                str(data_dir),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        keys = json.loads(listed.stdout)["keys"]
        assert [k["key_id"] for k in keys] == [banner["organization_key_id"]]
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            status = serve.wait(timeout=30)
        finally:
            if serve.poll() is None:
                serve.kill()
    output = serve.stdout.read() if serve.stdout else ""
    assert status == 0, output
    assert admin_token not in output
    # A restart keeps the key, the tokens and the registry (no second organization key).
    again = subprocess.run(
        [str(CLI), "migrate", "--data-dir", str(data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stderr
