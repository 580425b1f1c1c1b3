"""Reward attestations (R-A-1..4): an attestation of a checkpoint verifies with our verifier and
with securesystemslib's DSSE verifier (its in-toto subjects checked by hand), and fails, each
with its reason, for a changed checkpoint file, a receipt left out of the Merkle root, a revoked
certificate reported as current and another organization's key; the predicate reads strictly;
``rewardseal attest verify`` exits 0, 1 and 2."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey
from support.builders import TEST_KEY, make_certificate, make_facts

from rewardseal.cli import main
from rewardseal.cli.receipt import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from rewardseal.core.attestation import (
    ATTESTATION_FILE,
    PREDICATE_TYPE,
    STATEMENT_PAYLOAD_TYPE,
    STATEMENT_TYPE,
    RewardPredicate,
    build_statement,
    certificate_use,
    check_receipt_proof,
    checkpoint_subjects,
    envelope_digest,
    inclusion_proof,
    receipt_commitment,
    receipt_leaf,
    receipt_leaves,
    receipt_proof,
    receipts_jsonl,
    sign_attestation,
    verify_attestation,
    verify_inclusion,
    write_attestation,
)
from rewardseal.core.attestation import statement as attestation_statement
from rewardseal.core.digest import canonical_json
from rewardseal.core.errors import AttestationError
from rewardseal.core.receipts import build_receipt, seal_receipt
from rewardseal.core.revocation import build_revocation_list, sign_revocation_list
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.v1.certificate_pb2 import RevocationEntry
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_mockmed.contract import mockmed_contract

ORG = SigningKey.from_seed(bytes(range(100, 132)))
OTHER_ORG = SigningKey.from_seed(bytes(range(132, 164)))
ORG_KEYS = TrustSet([ORG.public_key])
T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
Outcome = RewardOutcome
OUTCOMES = [
    Outcome.REWARD_OUTCOME_VERIFIED,
    Outcome.REWARD_OUTCOME_VERIFIED,
    Outcome.REWARD_OUTCOME_WRONG_EFFECT,
    Outcome.REWARD_OUTCOME_VERIFIED,
    Outcome.REWARD_OUTCOME_FAILED_PLATFORM,
]


def stored_receipts() -> list[tuple[str, bytes]]:
    """Five receipts as control stores them: (receipt id, SignedEnvelope bytes), worker-signed."""
    contract = mockmed_contract()
    certificate = make_certificate(contract)
    stored = []
    for number, outcome in enumerate(OUTCOMES):
        receipt = build_receipt(
            make_facts(outcome, episode_id=f"episode.{number:04d}"),  # type: ignore[arg-type]
            contract=contract,
            certificate=certificate,
            issuer_key_id=TEST_KEY.key_id,
        )
        stored.append((receipt.receipt_id, seal_receipt(receipt, TEST_KEY).SerializeToString()))
    return stored


def write_checkpoint(directory: Path) -> Path:
    (directory / "model").mkdir(parents=True)
    (directory / "model" / "weights.safetensors").write_bytes(bytes(range(256)) * 64)
    (directory / "config.json").write_text('{"hidden": 8}\n')
    (directory / "trainer_state.json").write_text('{"global_step": 2}\n')
    return directory


def revocation_list(*revoked: str, key: SigningKey = ORG) -> SignedEnvelope:
    stamp = Timestamp()
    stamp.FromDatetime(T0)
    return sign_revocation_list(
        build_revocation_list(
            version=2,
            entries=[
                RevocationEntry(certificate_id=c, reason="leaked", revoked_at=stamp)
                for c in revoked
            ],
            issued_at=T0,
            ttl=timedelta(hours=24),
            issuer_key_id=key.key_id,
        ),
        key,
    )


def predicate_for(receipts: list[tuple[str, bytes]], *, state: str = "current") -> RewardPredicate:
    tally, merkle = receipt_commitment(receipts)
    certificate = make_certificate()
    return RewardPredicate(
        policy_checkpoint_ids=["policy.checkpoint.0001"],
        policy_update_first=100,
        policy_update_last=100,
        contract_digests=[certificate.reward_contract_digest],
        certificates=[certificate_use(certificate, state=state)],
        receipts=tally,
        merkle=merkle,
        integrity_audits=[
            {"audit_id": "audit.0001", "boundary": 100, "decision": "continue", "reason": ""}
        ],
        issued_at="2026-12-04T12:30:00Z",
        issuer_key_id=ORG.key_id,
        organization="Example Health",
        control_url="https://control.example:8443",
    )


@pytest.fixture
def attested(tmp_path: Path) -> tuple[Path, dict[str, Any], list[tuple[str, bytes]]]:
    """A checkpoint directory with its attestation written in it, and the receipts."""
    checkpoint = write_checkpoint(tmp_path / "checkpoint-2")
    receipts = stored_receipts()
    statement = build_statement(checkpoint_subjects(checkpoint), predicate_for(receipts))
    doc = sign_attestation(statement, ORG)
    write_attestation(checkpoint, doc)
    return checkpoint, doc, receipts


def reason_of(**kwargs: Any) -> str:
    with pytest.raises(AttestationError) as raised:
        verify_attestation(**kwargs)
    return raised.value.reason


def test_an_attestation_verifies_with_ours_and_with_securesystemslib(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
) -> None:
    checkpoint, doc, receipts = attested
    on_disk = json.loads((checkpoint / ATTESTATION_FILE).read_text())
    assert on_disk == doc
    verified = verify_attestation(
        on_disk,
        checkpoint=checkpoint,
        org_keys=ORG_KEYS,
        receipts=receipts,
        revocations=[revocation_list("cert.other.0001")],
    )
    assert verified.checks == ("signature", "subjects", "merkle", "revocations")
    assert verified.key_ids == (ORG.key_id,)
    assert verified.predicate.receipts.by_outcome == {
        "failed_platform": 1,
        "verified": 3,
        "wrong_effect": 1,
    }
    assert verified.predicate.receipts.unscored == 1

    # securesystemslib, knowing nothing of rewardseal, accepts the envelope ...
    key = SSlibKey(
        keyid=ORG.key_id,
        keytype="ed25519",
        scheme="ed25519",
        keyval={"public": ORG.public_key.hex()},
    )
    envelope = Envelope.from_dict(copy.deepcopy(on_disk))
    assert list(envelope.verify([key], 1)) == [ORG.key_id]
    assert envelope.payload_type == STATEMENT_PAYLOAD_TYPE
    # ... and the in-toto statement's subjects are the checkpoint's files, checked by hand.
    statement = json.loads(envelope.payload)
    assert statement["_type"] == STATEMENT_TYPE
    assert statement["predicateType"] == PREDICATE_TYPE
    by_hand = {}
    for path in sorted(checkpoint.rglob("*")):
        if path.is_file() and path.name != ATTESTATION_FILE:
            by_hand[path.relative_to(checkpoint).as_posix()] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == by_hand
    assert [s["name"] for s in statement["subject"]] == [
        "config.json",
        "model/weights.safetensors",
        "trainer_state.json",
    ]

    with pytest.raises(VerificationError):
        Envelope.from_dict(copy.deepcopy(on_disk)).verify(
            [SSlibKey(ORG.key_id, "ed25519", "ed25519", {"public": OTHER_ORG.public_key.hex()})], 1
        )


def test_a_changed_checkpoint_file_is_a_subject_mismatch(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
) -> None:
    checkpoint, doc, _ = attested
    weights = checkpoint / "model" / "weights.safetensors"
    content = bytearray(weights.read_bytes())
    content[1000] ^= 0x01
    weights.write_bytes(bytes(content))
    assert reason_of(doc=doc, checkpoint=checkpoint, org_keys=ORG_KEYS) == "subject_mismatch"


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_a_missing_or_extra_file_is_a_subject_mismatch(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]], change: str
) -> None:
    checkpoint, doc, _ = attested
    if change == "missing":
        (checkpoint / "config.json").unlink()
    else:
        (checkpoint / "model" / "extra.bin").write_bytes(b"x")
    with pytest.raises(AttestationError, match=change if change == "missing" else "not attested"):
        verify_attestation(doc, checkpoint=checkpoint, org_keys=ORG_KEYS)


def test_a_receipt_left_out_of_the_merkle_root_is_a_merkle_mismatch(tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path / "checkpoint")
    receipts = stored_receipts()
    # The signer left one receipt out of the root (and the tally): the full set does not match.
    doc = sign_attestation(
        build_statement(checkpoint_subjects(checkpoint), predicate_for(receipts[1:])), ORG
    )
    verify_attestation(doc, checkpoint=checkpoint, org_keys=ORG_KEYS, receipts=receipts[1:])
    assert (
        reason_of(doc=doc, checkpoint=checkpoint, org_keys=ORG_KEYS, receipts=receipts)
        == "merkle_mismatch"
    )


def test_an_edited_receipt_or_a_wrong_tally_is_a_merkle_mismatch(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]], tmp_path: Path
) -> None:
    checkpoint, _, receipts = attested
    swapped = stored_receipts()
    swapped[0] = (swapped[0][0], seal_receipt_again(swapped[0][1]))
    doc = json.loads((checkpoint / ATTESTATION_FILE).read_text())
    assert (
        reason_of(doc=doc, checkpoint=checkpoint, org_keys=ORG_KEYS, receipts=swapped)
        == "merkle_mismatch"
    )
    # Right root and size, a tally that lies about certified receipts.
    predicate = predicate_for(receipts).to_json()
    predicate["receipts"]["certified"] = 0
    predicate["receipts"]["certified_share"] = "0.000000"
    lying = sign_attestation(
        build_statement(checkpoint_subjects(checkpoint), RewardPredicate.from_json(predicate)), ORG
    )
    with pytest.raises(AttestationError, match="tally"):
        verify_attestation(lying, checkpoint=checkpoint, org_keys=ORG_KEYS, receipts=receipts)


def seal_receipt_again(envelope_bytes: bytes) -> bytes:
    """The same receipt signed again by the worker: other envelope bytes, another leaf."""
    envelope = SignedEnvelope.FromString(envelope_bytes)
    envelope.signatures[0].sig = bytes(64)
    return envelope.SerializeToString()


def test_a_revoked_certificate_reported_current_is_refused(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
) -> None:
    checkpoint, doc, _ = attested
    revoked = revocation_list("cert.mockmed.0001")
    with pytest.raises(AttestationError, match="reported current") as raised:
        verify_attestation(doc, checkpoint=checkpoint, org_keys=ORG_KEYS, revocations=[revoked])
    assert raised.value.reason == "certificate_revoked"


def test_a_certificate_reported_revoked_passes_the_revocation_check(tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path / "checkpoint")
    receipts = stored_receipts()
    certificate = make_certificate()
    revoked = revocation_list("cert.mockmed.0001")
    predicate = predicate_for(receipts, state="revoked")
    listed = json_format.ParseDict(
        json_format.MessageToDict(SignedEnvelope.FromString(revoked.SerializeToString())),
        SignedEnvelope(),
    )
    from rewardseal.core.revocation import open_revocation_list

    use = certificate_use(
        certificate, state="revoked", revocation_lists=[open_revocation_list(listed, ORG_KEYS)]
    )
    assert use.revocations == [
        {
            "list_version": 2,
            "scope": "certificate",
            "revoked_at": "2026-12-04T12:00:00Z",
            "reason": "leaked",
        }
    ]
    predicate = RewardPredicate(**{**predicate.__dict__, "certificates": [use]})
    doc = sign_attestation(build_statement(checkpoint_subjects(checkpoint), predicate), ORG)
    verify_attestation(doc, checkpoint=checkpoint, org_keys=ORG_KEYS, revocations=[revoked])


def test_a_revocation_list_by_someone_else_is_refused(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
) -> None:
    checkpoint, doc, _ = attested
    forged = revocation_list("cert.other.0001", key=OTHER_ORG)
    assert (
        reason_of(doc=doc, checkpoint=checkpoint, org_keys=ORG_KEYS, revocations=[forged])
        == "bad_signature"
    )


def test_another_organizations_key_is_a_bad_signature(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
) -> None:
    checkpoint, doc, receipts = attested
    other = TrustSet([OTHER_ORG.public_key])
    assert reason_of(doc=doc, checkpoint=checkpoint, org_keys=other) == "bad_signature"
    # Signed by the other organization, naming ours as issuer: still refused.
    statement = build_statement(checkpoint_subjects(checkpoint), predicate_for(receipts))
    assert (
        reason_of(
            doc=sign_attestation(statement, OTHER_ORG), checkpoint=checkpoint, org_keys=ORG_KEYS
        )
        == "bad_signature"
    )
    both = TrustSet([ORG.public_key, OTHER_ORG.public_key])
    with pytest.raises(AttestationError, match="issuer_key_id did not sign") as raised:
        verify_attestation(sign_attestation(statement, OTHER_ORG), checkpoint=None, org_keys=both)
    assert raised.value.reason == "bad_signature"


def test_a_flipped_payload_byte_is_a_bad_signature(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
) -> None:
    checkpoint, doc, _ = attested
    payload = bytearray(base64.b64decode(doc["payload"]))
    payload[len(payload) // 2] ^= 0x01
    doc = {**doc, "payload": base64.b64encode(bytes(payload)).decode()}
    assert reason_of(doc=doc, checkpoint=checkpoint, org_keys=ORG_KEYS) == "bad_signature"


def test_a_statement_that_is_not_canonical_or_of_another_type_is_malformed(tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path / "checkpoint")
    statement = build_statement(checkpoint_subjects(checkpoint), predicate_for(stored_receipts()))
    from rewardseal.core.dsse import dsse_envelope_for

    loose = dsse_envelope_for(STATEMENT_PAYLOAD_TYPE, json.dumps(statement, indent=1).encode(), ORG)
    with pytest.raises(AttestationError, match="canonical"):
        verify_attestation(loose, checkpoint=checkpoint, org_keys=ORG_KEYS)
    later = dsse_envelope_for(
        STATEMENT_PAYLOAD_TYPE,
        canonical_json({**statement, "predicateType": PREDICATE_TYPE.replace("v1", "v2")}),
        ORG,
    )
    with pytest.raises(AttestationError, match="another version") as raised:
        verify_attestation(later, checkpoint=checkpoint, org_keys=ORG_KEYS)
    assert raised.value.reason == "malformed"
    other_type = dsse_envelope_for("application/json", canonical_json(statement), ORG)
    assert reason_of(doc=other_type, checkpoint=checkpoint, org_keys=ORG_KEYS) == "malformed"
    assert reason_of(doc={"payload": "x"}, checkpoint=None, org_keys=ORG_KEYS) == "malformed"


def _predicate_json() -> dict[str, Any]:
    return predicate_for(stored_receipts()).to_json()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.update(extra=1), "unknown field 'extra'"),
        (lambda p: p.pop("issued_at"), "lacks 'issued_at'"),
        (lambda p: p.update(policy_update_first="100"), "policy_update_first"),
        (lambda p: p.update(policy_update_last=99), "below"),
        (lambda p: p.update(contract_digests=["md5:x"]), "contract_digests"),
        (lambda p: p["certificates"][0].update(state="fine"), "state"),
        (lambda p: p["certificates"][0].update(epsilon=0.01), "epsilon"),
        (lambda p: p["certificates"][0]["scope"].update(region="eu"), "unknown field 'region'"),
        (lambda p: p["certificates"][0].pop("revocations"), "lacks 'revocations'"),
        (lambda p: p["receipts"].update(total=-1), "total"),
        (lambda p: p["receipts"]["by_outcome"].update(verified=True), "by_outcome"),
        (lambda p: p["receipts"]["by_outcome"].update(verified=4), "does not sum"),
        (lambda p: p["receipts"].update(certified_share="0.5"), "certified_share is not"),
        (lambda p: p["receipts"].update(unscored=6), "exceeds total"),
        (lambda p: p["merkle"].update(size=4), "merkle.size is not receipts.total"),
        (lambda p: p["merkle"].update(algorithm="sha1"), "algorithm"),
        (lambda p: p["merkle"].update(root="AB" * 32), "root"),
        (lambda p: p["integrity_audits"][0].pop("decision"), "lacks 'decision'"),
        (lambda p: p.update(issued_at="yesterday"), "RFC 3339"),
        (lambda p: p.update(issued_at="2026-12-04T12:30:00"), "RFC 3339"),
    ],
)
def test_the_predicate_reads_strictly(edit: Any, message: str) -> None:
    predicate = _predicate_json()
    assert RewardPredicate.from_json(copy.deepcopy(predicate)).to_json() == predicate
    edit(predicate)
    with pytest.raises(AttestationError, match=message) as raised:
        RewardPredicate.from_json(predicate)
    assert raised.value.reason == "malformed"


def test_one_receipts_inclusion_is_proved_from_the_predicate_alone(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
) -> None:
    _, doc, receipts = attested
    merkle = verify_attestation(doc, checkpoint=None, org_keys=ORG_KEYS).predicate.merkle
    leaves = receipt_leaves(receipts)
    for index, (receipt_id, raw) in enumerate(sorted(receipts)):
        leaf = receipt_leaf(receipt_id, envelope_digest(raw))
        assert leaves[index] == leaf
        proof = inclusion_proof(leaves, index)
        assert verify_inclusion(leaf, index, merkle.size, proof, merkle.root)
        assert not verify_inclusion(
            receipt_leaf(receipt_id, envelope_digest(raw + b"\x00")),
            index,
            merkle.size,
            proof,
            merkle.root,
        )


def test_the_attestation_file_and_links_are_not_subjects(tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path / "checkpoint")
    (checkpoint / ATTESTATION_FILE).write_text("{}")
    (checkpoint / "model" / ATTESTATION_FILE).write_text("{}")  # only the top-level one is ours
    names = [s["name"] for s in checkpoint_subjects(checkpoint)]
    assert ATTESTATION_FILE not in names
    assert f"model/{ATTESTATION_FILE}" in names
    (checkpoint / "link.bin").symlink_to(checkpoint / "config.json")
    with pytest.raises(AttestationError, match="not a regular file"):
        checkpoint_subjects(checkpoint)


# --- rewardseal attest verify ---------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_exit_codes(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    checkpoint, _, receipts = attested
    file = str(checkpoint / ATTESTATION_FILE)
    org_hex = ORG.public_key.hex()
    receipts_file = tmp_path / "receipts.jsonl"
    receipts_file.write_text(receipts_jsonl(receipts))
    ready = tmp_path / "control.json"  # control's ready file names its organization key
    ready.write_text(json.dumps({"organization_public_key": org_hex}))
    revoked = tmp_path / "revocations.pb"
    revoked.write_bytes(revocation_list("cert.mockmed.0001").SerializeToString())

    status, out, err = cli(
        capsys, "attest", "verify", file, "--org-key", str(ready), "--receipts", str(receipts_file)
    )
    assert (status, err) == (EXIT_OK, "")
    assert out.startswith("verified: 3 file(s) of ")
    assert "checked: signature, subjects, merkle" in out

    status, out, _ = cli(capsys, "attest", "verify", file, "--org-key", org_hex, "--json")
    assert status == EXIT_OK
    assert json.loads(out)["predicateType"] == PREDICATE_TYPE

    failures = {
        "bad_signature": ("--org-key", OTHER_ORG.public_key.hex()),
        "certificate_revoked": ("--org-key", org_hex, "--revocations", str(revoked)),
        "merkle_mismatch": ("--org-key", org_hex, "--receipts", str(_one_less(receipts, tmp_path))),
    }
    for reason, flags in failures.items():
        status, out, err = cli(capsys, "attest", "verify", file, *flags)
        assert status == EXIT_FAILED, reason
        assert out == ""
        assert err.count("\n") == 1
        assert err.startswith(f"rewardseal attest verify: {reason}: ")

    (checkpoint / "config.json").write_text("{}")
    status, _, err = cli(capsys, "attest", "verify", file, "--org-key", org_hex)
    assert status == EXIT_FAILED
    assert "subject_mismatch: file config.json changed" in err

    not_json = tmp_path / "not.json"
    not_json.write_text("garbage")
    status, _, err = cli(capsys, "attest", "verify", str(not_json), "--org-key", org_hex)
    assert (status, err.count("\n")) == (EXIT_FAILED, 1)
    assert "malformed" in err

    usage = {
        "absent attestation": (str(tmp_path / "absent.json"), "--org-key", org_hex),
        "bad key": (file, "--org-key", "not-a-key"),
        "absent checkpoint": (file, "--org-key", org_hex, "--checkpoint", str(tmp_path / "no")),
        "absent receipts": (file, "--org-key", org_hex, "--receipts", str(tmp_path / "no.jsonl")),
        "bad receipts": (file, "--org-key", org_hex, "--receipts", str(not_json)),
    }
    for case, argv in usage.items():
        status, _, err = cli(capsys, "attest", "verify", *argv)
        assert status == EXIT_USAGE, case
        assert err.count("\n") == 1, case
    with pytest.raises(SystemExit) as exited:
        main(["attest", "verify", file])  # --org-key is required
    assert exited.value.code == EXIT_USAGE


def test_cli_an_unreadable_checkpoint_file_is_exit_2(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    checkpoint, _, _ = attested

    def unreadable(path: Path) -> str:
        # A fake for what these tests cannot make: they run as root, who reads a mode-0 file.
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(attestation_statement, "_file_sha256", unreadable)
    status, out, err = cli(
        capsys,
        "attest",
        "verify",
        str(checkpoint / ATTESTATION_FILE),
        "--org-key",
        ORG.public_key.hex(),
    )
    assert (status, out) == (EXIT_USAGE, "")
    assert err.count("\n") == 1
    assert "cannot read" in err
    assert "Permission denied" in err


def _one_less(receipts: list[tuple[str, bytes]], tmp_path: Path) -> Path:
    path = tmp_path / "one-less.jsonl"
    path.write_text(receipts_jsonl(receipts[1:]))
    return path


def test_cli_proves_one_receipt_and_a_holder_of_that_receipt_alone_checks_it(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    checkpoint, _, receipts = attested
    file = str(checkpoint / ATTESTATION_FILE)
    org_hex = ORG.public_key.hex()
    receipts_file = tmp_path / "receipts.jsonl"
    receipts_file.write_text(receipts_jsonl(receipts))
    receipt_id, envelope_bytes = receipts[2]

    status, out, err = cli(
        capsys,
        "attest",
        "prove",
        file,
        "--org-key",
        org_hex,
        "--receipts",
        str(receipts_file),
        "--receipt-id",
        receipt_id,
    )
    assert (status, err) == (EXIT_OK, "")
    proof = json.loads(out)
    assert proof == receipt_proof(receipts, receipt_id)
    proof_file = tmp_path / "proof.json"
    proof_file.write_text(out)
    # The holder has the receipt in the form the worker answered it (grpcurl JSON), not bytes.
    receipt_file = tmp_path / "receipt.json"
    receipt_file.write_text(json_format.MessageToJson(SignedEnvelope.FromString(envelope_bytes)))

    # The attestation copied away from its checkpoint: --no-checkpoint.
    away = tmp_path / "away.json"
    away.write_text((checkpoint / ATTESTATION_FILE).read_text())
    status, out, err = cli(
        capsys,
        "attest",
        "verify",
        str(away),
        "--org-key",
        org_hex,
        "--no-checkpoint",
        "--proof",
        str(proof_file),
        "--receipt",
        str(receipt_file),
    )
    assert (status, err) == (EXIT_OK, "")
    assert "checked: signature, inclusion" in out

    # A receipt that is not the proved one, and a proof that lies.
    other = tmp_path / "other.pb"
    other.write_bytes(receipts[0][1])
    lying = tmp_path / "lying.json"
    lying.write_text(json.dumps({**proof, "index": (proof["index"] + 1) % proof["size"]}))
    for proof_path, receipt_path in ((proof_file, other), (lying, receipt_file)):
        status, _, err = cli(
            capsys,
            "attest",
            "verify",
            str(away),
            "--org-key",
            org_hex,
            "--no-checkpoint",
            "--proof",
            str(proof_path),
            "--receipt",
            str(receipt_path),
        )
        assert status == EXIT_FAILED
        assert err.startswith("rewardseal attest verify: merkle_mismatch: ")

    status, _, err = cli(
        capsys,
        "attest",
        "prove",
        file,
        "--org-key",
        org_hex,
        "--receipts",
        str(receipts_file),
        "--receipt-id",
        "receipt.not.there",
    )
    assert status == EXIT_USAGE
    assert "not in" in err


def test_a_proof_for_another_tree_or_envelope_is_refused(
    attested: tuple[Path, dict[str, Any], list[tuple[str, bytes]]],
) -> None:
    _, doc, receipts = attested
    merkle = verify_attestation(doc, checkpoint=None, org_keys=ORG_KEYS).predicate.merkle
    receipt_id, raw = receipts[1]
    proof = receipt_proof(receipts, receipt_id)
    assert check_receipt_proof(merkle, proof, raw) == receipt_id
    assert check_receipt_proof(merkle, proof) == receipt_id
    smaller = receipt_proof(receipts[1:], receipt_id)
    with pytest.raises(AttestationError, match="another tree") as raised:
        check_receipt_proof(merkle, smaller, raw)
    assert raised.value.reason == "merkle_mismatch"
    with pytest.raises(AttestationError, match="not the one") as raised:
        check_receipt_proof(merkle, proof, receipts[0][1])
    assert raised.value.reason == "merkle_mismatch"
    with pytest.raises(AttestationError, match="lacks 'proof'") as raised:
        check_receipt_proof(merkle, {k: v for k, v in proof.items() if k != "proof"})
    assert raised.value.reason == "malformed"


def test_a_statement_naming_a_file_twice_is_malformed(tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path / "checkpoint")
    subjects = checkpoint_subjects(checkpoint)
    statement = build_statement([*subjects, subjects[0]], predicate_for(stored_receipts()))
    with pytest.raises(AttestationError, match="second time") as raised:
        verify_attestation(sign_attestation(statement, ORG), checkpoint=None, org_keys=ORG_KEYS)
    assert raised.value.reason == "malformed"
