"""Contract- and checker-wide revocation entries (R-C-13): one signed entry revokes every
certificate of a contract or of a checker configuration, whenever it was issued; the follower
keeps its rules for them (rollback, conflict, drop) and ``score()`` given the list refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from support.builders import ISSUED_AT_UPDATE, make_certificate

from rewardseal.core.errors import StaleRevocationList, ValidationError
from rewardseal.core.revocation import (
    RevocationFollower,
    build_revocation_list,
    revokes,
    sign_revocation_list,
)
from rewardseal.core.scoring import score
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.v1.certificate_pb2 import RevocationEntry, RevocationList, RewardCertificate
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_kit.mockmed import mockmed_contract

ORG = SigningKey.from_seed(bytes(range(32)))
TRUST = TrustSet([ORG.public_key])
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TTL = timedelta(hours=24)
CONTRACT = "sha256:" + "c" * 64
OTHER_CONTRACT = "sha256:" + "d" * 64
CHECKER = "sha256:" + "e" * 64
OTHER_CHECKER = "sha256:" + "f" * 64


def _stamp() -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(T0)
    return stamp


def cert_entry(certificate_id: str) -> RevocationEntry:
    return RevocationEntry(certificate_id=certificate_id, reason="leak", revoked_at=_stamp())


def contract_entry(digest: str = CONTRACT) -> RevocationEntry:
    return RevocationEntry(
        reward_contract_digest=digest, reason="checker broken", revoked_at=_stamp()
    )


def checker_entry(digest: str = CHECKER) -> RevocationEntry:
    return RevocationEntry(
        checker_configuration_digest=digest, reason="oracle bug", revoked_at=_stamp()
    )


def listed(version: int, *entries: RevocationEntry) -> RevocationList:
    return build_revocation_list(
        version=version, entries=entries, issued_at=T0, ttl=TTL, issuer_key_id=ORG.key_id
    )


def signed(version: int, *entries: RevocationEntry) -> SignedEnvelope:
    return sign_revocation_list(listed(version, *entries), ORG)


def certificate(
    certificate_id: str = "cert.mockmed.0001",
    *,
    contract: str = CONTRACT,
    checker: str = CHECKER,
) -> RewardCertificate:
    return RewardCertificate(
        certificate_id=certificate_id,
        reward_contract_digest=contract,
        checker_configuration_digest=checker,
    )


def test_a_contract_entry_revokes_every_certificate_of_the_contract_and_no_other() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(1, contract_entry()), T0)
    # Any id, any checker: issued before the entry or after it.
    assert follower.revokes(certificate("cert.mockmed.0001"))
    assert follower.revokes(certificate("cert.issued.later.0009", checker=OTHER_CHECKER))
    assert not follower.revokes(certificate(contract=OTHER_CONTRACT, checker=OTHER_CHECKER))
    # By name nothing is revoked: the entry names a contract, not a certificate.
    assert not follower.is_revoked("cert.mockmed.0001")


def test_a_checker_entry_revokes_every_certificate_of_that_checker_configuration() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(1, checker_entry()), T0)
    assert follower.revokes(certificate(contract=OTHER_CONTRACT))
    assert not follower.revokes(certificate(checker=OTHER_CHECKER))
    held = follower.held
    assert held is not None
    assert revokes(held, certificate(contract=OTHER_CONTRACT))


def test_a_list_that_drops_a_revoked_contract_is_refused() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(1, contract_entry(), cert_entry("cert.mockmed.0001")), T0)
    with pytest.raises(StaleRevocationList, match=f"drops revoked contract {CONTRACT}"):
        follower.accept(signed(2, cert_entry("cert.mockmed.0001")), T0)
    assert follower.version == 1
    assert follower.revokes(certificate("cert.any.00000001"))


def test_a_list_that_drops_a_revoked_checker_is_refused() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(1, checker_entry()), T0)
    with pytest.raises(StaleRevocationList, match=f"drops revoked checker {CHECKER}"):
        follower.accept(signed(2, contract_entry()), T0)
    assert follower.version == 1


def test_rollback_and_conflict_hold_for_scoped_entries() -> None:
    follower = RevocationFollower(TRUST)
    follower.accept(signed(2, contract_entry()), T0)
    with pytest.raises(StaleRevocationList, match="rollback"):
        follower.accept(signed(1, contract_entry()), T0)
    with pytest.raises(StaleRevocationList, match="conflicting"):
        follower.accept(signed(2, contract_entry(), checker_entry()), T0)
    # Growing is fine: the next version adds a checker entry and keeps the contract one.
    follower.accept(signed(3, contract_entry(), checker_entry()), T0)
    assert follower.version == 3


@pytest.mark.parametrize(
    "bad",
    [
        RevocationEntry(reason="x", revoked_at=_stamp()),
        RevocationEntry(
            certificate_id="cert.mockmed.0001",
            reward_contract_digest=CONTRACT,
            reason="x",
            revoked_at=_stamp(),
        ),
        RevocationEntry(
            reward_contract_digest=CONTRACT,
            checker_configuration_digest=CHECKER,
            reason="x",
            revoked_at=_stamp(),
        ),
        RevocationEntry(reward_contract_digest="sha256:short", reason="x", revoked_at=_stamp()),
        RevocationEntry(
            checker_configuration_digest="md5:" + "0" * 32, reason="x", revoked_at=_stamp()
        ),
        RevocationEntry(reward_contract_digest=CONTRACT, reason=" ", revoked_at=_stamp()),
        RevocationEntry(reward_contract_digest=CONTRACT, reason="x"),
    ],
    ids=[
        "none",
        "certificate-and-contract",
        "contract-and-checker",
        "bad-contract",
        "bad-checker",
        "blank-reason",
        "no-time",
    ],
)
def test_an_entry_naming_none_several_or_a_malformed_target_is_refused(
    bad: RevocationEntry,
) -> None:
    with pytest.raises(ValidationError):
        listed(1, bad)


def test_the_same_contract_twice_is_refused_and_entries_sort_deterministically() -> None:
    with pytest.raises(ValidationError, match="listed twice"):
        listed(1, contract_entry(), contract_entry())
    one = listed(1, cert_entry("cert.b.00000001"), checker_entry(), contract_entry())
    two = listed(1, contract_entry(), cert_entry("cert.b.00000001"), checker_entry())
    assert one.SerializeToString(deterministic=True) == two.SerializeToString(deterministic=True)
    # A list of certificate entries only keeps the order (and bytes) it always had.
    plain = listed(1, cert_entry("cert.b.00000002"), cert_entry("cert.a.00000001"))
    assert [e.certificate_id for e in plain.entries] == ["cert.a.00000001", "cert.b.00000002"]


def test_score_given_the_list_refuses_a_certificate_of_a_revoked_contract_as_revoked() -> None:
    contract = mockmed_contract()
    held_certificate = make_certificate(contract)
    clean = score(
        RewardOutcome.REWARD_OUTCOME_VERIFIED,
        tier=2,
        certificate=held_certificate,
        policy_update=ISSUED_AT_UPDATE,
        contract=contract,
        revocation_list=listed(1, cert_entry("cert.other.00000001")),
    )
    assert clean.certified, clean.refusals
    for entry in (
        contract_entry(held_certificate.reward_contract_digest),
        checker_entry(held_certificate.checker_configuration_digest),
    ):
        refused = score(
            RewardOutcome.REWARD_OUTCOME_VERIFIED,
            tier=2,
            certificate=held_certificate,
            policy_update=ISSUED_AT_UPDATE,
            contract=contract,
            revocation_list=listed(1, entry),
        )
        assert refused.scalar == 1.0
        assert not refused.certified
        assert refused.refusals == (f"certificate {held_certificate.certificate_id} is revoked",)
