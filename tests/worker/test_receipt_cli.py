"""The trainer on-ramp against a real worker: a client built from the worker's own ready file
scores an episode, and ``rewardseal receipt show|verify`` reads that real envelope in every form
it travels in, and refuses a flipped byte and another worker's key; ``receipt dsse`` prints it as
DSSE JSON that securesystemslib verifies."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey
from support.builders import TEST_KEY, make_certificate, make_facts
from support.mockmed_episodes import descriptor, write_triage
from worker.conftest import RunningStack

from rewardseal.cli import main
from rewardseal.cli.receipt import EXIT_FAILED, EXIT_OK, EXIT_USAGE, describe
from rewardseal.core.dsse import from_dsse_json
from rewardseal.core.public_keys import public_key_text
from rewardseal.core.receipts import build_receipt
from rewardseal.core.signing import SigningKey, key_id_for
from rewardseal.rpc.worker_client import AsyncWorkerClient
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer, RewardOutcome
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_mockmed.contract import mockmed_contract
from rewardseal_server.serving import write_ready_file

RECEIPT_CLI = Path(sys.executable).with_name("rewardseal")


@pytest.fixture
async def scored(stack: RunningStack, tmp_path: Path) -> tuple[Path, SignedEnvelope]:
    """The worker's ready file (written as ``serve --ready-file`` writes it) and the envelope of
    an honest episode scored through a client built from that file alone."""
    ready = tmp_path / "worker.json"
    write_ready_file(ready, stack.app.banner())
    async with AsyncWorkerClient.from_ready_file(ready) as client:
        digest = client.reward_contract_digest
        assert digest == stack.digest
        await client.begin("episode.onramp.0001", digest, {"patient_id": "patient-onramp-0001"})
        write_triage(stack.database, "patient-onramp-0001")
        got = await client.score(descriptor(digest, "episode.onramp.0001"))
    assert got.scalar == 1.0
    assert got.receipt.certified
    return ready, got.envelope


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_verify_accepts_the_real_envelope_in_every_form(
    scored: tuple[Path, SignedEnvelope], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ready, envelope = scored
    raw = tmp_path / "receipt.pb"
    raw.write_bytes(envelope.SerializeToString())
    grpcurl = tmp_path / "grpcurl.json"  # what grpcurl prints for ScoreEpisode
    grpcurl.write_text(json_format.MessageToJson(pb.ScoreEpisodeResponse(envelope=envelope)))
    public_hex = json.loads(ready.read_text())["public_key"]
    b64 = base64.b64encode(envelope.SerializeToString()).decode()

    for argv in (
        ("receipt", "verify", str(raw), "--ready-file", str(ready)),
        ("receipt", "verify", str(grpcurl), "--key", public_hex),
        ("receipt", "verify", "--base64", b64, "--key", str(ready)),
    ):
        status, out, err = run(capsys, *argv)
        assert (status, err) == (EXIT_OK, ""), argv
        assert '"episode_id": "episode.onramp.0001"' in out
        assert "signature: verified: signed by ed25519:sha256:" in out
        assert "certified: yes: backed by certificate" in out
        assert "outcome: verified\n" in out
        assert "scope: synthetic: the bound was measured on calibration trials" in out
        assert "sandbox copy of the system of record, held out or not" in out
        assert "organization's own data" not in out
        assert "certificate state: current:" in out

    status, out, _ = run(capsys, "receipt", "verify", str(raw), "--key", public_hex, "--json")
    document = json.loads(out)
    assert status == EXIT_OK
    assert document["receipt"]["reward_outcome"] == "REWARD_OUTCOME_VERIFIED"
    assert document["summary"]["reward"] == "1"


def test_verify_refuses_a_flipped_byte(
    scored: tuple[Path, SignedEnvelope], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ready, envelope = scored
    for where in ("payload", "signature"):
        tampered = SignedEnvelope()
        tampered.CopyFrom(envelope)
        if where == "payload":
            body = bytearray(tampered.payload)
            body[len(body) // 2] ^= 0x01
            tampered.payload = bytes(body)
        else:
            sig = bytearray(tampered.signatures[0].sig)
            sig[0] ^= 0x01
            tampered.signatures[0].sig = bytes(sig)
        path = tmp_path / f"flipped-{where}.pb"
        path.write_bytes(tampered.SerializeToString())
        status, out, err = run(capsys, "receipt", "verify", str(path), "--ready-file", str(ready))
        assert (status, out) == (EXIT_FAILED, ""), where
        assert "verification failed: 0 of 1 signature(s) verified by a trusted key" in err


def test_verify_refuses_another_workers_key(
    scored: tuple[Path, SignedEnvelope], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, envelope = scored
    path = tmp_path / "receipt.pb"
    path.write_bytes(envelope.SerializeToString())
    stranger = SigningKey.generate().public_key.hex()
    status, out, err = run(capsys, "receipt", "verify", str(path), "--key", stranger)
    assert (status, out) == (EXIT_FAILED, "")
    assert "verification failed" in err


def test_show_decodes_without_a_key_and_says_it_did_not_check(
    scored: tuple[Path, SignedEnvelope], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, envelope = scored
    batch = pb.ScoreEpisodesResponse(
        results=[pb.EpisodeResult(episode_id="a", envelope=envelope)] * 2
    )
    path = tmp_path / "batch.json"
    path.write_text(json_format.MessageToJson(batch))
    status, _, err = run(capsys, "receipt", "show", str(path))
    assert status == EXIT_FAILED
    assert "holds 2 envelopes; pick one with --index" in err
    status, out, _ = run(capsys, "receipt", "show", str(path), "--index", "1")
    assert status == EXIT_OK
    assert "signature: NOT CHECKED" in out


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "receipt", "verify", str(tmp_path / "absent"), "--key", "00")
    assert status == EXIT_USAGE
    assert "--key is not a 32-byte Ed25519 public key" in err
    key = SigningKey.generate().public_key.hex()
    status, _, err = run(capsys, "receipt", "verify", str(tmp_path / "absent"), "--key", key)
    assert (status, "cannot read") == (EXIT_USAGE, err.split(": ")[1][:11])
    with pytest.raises(SystemExit) as exited:  # argparse: neither --key nor --ready-file
        main(["receipt", "verify", "x"])
    assert exited.value.code == EXIT_USAGE
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\xff\x00 not an envelope")
    status, _, err = run(capsys, "receipt", "show", str(garbage))
    assert status == EXIT_FAILED
    assert "cannot decode the envelope" in err


def test_console_script_reads_stdin(
    scored: tuple[Path, SignedEnvelope],
) -> None:
    ready, envelope = scored
    done = subprocess.run(
        [str(RECEIPT_CLI), "receipt", "verify", "-", "--ready-file", str(ready)],
        input=envelope.SerializeToString(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert b"certified: yes" in done.stdout


def test_production_scope_says_what_calibration_measured() -> None:
    """A production-scope receipt (an organization's certificate, a held-out summary) is worded
    as what calibration ran: sandbox trials of the named fault families, held out; never as a
    measurement on the organization's own data (issue 26 item 6)."""
    contract = mockmed_contract()
    certificate = make_certificate(
        contract,
        calibration_scope=CalibrationScope.CALIBRATION_SCOPE_PRODUCTION,
        issuer=CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
    )
    receipt = build_receipt(
        make_facts(RewardOutcome.REWARD_OUTCOME_VERIFIED),
        contract=contract,
        certificate=certificate,
        issuer_key_id=TEST_KEY.key_id,
    )
    words = describe(receipt)
    assert words["outcome"] == "verified"
    assert words["scope"].startswith("production: an organization-issued certificate; ")
    assert "faults of the fault families named in the calibration summary" in words["scope"]
    assert f"(corpus {receipt.calibration_corpus_digest})" in words["scope"]
    assert "sandbox copy of the system of record, held out from everything" in words["scope"]
    assert "not live traffic or the organization's own records" in words["scope"]


def test_dsse_prints_the_real_envelope_for_an_independent_verifier(
    scored: tuple[Path, SignedEnvelope], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # R-SIG-3 on a receipt a running worker signed: securesystemslib verifies the printed DSSE
    # JSON with the worker's key from its ready file, and it converts back to the same envelope.
    ready, envelope = scored
    raw = tmp_path / "receipt.pb"
    raw.write_bytes(envelope.SerializeToString())
    status, out, err = run(capsys, "receipt", "dsse", str(raw))
    assert (status, err) == (EXIT_OK, "")
    document = json.loads(out)
    public = public_key_text(json.loads(ready.read_text())["public_key"])
    assert public is not None
    key = SSlibKey(
        keyid=key_id_for(public),
        keytype="ed25519",
        scheme="ed25519",
        keyval={"public": public.hex()},
    )
    dsse = Envelope.from_dict(copy.deepcopy(document))
    assert list(dsse.verify([key], 1)) == [key_id_for(public)]
    assert from_dsse_json(document) == envelope
    flipped = bytearray(base64.b64decode(document["payload"]))
    flipped[-1] ^= 0x01
    document["payload"] = base64.b64encode(bytes(flipped)).decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(copy.deepcopy(document)).verify([key], 1)
