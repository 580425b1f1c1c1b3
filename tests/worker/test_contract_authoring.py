"""``rewardseal-worker contract init|check|seal|show``: what init writes, check passes; a broken
bundle's problems are all listed at once; the schemas accept every bundle the loader accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardseal.core.digest import digest_json
from rewardseal.core.signing import SigningKey
from rewardseal_mockmed import contract as mockmed
from rewardseal_worker.authoring.schema_check import SCHEMA_FILES, load_schema, schema_problems
from rewardseal_worker.authoring.templates import INIT_KINDS
from rewardseal_worker.bundle import inspect_bundle, load_bundle, write_bundle
from rewardseal_worker.calibration import calibrate, self_signed_certificate, summary_to_json
from rewardseal_worker.cli import main
from rewardseal_worker.seed import REST_RECIPE, rest_contract


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def edit(path: Path, change: dict[str, object]) -> None:
    doc = json.loads(path.read_text())
    doc.update(change)
    path.write_text(json.dumps(doc, indent=2))


@pytest.mark.parametrize("kind", INIT_KINDS)
def test_init_writes_a_bundle_that_check_passes_and_serve_loads(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / f"crm-{kind}"
    code, out, _ = run(capsys, "contract", "init", str(directory), "--recipe", kind)
    assert code == 0
    digest = load_bundle(directory).contract_digest  # the loader serve uses
    assert digest in out
    assert (directory / "README.md").read_text().startswith(f"# Contract bundle ({kind} recipe)")
    code, out, _ = run(capsys, "contract", "check", str(directory))
    assert code == 0, out
    assert f"contract digest  {digest}" in out
    assert "no problems" in out
    recipe = json.loads((directory / "oracle_recipe.json").read_text())
    assert not any("://" in str(v) for v in recipe.values())  # credentials by variable name only


@pytest.mark.parametrize("name", ["b", "Ticket Desk (EU)", "x" * 300])
def test_init_makes_valid_ids_from_any_directory_name(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / name[:200]
    code, _, err = run(capsys, "contract", "init", str(directory), "--recipe", "sql")
    assert code == 0, err
    contract = load_bundle(directory).contract
    assert contract.task_id.startswith(contract.contract_id.split(".")[0])


def test_init_refuses_a_directory_that_holds_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run(capsys, "contract", "init", str(tmp_path), "--recipe", "sql")
    assert code == 2
    assert "not empty" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing written


def test_check_lists_every_problem_of_a_broken_bundle_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No required effect, a key no effect selects, a rest recipe under a DB channel and a
    password written inline: four problems, one run, exit 2; the secret is never echoed."""
    directory = tmp_path / "broken"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "sql")[0] == 0
    (directory / "required_effects.json").write_text(json.dumps({"effects": []}))
    contract = json.loads((directory / "contract.json").read_text())
    contract["oracle"]["identity_keys"] = ["customer_id", "queue_id"]
    (directory / "contract.json").write_text(json.dumps(contract))
    recipe = {
        "kind": "rest",
        "base_url_env": "SOR_API_URL",
        "path": "/api/tickets",
        "collection": "tickets",
        "identity_params": {"customer_id": "customer_id", "queue_id": "queue"},
        "password": "hunter2-secret",
    }
    (directory / "oracle_recipe.json").write_text(json.dumps(recipe))

    code, out, _ = run(capsys, "contract", "check", str(directory))
    assert code == 2
    assert "required_effects.json: the contract has no required effect" in out
    assert "contract identity keys ['queue_id'] are selected by no effect" in out
    assert "recipe kind 'rest' cannot serve the contract's channel ORACLE_CHANNEL_DB" in out
    assert "oracle recipe key 'password' looks like a credential" in out
    assert "required_effects.json: digest mismatch" in out  # edited without sealing
    assert "hunter2" not in out
    code, out, _ = run(capsys, "contract", "check", str(directory), "--json")
    assert code == 2
    report = json.loads(out)
    assert report["contract_digest"].startswith("sha256:")
    assert len(report["problems"]) >= 5
    # serve's loader refuses the same bundle, naming every problem in one error
    with pytest.raises(Exception, match=r"problems: \(1\)") as caught:
        load_bundle(directory)
    assert "selected by no effect" in str(caught.value)


def test_seal_rebinds_an_edited_document_and_refuses_a_stale_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "crm"
    run(capsys, "contract", "init", str(directory), "--recipe", "sql")
    before = load_bundle(directory).contract_digest
    required = json.loads((directory / "required_effects.json").read_text())
    required["effects"][0]["expect"] = {"status": "new"}
    (directory / "required_effects.json").write_text(json.dumps(required))
    code, out, _ = run(capsys, "contract", "check", str(directory))
    assert code == 2
    assert "contract seal" in out  # the problem says how to fix it

    code, out, _ = run(capsys, "contract", "seal", str(directory))
    assert code == 0, out
    after = load_bundle(directory).contract_digest
    assert after != before
    assert f"was {before}" in out
    assert run(capsys, "contract", "check", str(directory))[0] == 0

    (directory / "calibration.json").write_text(json.dumps({"reward_contract_digest": after}))
    required["effects"][0]["expect"] = {"status": "open"}
    (directory / "required_effects.json").write_text(json.dumps(required))
    code, _, err = run(capsys, "contract", "seal", str(directory))
    assert code == 2
    assert "calibration.json" in err
    assert "move them away" in err
    # the bundle was left as it was: still the sealed contract
    assert inspect_bundle(directory).contract_digest == after


