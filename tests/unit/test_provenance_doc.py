"""docs/provenance.md's Python blocks run as written (R-A-1, R-A-3): securesystemslib verifies a
real attestation and its subjects by hand, and the standard-library inclusion check accepts a
proof ``attest prove`` made, and refuses another receipt."""

from __future__ import annotations

import json
import re
import traceback
from pathlib import Path

import pytest
from unit.test_attestation import ORG, predicate_for, stored_receipts, write_checkpoint

from rewardseal.core.attestation import (
    build_statement,
    checkpoint_subjects,
    receipt_proof,
    sign_attestation,
    write_attestation,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "provenance.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)


def prepare(directory: Path, receipt_index: int = 2) -> None:
    checkpoint = write_checkpoint(directory / "checkpoint-2")
    receipts = stored_receipts()
    statement = build_statement(checkpoint_subjects(checkpoint), predicate_for(receipts))
    write_attestation(checkpoint, sign_attestation(statement, ORG))
    (directory / "organization.pub").write_text(ORG.public_key.hex() + "\n")
    (directory / "proof.json").write_text(json.dumps(receipt_proof(receipts, receipts[2][0])))
    (directory / "receipt.pb").write_bytes(receipts[receipt_index][1])


def run_blocks(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(directory)
    namespace: dict[str, object] = {"__name__": "provenance_doc"}
    for block in python_blocks():
        try:
            exec(compile(block, "<provenance.md>", "exec"), namespace)
        except AssertionError as exc:
            # Say which documented assert failed: the line of the block it is on.
            frames = traceback.extract_tb(exc.__traceback__)
            line = [f.lineno for f in frames if f.filename == "<provenance.md>"][-1] or 1
            raise AssertionError(block.splitlines()[line - 1].strip()) from exc


def test_the_documented_checks_run_and_accept_a_real_attestation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(python_blocks()) == 2
    prepare(tmp_path)
    run_blocks(tmp_path, monkeypatch)


def test_the_documented_inclusion_check_refuses_another_receipt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare(tmp_path, receipt_index=0)
    with pytest.raises(AssertionError, match="envelope_digest == "):
        run_blocks(tmp_path, monkeypatch)


def test_the_documented_inclusion_check_refuses_a_lying_proof(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare(tmp_path)
    proof = json.loads((tmp_path / "proof.json").read_text())
    proof["proof"][0] = "00" * 32
    (tmp_path / "proof.json").write_text(json.dumps(proof))
    with pytest.raises(AssertionError, match="inclusion_root"):
        run_blocks(tmp_path, monkeypatch)


def test_the_documented_subject_check_refuses_a_changed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare(tmp_path)
    (tmp_path / "checkpoint-2" / "config.json").write_text("{}")
    with pytest.raises(AssertionError, match="on_disk"):
        run_blocks(tmp_path, monkeypatch)
