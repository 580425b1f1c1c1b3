"""A receipt's findings (R-MSG-12): one vocabulary, the rules that bound them, their wire form.

The worker-level tests (a finding per code through a real worker, the privacy test) are in
tests/worker/test_receipt_findings.py; these hold the pure rules: every code of the vocabulary
goes through a signed receipt and back, every malformed finding is refused by name, a decision's
findings carry only the contract's names, and the issuer's templates never leak one receipt's
findings into the next.
"""

from __future__ import annotations

import dataclasses

import pytest
from support.builders import TEST_KEY, make_certificate, make_facts

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import EffectSpec, IdentityRef, judge_episode
from rewardseal.core.judging.findings import EPISODE_FAULTS, FIELD_FAULTS, Fault
from rewardseal.core.judging.receipt_findings import (
    CODE_OF_FAULT,
    MAX_FINDINGS,
    ReceiptFinding,
    contract_names,
    decision_findings,
    findings_text,
    read_findings,
)
from rewardseal.core.receipts import ReceiptIssuer, build_receipt, issue_receipt, open_receipt
from rewardseal.core.signing import TrustSet
from rewardseal.core.validation import validate_receipt
from rewardseal.v1.enums_pb2 import FindingCode, RewardOutcome, RuntimeSignal
from rewardseal.v1.receipt_pb2 import Finding, RewardEvidenceReceipt
from rewardseal_mockmed.contract import mockmed_contract

WRONG = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
TRUST = TrustSet([TEST_KEY.public_key])

EFFECT = EffectSpec(
    name="triage",
    collection="encounters",
    select={"patient_id": IdentityRef("patient_id")},
    expect={"type": "Triage"},
    new_records=1,
    allowed_fields=frozenset({"patient_id", "type", "note"}),
    required_fields=frozenset({"note"}),
)
IDENTITY = {"patient_id": "p1"}


def receipt_with(
    *findings: Finding, outcome: RewardOutcome.ValueType = WRONG
) -> RewardEvidenceReceipt:
    contract = mockmed_contract()
    receipt = build_receipt(
        make_facts(outcome),
        contract=contract,
        certificate=make_certificate(contract),
        issuer_key_id=TEST_KEY.key_id,
    )
    receipt.findings.extend(findings)
    return receipt


def test_one_vocabulary_every_fault_a_code_and_back() -> None:
    assert {FindingCode.Name(code) for code in CODE_OF_FAULT.values()} == {
        FindingCode.Name(code) for code in FindingCode.values() if code != 0
    }
    for fault, code in CODE_OF_FAULT.items():
        assert FindingCode.Name(code) == f"FINDING_CODE_{fault.value.upper()}"


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_every_code_travels_signed_and_reads_back(fault: Fault) -> None:
    effect = "" if fault in EPISODE_FAULTS else "triage"
    fields = ("note", "type") if fault in FIELD_FAULTS else ()
    finding = ReceiptFinding(effect, fault.value, fields)
    contract = mockmed_contract()
    issued = issue_receipt(
        dataclasses.replace(make_facts(WRONG), findings=(finding,)),
        contract=contract,
        certificate=make_certificate(contract),
        key=TEST_KEY,
    )
    opened = open_receipt(issued.envelope, TRUST)
    assert opened.findings == (finding,)
    assert opened.findings[0].code == fault.value