def test_show_says_what_the_contract_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "crm"
    run(capsys, "contract", "init", str(directory), "--recipe", "rest")
    code, out, _ = run(capsys, "contract", "show", str(directory))
    assert code == 0
    assert load_bundle(directory).contract_digest in out
    assert "tier 2, channel API, rest tickets at $SOR_API_URL/api/tickets" in out
    assert "ticket_created: in tickets where customer_id = <customer_id>" in out
    assert "exactly 1 new record(s)" in out
    assert "ticket_closed" in out
    assert "(none: run rewardseal-worker calibrate)" in out


def test_show_of_a_broken_bundle_lists_its_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "contract", "show", str(tmp_path / "missing"))
    assert code == 2
    assert "does not exist" in out


def test_schema_problems_name_the_place_never_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "crm"
    run(capsys, "contract", "init", str(directory), "--recipe", "rest")
    edit(directory / "oracle_recipe.json", {"token_env": "sk-live-abcdef123", "retries": 3})
    problems = schema_problems(directory)
    assert "oracle_recipe.json: (top level) has unknown keys ['retries'] (schema)" in problems
    assert any(p.startswith("oracle_recipe.json: token_env must match") for p in problems)
    assert not any("sk-live" in p for p in problems)


def test_schemas_accept_every_bundle_the_loader_accepts(tmp_path: Path) -> None:
    """The shipped MockMed bundles (sql, rest, screen dump) pass the schemas as they pass the
    loader: a schema never refuses what serve loads."""
    for name in set(SCHEMA_FILES.values()):
        assert load_schema(name)["$schema"].endswith("2020-12/schema")
    cases = [
        (mockmed.mockmed_contract(tier=2), mockmed.TIER2_RECIPE),
        (mockmed.mockmed_contract(tier=0), mockmed.TIER0_RECIPE),
        (rest_contract(), REST_RECIPE),
    ]
    for index, (contract, recipe) in enumerate(cases):
        directory = tmp_path / f"b{index}"
        write_bundle(
            directory,
            contract=contract,
            required_doc=mockmed.REQUIRED_EFFECTS,
            forbidden_doc=mockmed.FORBIDDEN_EFFECTS,
            recipe_doc=recipe,
        )
        assert load_bundle(directory).contract.oracle.oracle_recipe_digest == digest_json(recipe)
        assert schema_problems(directory) == []


def test_schemas_accept_a_calibration_and_a_certificate_as_the_worker_writes_them(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "mockmed"
    documents = {
        "required_doc": mockmed.REQUIRED_EFFECTS,
        "forbidden_doc": mockmed.FORBIDDEN_EFFECTS,
        "recipe_doc": mockmed.TIER2_RECIPE,
    }
    contract = mockmed.mockmed_contract(tier=2)
    write_bundle(directory, contract=contract, **documents)
    bundle = load_bundle(directory)
    result = calibrate(bundle, seed=5, trials=60)
    certificate = self_signed_certificate(bundle, result.summary, SigningKey.generate())
    write_bundle(
        directory,
        contract=contract,
        certificate=certificate,
        calibration=summary_to_json(result.summary),
        overwrite=True,
        **documents,
    )
    assert load_bundle(directory).certificate is not None
    assert schema_problems(directory) == []
    (directory / "certificate.json").write_text(json.dumps({"certificate_id": "x"}))
    assert any(
        p.startswith("certificate.json: (top level) lacks") for p in schema_problems(directory)
    )


def test_a_parameterized_bundle_passes_check_and_show_names_its_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-MSG-11: the schemas take task parameter declarations and ``{"param": ...}``
    references; ``show`` says what each parameter may hold and where it is used."""
    directory = tmp_path / "params"
    write_bundle(
        directory,
        contract=mockmed.mockmed_parameterized_contract(),
        required_doc=mockmed.PARAMETERIZED_REQUIRED_EFFECTS,
        forbidden_doc=mockmed.FORBIDDEN_EFFECTS,
        recipe_doc=mockmed.TIER2_RECIPE,
    )
    assert schema_problems(directory) == []
    code, out, _ = run(capsys, "contract", "check", str(directory))
    assert code == 0
    code, out, _ = run(capsys, "contract", "show", str(directory))
    assert code == 0
    assert "  - encounter_type: string, at most 32 characters, one of ['Consult'" in out
    assert "  - note: string, at most 256 characters" in out
    assert "with note = <param note>, type = <param encounter_type>" in out
