"""``rewardseal-control attest`` (R-C-15): hash a checkpoint directory, have control attest it,
write the DSSE JSON and the scope's receipts; against a real control server on each backend."""

from __future__ import annotations

import json
from pathlib import Path

from support.attestation import DIGEST, FIRST, LAST, expected_root, seeded, statement_of
from support.control import CLIENT_TOKEN, ControlStack
from support.control_cli import cli

from rewardseal.cli import main as rewardseal_main
from rewardseal.core import attestation
from rewardseal.core.attestation import read_receipts_jsonl


def checkpoint_dir(root: Path) -> Path:
    directory = root / "checkpoint-7"
    (directory / "tokenizer").mkdir(parents=True)
    (directory / "model.safetensors").write_bytes(b"\x00weights" * 100)
    (directory / "tokenizer" / "vocab.json").write_text('{"a": 1}')
    return directory


async def test_attest_writes_the_signed_attestation_and_the_receipts_of_its_scope(
    control: ControlStack, tmp_path: Path
) -> None:
    in_scope, _ = await seeded(control)
    directory = checkpoint_dir(tmp_path)
    out = directory / attestation.ATTESTATION_FILE
    receipts = tmp_path / "receipts.json"
    code, stdout, stderr = await cli(
        control,
        "attest",
        "--checkpoint", str(directory),
        "--contract", DIGEST,
        "--checkpoint-id", "policy.checkpoint.0001",
        "--first", str(FIRST),
        "--last", str(LAST),
        "--out", str(out),
        "--receipts-out", str(receipts),
        token=CLIENT_TOKEN,
    )  # fmt: skip
    assert (code, stderr) == (0, "")
    assert "over 5 receipt(s)" in stdout
    statement = statement_of(json.loads(out.read_text()))
    assert statement["subject"] == attestation.checkpoint_subjects(directory)
    assert [s["name"] for s in statement["subject"]] == [
        "model.safetensors",
        "tokenizer/vocab.json",
    ]
    exported = read_receipts_jsonl(receipts.read_text())
    assert [receipt_id for receipt_id, _ in exported] == sorted(r for r, _ in exported)
    assert len(exported) == 5
    # The exported envelopes are the stored bytes: they reproduce the signed root.
    assert statement["predicate"]["merkle"]["root"] == expected_root(in_scope)
    # The client-side verifier accepts it (exit 0) and refuses a changed checkpoint (exit 1).
    org_key = control.key.public_key.hex()
    verify = ["attest", "verify", str(out), "--org-key", org_key, "--receipts", str(receipts)]
    assert rewardseal_main(verify) == 0
    (directory / "model.safetensors").write_bytes(b"other weights")
    assert rewardseal_main(verify) == 1


async def test_attest_to_stdout_and_its_failures(control: ControlStack, tmp_path: Path) -> None:
    await seeded(control)
    directory = checkpoint_dir(tmp_path)
    code, stdout, _ = await cli(
        control, "attest", "--checkpoint", str(directory), "--contract", DIGEST,
        "--last", str(LAST), token=CLIENT_TOKEN,
    )  # fmt: skip
    assert code == 0
    assert json.loads(stdout)["payloadType"] == attestation.STATEMENT_PAYLOAD_TYPE
    # Nothing in scope: control refuses (exit 1, one line with the reason).
    code, _, stderr = await cli(
        control, "attest", "--checkpoint", str(directory), "--contract", DIGEST,
        "--first", str(LAST + 50), "--last", str(LAST + 60), token=CLIENT_TOKEN,
    )  # fmt: skip
    assert code == 1
    assert "(nothing_to_attest)" in stderr
    # Not a directory: a local error (exit 2), nothing sent.
    code, _, stderr = await cli(
        control, "attest", "--checkpoint", str(tmp_path / "absent"), "--contract", DIGEST,
        "--last", str(LAST), token=CLIENT_TOKEN,
    )  # fmt: skip
    assert code == 2
    assert "is not a directory" in stderr
