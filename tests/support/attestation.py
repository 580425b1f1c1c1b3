"""Receipts recorded through control's real ingest path, for the attestation tests (R-C-15)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Any

from securesystemslib.signer import SSlibKey

from rewardseal.core import attestation
from rewardseal.core.contract import contract_digest
from rewardseal.core.receipts import build_receipt, seal_receipt
from rewardseal.core.signing import SigningKey
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RewardCertificate
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    IssuerKeyRole,
    RewardOutcome,
)
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_mockmed.contract import mockmed_contract
from support.builders import ISSUED_AT_UPDATE, make_certificate, make_facts
from support.control import ADMIN, TRAINER, ControlStack, calibration_summary

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
FAILED = RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM
WORKER_KEY = SigningKey.from_seed(bytes(range(32)))  # support.builders' certificate signer
CONTRACT = mockmed_contract()
DIGEST = contract_digest(CONTRACT)
CHECKPOINT = "policy.checkpoint.0001"
FIRST, LAST = ISSUED_AT_UPDATE, ISSUED_AT_UPDATE + 9
SUBJECTS = [
    pb.CheckpointSubject(name="model.safetensors", sha256="ab" * 32),
    pb.CheckpointSubject(name="config.json", sha256="cd" * 32),
]


async def enroll_worker(stack: ControlStack) -> None:
    """Register the contract and the admitted worker key with its bundle certificate."""
    await stack.stub().RegisterContract(
        pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest=DIGEST),
        metadata=TRAINER,
    )
    key = IssuerKey(
        public_key=WORKER_KEY.public_key,
        role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER,
        display_name="worker 1",
    )
    key.not_before.FromDatetime(stack.clock.now.replace(year=2025))
    await stack.stub().RegisterIssuerKey(
        pb.RegisterIssuerKeyRequest(
            key=key,
            reason="worker enrolled",
            reward_contract_digests=[DIGEST],
            bundle_certificate=make_certificate(CONTRACT),
        ),
        metadata=ADMIN,
    )


def sealed(
    episode: str,
    outcome: RewardOutcome.ValueType = VERIFIED,
    *,
    policy_update: int = FIRST,
    certificate: RewardCertificate | None = None,
    checkpoint: str = CHECKPOINT,
) -> SignedEnvelope:
    facts = dataclasses.replace(
        make_facts(outcome, episode_id=episode, policy_update=policy_update),
        policy_checkpoint_id=checkpoint,
    )
    receipt = build_receipt(
        facts, contract=CONTRACT, certificate=certificate, issuer_key_id=WORKER_KEY.key_id
    )
    return seal_receipt(receipt, WORKER_KEY)


async def record(stack: ControlStack, envelopes: list[SignedEnvelope]) -> None:
    answer = await stack.stub().RecordReceipts(
        pb.RecordReceiptsRequest(receipts=envelopes), metadata=TRAINER
    )
    assert all(r.recorded and not r.duplicate for r in answer.results), answer


async def seeded(stack: ControlStack) -> tuple[list[SignedEnvelope], RewardCertificate]:
    """Receipts in scope (5, under the bundle certificate and one control issued) and out of it
    (another checkpoint id, an update past the range); the in-scope envelopes and the issued
    certificate."""
    await enroll_worker(stack)
    issued = await stack.stub().IssueCertificate(
        pb.IssueCertificateRequest(
            reward_contract_digest=DIGEST,
            calibration=calibration_summary(DIGEST),
            calibration_scope=CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
            issuer=CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
            issued_at_policy_update=ISSUED_AT_UPDATE,
            expiry_policy_updates=50,
            reason="calibrated",
        ),
        metadata=ADMIN,
    )
    bundle = make_certificate(CONTRACT)
    in_scope = [
        sealed("episode.0001", VERIFIED, policy_update=FIRST, certificate=bundle),
        sealed("episode.0002", VERIFIED, policy_update=FIRST + 1, certificate=issued.certificate),
        sealed("episode.0003", WRONG, policy_update=FIRST + 2),
        sealed("episode.0004", FAILED, policy_update=FIRST + 3),
        sealed("episode.0005", VERIFIED, policy_update=LAST, certificate=issued.certificate),
    ]
    outside = [
        sealed("episode.0006", VERIFIED, policy_update=LAST + 1),
        sealed("episode.0007", VERIFIED, policy_update=FIRST, checkpoint="policy.checkpoint.0002"),
    ]
    # Sent in an order that is not the leaf order.
    await record(stack, [*reversed(in_scope), *outside])
    return in_scope, issued.certificate


def statement_of(document: dict[str, Any]) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(base64.b64decode(document["payload"]))
    return statement


def receipt_id_of(envelope: SignedEnvelope) -> str:
    """The id of the receipt ``envelope`` carries."""
    return RewardEvidenceReceipt.FromString(envelope.payload).receipt_id


def expected_root(envelopes: list[SignedEnvelope]) -> str:
    """The root recomputed here from what was sent: leaves ordered by receipt id."""
    pairs = sorted(
        (
            RewardEvidenceReceipt.FromString(e.payload).receipt_id,
            e.SerializeToString(deterministic=True),
        )
        for e in envelopes
    )
    leaves = [
        attestation.receipt_leaf(receipt_id, "sha256:" + hashlib.sha256(raw).hexdigest())
        for receipt_id, raw in pairs
    ]
    return attestation.merkle_root(leaves)


def sslib_key(key: SigningKey) -> SSlibKey:
    """``key`` as securesystemslib's DSSE verifier takes it (an independent verifier)."""
    return SSlibKey(key.key_id, "ed25519", "ed25519", {"public": key.public_key.hex()})
