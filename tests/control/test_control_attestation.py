"""AttestCheckpoint (R-C-15): a signed in-toto Statement over the receipts that trained a
checkpoint, on a real control server (port 0) on each backend, the receipts recorded through
RecordReceipts (the real ingest path: signature, admission, binding, certificate checks)."""

from __future__ import annotations

import copy
import json
from typing import Any

import grpc
import pytest
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from support.attestation import (
    CHECKPOINT,
    DIGEST,
    FIRST,
    LAST,
    SUBJECTS,
    expected_root,
    receipt_id_of,
    seeded,
    sslib_key,
    statement_of,
)
from support.control import ADMIN, TRAINER, WORKER, ControlStack, wire_error
from support.integrity import agreeing_rows, audit_to_end, capture, create_system

from rewardseal.core import attestation
from rewardseal.core.attestation import verify_attestation
from rewardseal.core.errors import AttestationError
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt


def attest_request(**overrides: Any) -> pb.AttestCheckpointRequest:
    fields: dict[str, Any] = {
        "reward_contract_digests": [DIGEST],
        "policy_checkpoint_ids": [CHECKPOINT],
        "policy_update_first": FIRST,
        "policy_update_last": LAST,
        "subjects": SUBJECTS,
    }
    fields.update(overrides)
    return pb.AttestCheckpointRequest(**fields)


async def test_the_attestation_binds_the_receipts_in_scope_and_verifies_independently(
    control: ControlStack,
) -> None:
    in_scope, issued = await seeded(control)
    answer = await control.stub().AttestCheckpoint(attest_request(), metadata=TRAINER)
    document = json.loads(answer.attestation_json)
    # rewardseal's verifier: the organization's signature, and the receipts sent reproduce the
    # root and the tally; one left out does not.
    pairs = [(receipt_id_of(e), e.SerializeToString(deterministic=True)) for e in in_scope]
    org = TrustSet([control.key.public_key])
    verified = verify_attestation(document, checkpoint=None, org_keys=org, receipts=pairs)
    assert verified.checks == ("signature", "merkle")
    with pytest.raises(AttestationError) as missing:
        verify_attestation(document, checkpoint=None, org_keys=org, receipts=pairs[1:])
    assert missing.value.reason == "merkle_mismatch"
    with pytest.raises(AttestationError) as foreign:
        verify_attestation(
            document, checkpoint=None, org_keys=TrustSet([SigningKey.generate().public_key])
        )
    assert foreign.value.reason == "bad_signature"
    # securesystemslib's DSSE verifier, with control's organization key only.
    accepted = Envelope.from_dict(copy.deepcopy(document)).verify([sslib_key(control.key)], 1)
    assert set(accepted) == {control.key.key_id}
    with pytest.raises(VerificationError):
        Envelope.from_dict(copy.deepcopy(document)).verify([sslib_key(SigningKey.generate())], 1)

    statement = statement_of(document)
    assert statement["_type"] == attestation.STATEMENT_TYPE
    assert statement["predicateType"] == attestation.PREDICATE_TYPE
    assert statement["subject"] == [
        {"name": "config.json", "digest": {"sha256": "cd" * 32}},
        {"name": "model.safetensors", "digest": {"sha256": "ab" * 32}},
    ]
    predicate = statement["predicate"]
    assert predicate["policy_checkpoint_ids"] == [CHECKPOINT]
    assert (predicate["policy_update_first"], predicate["policy_update_last"]) == (FIRST, LAST)
    assert predicate["contract_digests"] == [DIGEST]
    assert predicate["issuer_key_id"] == control.key.key_id
    # The tally and the root are those of the five receipts in scope, not the two outside.
    assert predicate["receipts"]["total"] == 5
    assert predicate["receipts"]["by_outcome"] == {
        "failed_platform": 1,
        "verified": 3,
        "wrong_effect": 1,
    }
    assert predicate["receipts"]["certified"] == 3
    assert predicate["receipts"]["unscored"] == 1
    assert predicate["merkle"]["size"] == 5 == answer.receipt_count
    assert predicate["merkle"]["root"] == expected_root(in_scope) == answer.merkle_root
    # Both certificates named, each with its parameters and its state over the range.
    uses = {use["certificate_id"]: use for use in predicate["certificates"]}
    assert set(uses) == {"cert.mockmed.0001", issued.certificate_id}
    assert uses[issued.certificate_id]["state"] == "current"
    assert uses[issued.certificate_id]["epsilon"] == repr(issued.epsilon)
    assert uses[issued.certificate_id]["revocations"] == []
    assert predicate["integrity_audits"] == []


async def test_any_checkpoint_id_when_none_is_named_and_receipts_come_in_leaf_order(
    control: ControlStack,
) -> None:
    await seeded(control)
    answer = await control.stub().AttestCheckpoint(
        attest_request(policy_checkpoint_ids=[], include_receipts=True), metadata=ADMIN
    )
    predicate = statement_of(json.loads(answer.attestation_json))["predicate"]
    assert predicate["policy_checkpoint_ids"] == [CHECKPOINT, "policy.checkpoint.0002"]
    assert predicate["receipts"]["total"] == 6
    ids = [RewardEvidenceReceipt.FromString(e.payload).receipt_id for e in answer.receipts]
    assert ids == sorted(ids)
    assert len(ids) == 6
    assert answer.merkle_root == expected_root(list(answer.receipts))


