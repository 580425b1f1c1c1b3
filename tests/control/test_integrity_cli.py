"""``rewardseal-control integrity …`` (docs/integrity.md): local validation with the core rules,
and every command against a real control plane on port 0 serving ``RewardIntegrityService``:
tables for people, ``--json`` for scripts, refusals as exit status 1 with one line on stderr,
bad files and bad flags as exit status 2."""

from __future__ import annotations

import io
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.control import CLIENT_TOKEN, ControlStack, start_control, stop_control
from support.control_cli import cli, table_rows
from support.integrity_specs import capture, spec, write_spec

from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    correlation_reasons,
    parse_reward_system,
)
from rewardseal.rpc.integrity_client import AsyncIntegrityClient
from rewardseal_control.cli import main
from rewardseal_control.settings import ADMIN_TOKEN_ENV, TOKEN_ENV

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrity.md"


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens and targets come from flags in these tests."""
    for name in (ADMIN_TOKEN_ENV, TOKEN_ENV, "REWARDSEAL_CONTROL_TARGET"):
        monkeypatch.delenv(name, raising=False)


def local(*argv: str) -> tuple[int, str, str]:
    """Run the CLI with no target and no token: what runs must run here."""
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def fields(text: str) -> dict[str, str]:
    """The first FIELD/VALUE table printed, as a dict (values may hold spaces)."""
    lines = text.strip().splitlines()
    offset = lines[0].index("VALUE")
    table: dict[str, str] = {}
    for line in lines[1:]:
        if not line.strip():
            break
        table[line[:offset].strip()] = line[offset:].strip()
    return table


def one_line(err: str) -> str:
    assert len(err.strip().splitlines()) == 1, err
    return err


# --- Local: no control plane, no token ---


def test_system_validate_runs_the_core_rules_locally(tmp_path: Path) -> None:
    document = spec()
    path = write_spec(tmp_path / "system.json", document)
    code, out, err = local("integrity", "system", "validate", "--spec", str(path))
    assert (code, err) == (0, "")
    assert fields(out)["revision_id"] == parse_reward_system(document).revision_id
    assert fields(out)["checked by"] == "local"
    code, out, _ = local("integrity", "system", "validate", "--spec", str(path), "--json")
    assert code == 0
    assert json.loads(out) == {
        "checked_by": "local",
        "blockers": [],
        "revision_id": parse_reward_system(document).revision_id,
        "primary_sentinel_independent": True,
        "correlation_reasons": [],
    }
    correlated = write_spec(tmp_path / "correlated.json", spec(correlated=True))
    code, out, _ = local("integrity", "system", "validate", "--spec", str(correlated), "--json")
    assert code == 0  # valid: a correlated sentinel may be stored, for inspection only
    assert json.loads(out)["correlation_reasons"] == ["shared_implementation_fingerprint"]
    assert json.loads(out)["primary_sentinel_independent"] is False


def test_local_validation_lists_every_blocker_and_exits_one(tmp_path: Path) -> None:
    document = spec(threshold=2.0)
    document["auditors"].append(dict(document["auditors"][0]))  # two primary sentinels
    document["optimizer"]["tokn"] = "x"
    path = write_spec(tmp_path / "bad.json", document)
    code, out, err = local("integrity", "system", "validate", "--spec", str(path), "--json")
    assert code == 1
    assert json.loads(out)["blockers"] == [
        "auditor_duplicate:auditors[1]",
        "primary_sentinels_multiple",
        "threshold_outside_mapped_range",
        "unknown_key:optimizer.tokn",
    ]
    assert json.loads(out)["revision_id"] == ""
    assert "integrity_spec_invalid" in one_line(err)
    assert "primary_sentinels_multiple" in err
    code, out, _ = local("integrity", "system", "validate", "--spec", str(path))
    assert code == 1
    assert "BLOCKER" in out
    assert "threshold_outside_mapped_range" in out


def test_bad_spec_files_exit_two(tmp_path: Path) -> None:
    cases = {
        "missing.json": None,
        "not-json.json": "{optimizer:",
        "nan.json": '{"mapping": {"threshold": NaN}}',
        "array.json": "[1, 2]",
        "repeated.json": '{"mapping": 1, "mapping": 2}',
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        code, out, err = local("integrity", "system", "validate", "--spec", str(path))
        assert (code, out) == (2, ""), name
        assert str(path) in one_line(err), name


def test_usage_errors_exit_two() -> None:
    for argv in (
        ["integrity", "audit", "review", "audit-1", "--action", "fork"],  # no --reason
        ["integrity", "audit", "review", "audit-1", "--action", "pause", "--reason", "x"],
        ["integrity", "audit", "samples", "audit-1", "--outcome", "maybe"],
        ["integrity", "shard", "list"],  # no --run
    ):
        with pytest.raises(SystemExit) as exited:
            local(*argv)
        assert exited.value.code == 2, argv


def doc_examples() -> list[dict[str, Any]]:
    blocks = re.findall(r"```json\n(.*?)```", DOCS.read_text(), flags=re.DOTALL)
    return [json.loads(block) for block in blocks]


def test_the_docs_examples_validate_and_are_independent(tmp_path: Path) -> None:
    examples = doc_examples()
    assert len(examples) == 2
    for index, document in enumerate(examples):
        path = write_spec(tmp_path / f"example-{index}.json", document)
        code, out, err = local("integrity", "system", "validate", "--spec", str(path), "--json")
        assert (code, err) == (0, ""), index
        assert json.loads(out)["primary_sentinel_independent"] is True, index
    # The docs' third case: a second sql worker on the sql worker's recipe is correlated.
    sql_worker = parse_reward_system(examples[1]).optimizer
    second = {**examples[1]["optimizer"], "worker_key_id": "ed25519:sha256:" + "9" * 64}
    second_sql = parse_reward_system({**examples[1], "optimizer": second}).optimizer
    assert correlation_reasons(sql_worker, second_sql) == [
        "shared_contract_digest",
        "shared_implementation_fingerprint",
    ]


def test_the_docs_name_the_built_in_revisions() -> None:
    text = DOCS.read_text()
    for name in (*BUILTIN_PROTOCOLS, *BUILTIN_PROFILES):
        assert f"`{name}`" in text, name


# --- Against a control plane ---


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.sqlite'}")
    yield stack
    await stop_control(stack)


async def created_system(stack: ControlStack, tmp_path: Path, **kwargs: Any) -> str:
    path = write_spec(tmp_path / "system.json", spec(**kwargs))
    code, out, err = await cli(
        stack, "integrity", "system", "create", "--spec", str(path), "--json"
    )
    assert (code, err) == (0, "")
    return str(json.loads(out)["revision"]["revision_id"])


def trainer(stack: ControlStack) -> AsyncIntegrityClient:
    return AsyncIntegrityClient(stack.target, token=CLIENT_TOKEN, timeout=20)


async def test_system_create_show_list_and_remote_validate(
    control: ControlStack, tmp_path: Path
) -> None:
    path = write_spec(tmp_path / "system.json", spec())
    expected = parse_reward_system(spec()).revision_id
    code, out, _ = await cli(control, "integrity", "system", "create", "--spec", str(path))
    assert code == 0
    assert fields(out)["revision"] == "created"
    assert fields(out)["revision_id"] == expected
    code, out, _ = await cli(
        control, "integrity", "system", "create", "--spec", str(path), "--json"
    )
    assert code == 0
    document = json.loads(out)
    assert document["created"] is False  # the same content is the same revision
    assert document["revision"]["revision_id"] == expected
    assert document["revision"]["primary_sentinel_independent"] is True
    assert document["revision"]["content"]["mapping"]["threshold"] == 0.5

    code, out, _ = await cli(control, "integrity", "system", "show", expected, token=CLIENT_TOKEN)
    assert code == 0
    assert fields(out)["sentinel independent"] == "yes"
    code, out, _ = await cli(control, "integrity", "system", "show", expected, "--json")
    assert json.loads(out)["revision"]["revision_id"] == expected

    correlated = write_spec(tmp_path / "correlated.json", spec(correlated=True))
    code, out, _ = await cli(
        control, "integrity", "system", "create", "--spec", str(correlated), "--json"
    )
    correlated_id = json.loads(out)["revision"]["revision_id"]
    code, out, _ = await cli(control, "integrity", "system", "list", "--json")
    listed = {r["revision_id"] for r in json.loads(out)["revisions"]}
    assert listed == {expected, correlated_id}
    code, out, _ = await cli(control, "integrity", "system", "list", "--correlated")
    header, *rows = table_rows(out)
    assert header[:2] == ["REVISION", "ID"]
    assert [row[0] for row in rows] == [correlated_id]

    code, out, err = await cli(
        control, "integrity", "system", "validate", "--spec", str(path), "--json"
    )
    assert (code, err) == (0, "")
    assert json.loads(out)["checked_by"] == "control"
    assert json.loads(out)["revision_id"] == expected


async def test_system_refusals_exit_one(control: ControlStack, tmp_path: Path) -> None:
    bad = write_spec(tmp_path / "bad.json", spec(threshold=float(2)))
    code, out, err = await cli(control, "integrity", "system", "create", "--spec", str(bad))
    assert (code, out) == (1, "")
    assert "integrity_spec_invalid" in one_line(err)
    assert "threshold_outside_mapped_range" in err
    code, out, err = await cli(control, "integrity", "system", "list", "--json")
    assert json.loads(out)["revisions"] == []  # nothing partial stored
    code, _, err = await cli(
        control, "integrity", "system", "validate", "--spec", str(bad), "--json"
    )
    assert code == 1
    assert "integrity_spec_invalid" in one_line(err)
    good = write_spec(tmp_path / "good.json", spec())
    code, _, err = await cli(
        control, "integrity", "system", "create", "--spec", str(good), token=CLIENT_TOKEN
    )
    assert code == 1
    assert "permission_denied" in one_line(err)
    code, _, err = await cli(control, "integrity", "system", "show", "sha256:" + "0" * 64)
    assert code == 1
    assert "not_found" in one_line(err)
    code, _, err = await cli(
        control, "integrity", "system", "create", "--spec", str(tmp_path / "none.json")
    )
    assert code == 2


async def test_protocols_profiles_and_binding(control: ControlStack, tmp_path: Path) -> None:
    code, out, _ = await cli(control, "integrity", "protocol", "list", token=CLIENT_TOKEN)
    assert code == 0
    names = {row[0]: row for row in table_rows(out)[1:]}
    assert set(names) == set(BUILTIN_PROTOCOLS)
    assert names["balanced_256"][1] == BUILTIN_PROTOCOLS["balanced_256"].revision_id
    code, out, _ = await cli(control, "integrity", "protocol", "list", "--json")
    protocols = {p["name"]: p for p in json.loads(out)["protocols"]}
    assert protocols["broad_512"]["core_size"] == 384
    assert "core_size" not in protocols["exhaustive"]  # every row retained
    code, out, _ = await cli(control, "integrity", "profile", "list", "--json")
    profiles = {p["name"]: p for p in json.loads(out)["profiles"]}
    assert set(profiles) == set(BUILTIN_PROFILES)
    assert profiles["human_aligned_integrity"]["is_default"] is True
    assert profiles["exploratory"]["report_only"] is True
    code, out, _ = await cli(control, "integrity", "profile", "list")
    assert "optimizer_only_rate<=0.05" in out

    system_id = await created_system(control, tmp_path)
    arguments = ("integrity", "binding", "resolve", "--system", system_id)
    code, out, err = await cli(
        control,
        *arguments,
        "--protocol",
        "balanced_256",
        "--profile",
        "human_aligned_integrity",
        "--json",
        token=CLIENT_TOKEN,
    )
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "gating_eligible": True,
        "blockers": [],
        "system_revision_id": system_id,
        "protocol_revision_id": BUILTIN_PROTOCOLS["balanced_256"].revision_id,
        "profile_revision_id": BUILTIN_PROFILES["human_aligned_integrity"].revision_id,
    }
    code, out, err = await cli(
        control, *arguments, "--protocol", "balanced_256", "--profile", "exploratory"
    )
    assert code == 1  # printed, then refused: a script's `resolve && train` stops here
    assert "profile_report_only" in out
    assert "binding_refused" in one_line(err)
    code, out, err = await cli(control, *arguments, "--json")
    assert code == 1
    assert json.loads(out)["blockers"] == ["profile_missing", "protocol_missing"]
    code, _, err = await cli(
        control, *arguments, "--protocol", "no_such_protocol", "--profile", "exploratory"
    )
    assert code == 1
    assert "not_found" in one_line(err)


async def test_a_correlated_binding_is_refused_with_its_reasons(
    control: ControlStack, tmp_path: Path
) -> None:
    system_id = await created_system(control, tmp_path, correlated=True)
    code, out, err = await cli(
        control,
        "integrity",
        "binding",
        "resolve",
        "--system",
        system_id,
        "--protocol",
        "exhaustive",
        "--profile",
        "strict_integrity",
        "--json",
    )
    assert code == 1
    assert json.loads(out)["blockers"] == [
        "primary_sentinel_correlated",
        "primary_sentinel_correlated:shared_implementation_fingerprint",
    ]
    assert "binding_refused" in one_line(err)


async def test_shards_audits_reviews_end_to_end(control: ControlStack, tmp_path: Path) -> None:
    system_id = await created_system(control, tmp_path)
    async with trainer(control) as client:
        agreeing = await capture(
            client, system_id, run_id="grpo-run-0001", boundary=10, records=120
        )
        inverted = await capture(
            client, system_id, run_id="grpo-run-0001", boundary=20, records=120, inverted=True
        )

    # Shards
    code, out, _ = await cli(control, "integrity", "shard", "list", "--run", "grpo-run-0001")
    assert code == 0
    rows = table_rows(out)[1:]
    assert [(row[0], row[2], row[3]) for row in rows] == [
        (agreeing.shard_id, "10", "120"),
        (inverted.shard_id, "20", "120"),
    ]
    code, out, _ = await cli(
        control, "integrity", "shard", "list", "--run", "grpo-run-0001", "--json"
    )
    assert [s["exact"] for s in json.loads(out)["shards"]] == [True, True]
    code, out, _ = await cli(control, "integrity", "shard", "verify", agreeing.shard_id)
    assert code == 0
    assert out.startswith("verified")
    code, out, _ = await cli(control, "integrity", "shard", "verify", agreeing.shard_id, "--json")
    assert json.loads(out)["verified"] is True
    code, _, err = await cli(control, "integrity", "shard", "verify", "sha256:" + "0" * 64)
    assert code == 1
    assert "not_found" in one_line(err)

    # Audits: start and wait
    code, out, err = await cli(
        control, "integrity", "audit", "start", "--shard", agreeing.shard_id, "--wait", "--json"
    )
    assert (code, err) == (0, "")
    passed = json.loads(out)["audit"]
    assert passed["state"] == "AUDIT_STATE_DONE"
    assert passed["decision"]["outcome"] == "DECISION_OUTCOME_PASS"
    assert passed["decision"]["action"] == "RUN_ACTION_CONTINUE"
    code, out, _ = await cli(
        control,
        "integrity",
        "audit",
        "start",
        "--shard",
        inverted.shard_id,
        "--wait",
        token=CLIENT_TOKEN,
    )
    assert code == 0
    failed = fields(out)
    assert failed["outcome"] == "fail"
    assert failed["action"] == "pause"
    assert "optimizer_only_rate_above_maximum" in failed["reasons"]
    failed_id = failed["audit_id"]

    code, out, _ = await cli(
        control, "integrity", "audit", "list", "--run", "grpo-run-0001", "--json"
    )
    assert {a["audit_id"] for a in json.loads(out)["audits"]} == {passed["audit_id"], failed_id}

    # Metrics
    code, out, _ = await cli(control, "integrity", "audit", "metrics", failed_id)
    assert code == 0
    assert re.search(r"grouped bootstrap, \d+ resamples", out)
    metric_rows = {row[0]: row for row in table_rows(out)[2:] if row}
    assert metric_rows["optimizer_only_rate"][-1] == "VIOLATED"
    assert metric_rows["coverage"][-1] == "ok"
    code, out, _ = await cli(control, "integrity", "audit", "metrics", failed_id, "--json")
    metrics = {m["name"]: m for m in json.loads(out)["metrics"]}
    assert metrics["optimizer_only_rate"]["value"] == 0.5
    assert metrics["optimizer_only_rate"]["violated"] is True
    assert json.loads(out)["records"] == "120"  # proto3 JSON: 64-bit integers are strings

    # Samples: filters and the limit
    code, out, _ = await cli(
        control,
        "integrity",
        "audit",
        "samples",
        failed_id,
        "--outcome",
        "optimizer_only",
        "--json",
    )
    samples = json.loads(out)["samples"]
    assert len(samples) == 60
    assert {s["outcome"] for s in samples} == {"SAMPLE_OUTCOME_OPTIMIZER_ONLY"}
    code, out, _ = await cli(
        control, "integrity", "audit", "samples", failed_id, "--query", "rec-7", "--limit", "3"
    )
    rows = table_rows(out)[1:]
    assert 1 <= len(rows) <= 3
    assert all("rec-7" in row[3] for row in rows)
    code, out, _ = await cli(
        control, "integrity", "audit", "samples", failed_id, "--population", "diagnostic"
    )
    assert "(none)" in out  # exhaustive: every row is core

    # Compare the two boundaries
    code, out, _ = await cli(
        control, "integrity", "audit", "compare", passed["audit_id"], failed_id, "--json"
    )
    compared = json.loads(out)
    assert compared["paired_rows"] == "120"
    assert compared["left_outcome"] == "DECISION_OUTCOME_PASS"
    assert compared["right_outcome"] == "DECISION_OUTCOME_FAIL"
    deltas = {d["name"]: d for d in compared["metrics"]}
    assert deltas["optimizer_only_rate"]["delta"] == 0.5
    code, out, _ = await cli(
        control, "integrity", "audit", "compare", passed["audit_id"], failed_id
    )
    assert "agreement" in out

    # The signed bundle, verified here
    code, out, err = await cli(control, "integrity", "audit", "verify", failed_id)
    assert (code, err) == (0, "")
    assert fields(out)["outcome"] == "fail -> pause"
    code, out, _ = await cli(
        control,
        "integrity",
        "audit",
        "verify",
        failed_id,
        "--trust-org-key",
        control.key.public_key.hex(),
        "--json",
    )
    assert code == 0
    verified = json.loads(out)
    assert verified["verified"] is True
    # The run's earlier shard is evidence too (trends over matched records).
    assert verified["shard_ids"] == [agreeing.shard_id, inverted.shard_id]
    assert verified["decision"]["outcome"] == "fail"
    code, _, err = await cli(
        control, "integrity", "audit", "verify", failed_id, "--trust-org-key", "ab" * 32
    )
    assert code == 1  # signed by a key we do not trust
    assert "signature" in one_line(err)
    code, _, err = await cli(
        control, "integrity", "audit", "verify", failed_id, "--trust-org-key", "nothex"
    )
    assert code == 2

    # Reviews: refusals first, then a continue that supersedes the pause
    review = ("integrity", "audit", "review", failed_id)
    code, out, err = await cli(control, *review, "--action", "fork", "--reason", "try again")
    assert (code, out) == (1, "")
    assert "review_refused" in one_line(err)  # a fork needs its checkpoint
    code, _, err = await cli(control, *review, "--action", "continue", "--reason", "  ")
    assert code == 1
    assert "review_refused" in one_line(err)
    code, _, err = await cli(
        control, *review, "--action", "continue", "--reason", "read it", token=CLIENT_TOKEN
    )
    assert code == 1
    assert "permission_denied" in one_line(err)
    code, out, err = await cli(
        control,
        *review,
        "--action",
        "continue",
        "--reason",
        "read the 60 optimizer-only samples: the sentinel was misconfigured",
        "--json",
    )
    assert (code, err) == (0, "")
    entry = json.loads(out)["entry"]
    assert (entry["sequence"], entry["supersedes"]) == (1, 0)
    assert entry["action"] == "RUN_ACTION_CONTINUE"
    code, _, err = await cli(
        control, *review, "--action", "stop", "--reason", "late", "--supersedes", "0"
    )
    assert code == 1
    assert "decision_superseded" in one_line(err)
    code, out, _ = await cli(control, "integrity", "audit", "show", failed_id)
    assert code == 0
    history = [row for row in table_rows(out) if row and row[0] in ("0", "1")]
    assert [row[:4] for row in history] == [
        ["0", "automatic", "fail", "pause"],
        ["1", "reviewed", "fail", "continue"],
    ]
    # The run's gate (R-I-10) is shown with the audit.
    assert fields(out)["run gate"] == f"continue (boundary 20, audit {failed_id})"
    code, out, _ = await cli(control, "integrity", "audit", "show", failed_id, "--json")
    shown = json.loads(out)
    assert [e["action"] for e in shown["decisions"]] == ["RUN_ACTION_PAUSE", "RUN_ACTION_CONTINUE"]
    assert shown["audit"]["decision"]["sequence"] == 1
    assert shown["run_gate"] == {
        "action": "continue",
        "boundary": 20,
        "audit_id": failed_id,
        "pending_boundaries": [],
    }
    # A second `audit start` of an audited shard is refused, whoever asks: that is a retry.
    code, _, err = await cli(
        control,
        "integrity",
        "audit",
        "start",
        "--shard",
        inverted.shard_id,
        "--profile",
        "exploratory",
        token=CLIENT_TOKEN,
    )
    assert code == 1
    assert "shard_already_audited" in one_line(err)

    # Retry: the reason is required
    code, _, err = await cli(control, "integrity", "audit", "retry", failed_id, "--reason", "")
    assert code == 1
    assert one_line(err)
    code, out, err = await cli(
        control, "integrity", "audit", "retry", failed_id, "--reason", "sentinel fixed", "--json"
    )
    assert (code, err) == (0, "")
    retried = json.loads(out)["audit"]
    assert retried["retry_of"] == failed_id
    assert retried["retry_reason"] == "sentinel fixed"
    code, _, err = await cli(
        control, "integrity", "audit", "cancel", passed["audit_id"], "--reason", "too late"
    )
    assert code == 1  # a decided audit cannot be cancelled
    assert "audit_state_conflict" in one_line(err)
    code, out, _ = await cli(
        control, "integrity", "audit", "show", retried["audit_id"], "--wait", "--json"
    )
    assert json.loads(out)["audit"]["state"] in ("AUDIT_STATE_DONE", "AUDIT_STATE_CANCELLED")
    code, _, err = await cli(control, "integrity", "audit", "show", "no-such-audit")
    assert code == 1
    assert "not_found" in one_line(err)


async def test_too_little_evidence_is_incomplete(control: ControlStack, tmp_path: Path) -> None:
    system_id = await created_system(control, tmp_path)
    async with trainer(control) as client:
        shard = await capture(client, system_id, run_id="grpo-run-0002", boundary=5, records=10)
    code, out, _ = await cli(
        control, "integrity", "audit", "start", "--shard", shard.shard_id, "--wait"
    )
    assert code == 0
    audit = fields(out)
    assert (audit["outcome"], audit["action"]) == ("incomplete_evidence", "pause")
    assert "evidence_below_minimum" in audit["reasons"]
    code, out, _ = await cli(control, "integrity", "audit", "metrics", audit["audit_id"])
    assert code == 0
    assert "no metrics" in out