@pytest.mark.parametrize(
    ("finding", "words"),
    [
        (Finding(effect="triage"), "not a known code"),
        (Finding(effect="triage", code=FindingCode.ValueType(99)), "not a known code"),
        (Finding(effect="triage", code=FindingCode.FINDING_CODE_READ_FAILED), "names no effect"),
        (Finding(code=FindingCode.FINDING_CODE_MISSING_RECORD), "not an effect name"),
        (Finding(effect="bad name", code=FindingCode.FINDING_CODE_MISSING_RECORD), "effect name"),
        (
            Finding(effect="triage", code=FindingCode.FINDING_CODE_MISSING_RECORD, fields=["x"]),
            "names no fields",
        ),
        (
            Finding(effect="triage", code=FindingCode.FINDING_CODE_WRONG_FIELD, fields=["b", "a"]),
            "sorted and unique",
        ),
        (
            Finding(effect="triage", code=FindingCode.FINDING_CODE_WRONG_FIELD, fields=["a", "a"]),
            "sorted and unique",
        ),
        (
            Finding(effect="triage", code=FindingCode.FINDING_CODE_WRONG_FIELD, fields=["no te"]),
            "not a field name",
        ),
        (
            Finding(
                effect="triage",
                code=FindingCode.FINDING_CODE_EXTRA_FIELD,
                fields=[f"f{i:02d}" for i in range(33)],
            ),
            "at most 32 fields",
        ),
    ],
)
def test_a_malformed_finding_is_refused(finding: Finding, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        validate_receipt(receipt_with(finding))


def test_findings_are_bounded_unique_and_absent_when_verified() -> None:
    one = Finding(effect="triage", code=FindingCode.FINDING_CODE_MISSING_RECORD)
    with pytest.raises(ValidationError, match="each finding once"):
        validate_receipt(receipt_with(one, one))
    many = [
        Finding(effect=f"effect{i}", code=FindingCode.FINDING_CODE_MISSING_RECORD)
        for i in range(MAX_FINDINGS + 1)
    ]
    with pytest.raises(ValidationError, match=f"at most {MAX_FINDINGS} findings"):
        validate_receipt(receipt_with(*many))
    validate_receipt(receipt_with(*many[:MAX_FINDINGS]))
    with pytest.raises(ValidationError, match="VERIFIED receipt carries no findings"):
        validate_receipt(receipt_with(one, outcome=RewardOutcome.REWARD_OUTCOME_VERIFIED))


def test_a_decision_names_only_the_contracts_fields() -> None:
    names = contract_names([EFFECT])
    assert names == {"patient_id", "type", "note"}
    record = {"id": "r1", "patient_id": "p1", "type": "Intake", "ssn_col": "123", "note": "x"}
    decision = judge_episode(
        [EFFECT],
        [],
        IDENTITY,
        [],
        [record, {**record, "id": "r2", "type": "Triage"}],
        RuntimeSignal.RUNTIME_SIGNAL_COMPLETED,
    )
    found = decision_findings(decision, names)
    # Two records share the same extra-field finding: it is given once, with no unnamed field.
    assert found == (
        ReceiptFinding("triage", "duplicate_record"),
        ReceiptFinding("triage", "wrong_field", ("type",)),
        ReceiptFinding("triage", "extra_field"),
    )
    assert (
        findings_text(found)
        == "triage:duplicate_record triage:wrong_field(type) triage:extra_field"
    )
    assert findings_text(()) == ""


def test_an_unreadable_sor_is_one_episode_finding_without_its_error_text() -> None:
    decision = judge_episode(
        [EFFECT],
        [],
        IDENTITY,
        [],
        None,
        RuntimeSignal.RUNTIME_SIGNAL_COMPLETED,
        oracle_error="no such table: secret_table_name",
    )
    assert decision_findings(decision, contract_names([EFFECT])) == (
        ReceiptFinding("", "read_failed"),
    )


def test_stamped_receipts_carry_their_own_findings_only() -> None:
    contract = mockmed_contract()
    issuer = ReceiptIssuer(contract=contract, certificate=make_certificate(contract), key=TEST_KEY)
    first = ReceiptFinding("triage", "missing_record")
    second = ReceiptFinding("triage", "wrong_field", ("type",))
    facts = make_facts(WRONG)
    a = issuer.issue(dataclasses.replace(facts, findings=(first,)))
    b = issuer.issue(dataclasses.replace(facts, episode_id="episode.0002", findings=(second,)))
    c = issuer.issue(dataclasses.replace(facts, episode_id="episode.0003"))
    assert read_findings(a.receipt) == (first,)
    assert read_findings(b.receipt) == (second,)
    assert read_findings(c.receipt) == ()
    # Byte for byte what issue_receipt makes from the same facts.
    alone = issue_receipt(
        dataclasses.replace(facts, episode_id="episode.0002", findings=(second,)),
        contract=contract,
        certificate=make_certificate(contract),
        key=TEST_KEY,
    )
    assert b.envelope.payload == alone.envelope.payload