async def test_a_revoked_certificate_is_reported_revoked_with_its_revocation(
    control: ControlStack,
) -> None:
    _, issued = await seeded(control)
    await control.stub().RevokeCertificate(
        pb.RevokeCertificateRequest(certificate_id=issued.certificate_id, reason="leaked oracle"),
        metadata=ADMIN,
    )
    answer = await control.stub().AttestCheckpoint(attest_request(), metadata=TRAINER)
    uses = {
        use["certificate_id"]: use
        for use in statement_of(json.loads(answer.attestation_json))["predicate"]["certificates"]
    }
    assert uses[issued.certificate_id]["state"] == "revoked"
    [revocation] = uses[issued.certificate_id]["revocations"]
    assert (revocation["scope"], revocation["reason"]) == ("certificate", "leaked oracle")
    assert revocation["list_version"] >= 1
    assert uses["cert.mockmed.0001"]["state"] == "current"


async def test_a_certificate_expired_at_the_ranges_last_update_is_reported_expired(
    control: ControlStack,
) -> None:
    await seeded(control)
    # Both certificates run from update 100 for 50 updates: expired at 200.
    answer = await control.stub().AttestCheckpoint(
        attest_request(policy_update_first=0, policy_update_last=200), metadata=TRAINER
    )
    uses = statement_of(json.loads(answer.attestation_json))["predicate"]["certificates"]
    assert {use["state"] for use in uses} == {"expired"}


async def test_an_empty_scope_is_refused_as_nothing_to_attest(control: ControlStack) -> None:
    await seeded(control)
    code, reason, metadata, message = await wire_error(
        control,
        "AttestCheckpoint",
        attest_request(policy_update_first=LAST + 100, policy_update_last=LAST + 200),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "nothing_to_attest")
    assert metadata == {
        "policy_update_first": str(LAST + 100),
        "policy_update_last": str(LAST + 200),
    }
    assert "no receipt" in message


@pytest.mark.parametrize(
    ("subjects", "needle"),
    [
        ([], "at least one"),
        ([pb.CheckpointSubject(name="model.bin", sha256="AB" * 32)], "64 lowercase hex"),
        ([pb.CheckpointSubject(name="model.bin", sha256="ab" * 31)], "64 lowercase hex"),
        (
            [
                pb.CheckpointSubject(name="model.bin", sha256="ab" * 32),
                pb.CheckpointSubject(name="model.bin", sha256="cd" * 32),
            ],
            "named twice",
        ),
        ([pb.CheckpointSubject(name="", sha256="ab" * 32)], "1-4096 characters"),
        ([pb.CheckpointSubject(name="../etc/passwd", sha256="ab" * 32)], "relative"),
        ([pb.CheckpointSubject(name="/abs/model.bin", sha256="ab" * 32)], "relative"),
    ],
    ids=["none", "upper-hex", "short-digest", "duplicate", "empty-name", "dotdot", "absolute"],
)
async def test_bad_subjects_are_refused_as_invalid_subject(
    control: ControlStack, subjects: list[pb.CheckpointSubject], needle: str
) -> None:
    await seeded(control)
    code, reason, _, message = await wire_error(
        control, "AttestCheckpoint", attest_request(subjects=subjects), metadata=TRAINER
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_subject")
    assert needle in message


@pytest.mark.parametrize(
    ("overrides", "code", "reason"),
    [
        ({"reward_contract_digests": []}, grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument"),
        (
            {"reward_contract_digests": ["sha256:x"]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_argument",
        ),
        (
            {"reward_contract_digests": ["sha256:" + "0" * 64]},
            grpc.StatusCode.NOT_FOUND,
            "not_found",
        ),
        (
            {"policy_checkpoint_ids": ["short"]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_argument",
        ),
        (
            {"policy_update_first": LAST, "policy_update_last": FIRST},
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_argument",
        ),
        ({"policy_update_first": -1}, grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument"),
        ({"integrity_run_id": "bad id"}, grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument"),
    ],
    ids=[
        "no-contract",
        "bad-digest",
        "unknown-contract",
        "bad-checkpoint-id",
        "inverted-range",
        "negative-update",
        "bad-run-id",
    ],
)
async def test_a_malformed_scope_is_refused(
    control: ControlStack, overrides: dict[str, Any], code: grpc.StatusCode, reason: str
) -> None:
    await seeded(control)
    answer = await wire_error(
        control, "AttestCheckpoint", attest_request(**overrides), metadata=TRAINER
    )
    assert answer[:2] == (code, reason)


async def test_the_worker_credential_may_not_attest(control: ControlStack) -> None:
    await seeded(control)
    code, reason, _, _ = await wire_error(
        control, "AttestCheckpoint", attest_request(), metadata=WORKER
    )
    assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "permission_denied")


async def test_the_decisions_in_force_of_the_named_run_over_the_range_are_carried(
    control: ControlStack,
) -> None:
    await seeded(control)
    system_id = await create_system(control)
    run = "run-attest-0001"
    inside = agreeing_rows(100, boundary=FIRST + 1, inverted=True)
    paused = await audit_to_end(
        control, (await capture(control, inside, system_id=system_id, run_id=run)).shard_id
    )
    outside = agreeing_rows(100, boundary=LAST + 5)
    await audit_to_end(
        control, (await capture(control, outside, system_id=system_id, run_id=run)).shard_id
    )
    answer = await control.stub().AttestCheckpoint(
        attest_request(integrity_run_id=run), metadata=TRAINER
    )
    audits = statement_of(json.loads(answer.attestation_json))["predicate"]["integrity_audits"]
    assert [(a["boundary"], a["audit_id"], a["decision"]) for a in audits] == [
        (FIRST + 1, paused.audit_id, "pause")
    ]
    assert audits[0]["reason"]
