"""``rewardseal-worker contract init|check|seal|show``: write, check and read a contract bundle.

``check`` loads the bundle with :func:`rewardseal_worker.bundle.inspect_bundle`, the loader
``serve`` uses, and adds the JSON Schema problems (:mod:`.schema_check`); it prints the contract
digest and every problem at once and exits 2 when there is any. ``init`` writes a starting bundle
that ``check`` passes; ``seal`` rebinds the document digests after an edit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from google.protobuf import json_format

from rewardseal.core import strict_json
from rewardseal.core.calibration import epsilon_from_summary, summary_from_json
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import EffectSpec, IdentityRef, ParamRef
from rewardseal.v1.contract_pb2 import RewardContract, TaskParameter
from rewardseal.v1.enums_pb2 import OracleChannel, TaskParameterType
from rewardseal_worker.authoring.parameter_option import PARAMETER_FORMS, parse_parameter
from rewardseal_worker.authoring.readme import bundle_readme
from rewardseal_worker.authoring.schema_check import schema_problems
from rewardseal_worker.authoring.templates import INIT_KINDS, starting_bundle
from rewardseal_worker.bundle import (
    CALIBRATION_FILE,
    CERTIFICATE_FILE,
    CONTRACT_FILE,
    FORBIDDEN_EFFECTS_FILE,
    ORACLE_RECIPE_FILE,
    REQUIRED_EFFECTS_FILE,
    ContractBundle,
    inspect_bundle,
    write_bundle,
)

__all__ = ["README_FILE", "add_contract_commands", "run_contract_command"]

README_FILE = "README.md"
PROBLEMS_EXIT = 2


def add_contract_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``contract init|check|seal|show`` to the worker's subcommands."""
    contract = commands.add_parser("contract", help="author, check and read a contract bundle")
    actions = contract.add_subparsers(dest="contract_action", required=True, metavar="ACTION")
    init = actions.add_parser("init", help="write a commented starting bundle into DIR")
    init.add_argument("directory", type=Path, metavar="DIR")
    init.add_argument("--recipe", required=True, choices=INIT_KINDS, help="how the SoR is read")
    init.add_argument(
        "--parameter",
        action="append",
        default=[],
        metavar="DECLARATION",
        help=f"declare a task parameter (R-MSG-11), repeatable: {PARAMETER_FORMS}",
    )
    check = actions.add_parser("check", help="load DIR as serve would; list every problem")
    check.add_argument("directory", type=Path, metavar="DIR")
    check.add_argument(
        "--json", action="store_true", help="print {contract_digest, problems, notes} as JSON"
    )
    seal = actions.add_parser("seal", help="rebind contract.json to the edited documents")
    seal.add_argument("directory", type=Path, metavar="DIR")
    show = actions.add_parser("show", help="what the contract in DIR says, and its digest")
    show.add_argument("directory", type=Path, metavar="DIR")


def run_contract_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run ``contract <action>``; the exit status (0 fine, 2 problems)."""
    action = args.contract_action
    if action == "init":
        parameters = [parse_parameter(text) for text in args.parameter]
        return init_bundle(args.directory, args.recipe, out, parameters=parameters)
    if action == "check":
        return check_bundle(args.directory, out, as_json=args.json)
    if action == "seal":
        return seal_bundle(args.directory, out)
    return show_bundle(args.directory, out)


def init_bundle(
    directory: Path, kind: str, out: TextIO, *, parameters: Sequence[TaskParameter] = ()
) -> int:
    """Write a starting bundle of recipe ``kind`` into ``directory`` (new or empty), declaring
    ``parameters`` (its effects then refer to them as ``{"param": NAME}`` once edited)."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ValidationError(
            f"{directory} already exists and is not empty; contract init writes a new bundle "
            "into a new or empty directory"
        )
    contract, required, forbidden, recipe = starting_bundle(
        kind, directory.resolve().name, parameters=parameters
    )
    write_bundle(
        directory,
        contract=contract,
        required_doc=required,
        forbidden_doc=forbidden,
        recipe_doc=recipe,
    )
    digest = inspect_bundle(directory).contract_digest or ""
    (directory / README_FILE).write_text(bundle_readme(kind, digest), encoding="utf-8")
    print(f"wrote a starting {kind} bundle to {directory}", file=out)
    print(f"  contract digest  {digest}", file=out)
    print(f"  next             edit the documents (see {directory / README_FILE}), then", file=out)
    print(f"                   rewardseal-worker contract seal {directory}", file=out)
    return 0


def check_bundle(directory: Path, out: TextIO, *, as_json: bool = False) -> int:
    """Print the digest and every problem of the bundle in ``directory``; 2 if there is any."""
    inspection = inspect_bundle(directory)
    problems = list(inspection.problems)
    if directory.is_dir():
        problems += schema_problems(directory)
    bundle = inspection.bundle
    notes = _environment_notes(bundle.recipe) if bundle is not None else []
    code = PROBLEMS_EXIT if problems else 0
    if as_json:
        document = {
            "bundle": str(directory),
            "contract_digest": inspection.contract_digest,
            "problems": problems,
            "notes": notes,
        }
        print(json.dumps(document, indent=2), file=out)
        return code
    digest = inspection.contract_digest or "(contract.json has problems)"
    print(f"bundle           {directory}", file=out)
    print(f"contract digest  {digest}", file=out)
    for note in notes:
        print(f"note             {note}", file=out)
    if not problems:
        print("ok               no problems: serve will load this bundle", file=out)
        return code
    print(f"{len(problems)} problem{'s' if len(problems) > 1 else ''}:", file=out)
    for index, problem in enumerate(problems, 1):
        print(f"  {index}. {problem}", file=out)
    return code


def _environment_notes(recipe: Mapping[str, Any]) -> list[str]:
    """Variables the recipe names that are not set here (serve needs them set)."""
    names = [recipe.get("base_url_env"), recipe.get("token_env")]
    database = recipe.get("database")
    if isinstance(database, Mapping):
        names.append(database.get("url_env"))
    return [
        f"${name} is not set here; serve will need it"
        for name in names
        if isinstance(name, str) and not os.environ.get(name)
    ]


def seal_bundle(directory: Path, out: TextIO) -> int:
    """Rebind ``contract.json``'s three document digests to the documents as they are now.

    Written only when the whole bundle then checks; a calibration or certificate made for the
    old contract is refused rather than silently deleted.
    """
    try:
        contract = json_format.Parse(
            (directory / CONTRACT_FILE).read_text(encoding="utf-8"), RewardContract()
        )
        docs = {
            name: strict_json.loads((directory / name).read_text(encoding="utf-8"))
            for name in (REQUIRED_EFFECTS_FILE, FORBIDDEN_EFFECTS_FILE, ORACLE_RECIPE_FILE)
        }
    except (OSError, UnicodeDecodeError, ValueError, json_format.ParseError) as exc:
        raise ValidationError(
            f"cannot seal {directory}: {exc}; run `contract check` to see every problem"
        ) from None
    before = inspect_bundle(directory).contract_digest
    try:
        contract.required_effects_digest = digest_json(docs[REQUIRED_EFFECTS_FILE])
        contract.forbidden_effects_digest = digest_json(docs[FORBIDDEN_EFFECTS_FILE])
        contract.oracle.oracle_recipe_digest = digest_json(docs[ORACLE_RECIPE_FILE])
    except (ValueError, TypeError) as exc:
        raise ValidationError(f"cannot seal {directory}: {exc}") from None
    stale = [n for n in (CERTIFICATE_FILE, CALIBRATION_FILE) if (directory / n).exists()]
    if stale:
        raise ValidationError(
            f"{directory} holds {stale}, made for the contract as it was; move them away "
            "before sealing (a changed contract needs a new calibration and certificate)"
        )
    write_bundle(
        directory,
        contract=contract,
        required_doc=docs[REQUIRED_EFFECTS_FILE],
        forbidden_doc=docs[FORBIDDEN_EFFECTS_FILE],
        recipe_doc=docs[ORACLE_RECIPE_FILE],
        overwrite=True,
    )
    after = inspect_bundle(directory).contract_digest
    changed = "unchanged" if after == before else f"was {before or '(unreadable)'}"
    print(f"sealed {directory}", file=out)
    print(f"  contract digest  {after}  ({changed})", file=out)
    return 0


def show_bundle(directory: Path, out: TextIO) -> int:
    """Print what the bundle's contract says, in words, with its digest."""
    inspection = inspect_bundle(directory)
    bundle = inspection.bundle
    if bundle is None:
        check_bundle(directory, out)
        return PROBLEMS_EXIT
    contract = bundle.contract
    recipe = bundle.recipe
    print(f"contract         {contract.contract_id} version {contract.contract_version}", file=out)
    print(f"digest           {bundle.contract_digest}", file=out)
    print(f"task             {contract.task_id}", file=out)
    print(f"environment      {contract.environment_id}", file=out)
    channel = OracleChannel.Name(contract.oracle.channel).removeprefix("ORACLE_CHANNEL_")
    print(f"oracle           tier {bundle.tier}, channel {channel}, {_reads(recipe)}", file=out)
    print(f"identity         {', '.join(contract.oracle.identity_keys)}", file=out)
    if contract.task_parameters:
        print("task parameters  bound per episode at begin (R-W-18)", file=out)
        for parameter in contract.task_parameters:
            print(f"  - {_parameter_words(parameter)}", file=out)
    print("required effects", file=out)
    for spec in bundle.required:
        print(f"  - {_effect_words(spec)}", file=out)
    print("forbidden effects", file=out)
    for spec in bundle.forbidden or ():
        print(f"  - {_effect_words(spec)}", file=out)
    if not bundle.forbidden:
        print("  (none)", file=out)
    components = ", ".join(f"{c.name} x{c.weight:g}" for c in contract.components)
    print(f"components       {components}", file=out)
    scoring = contract.scoring_policy
    print(
        f"rewards          verified {scoring.verified_reward or 1.0:g}, wrong effect "
        f"{scoring.wrong_effect_reward:g}, halted {scoring.halted_before_effect_reward:g}, "
        f"refused {scoring.refused_reward:g}; uncertain and platform failures unscored",
        file=out,
    )
    policy = contract.certificate_policy
    print(
        f"certificate      needs epsilon <= {policy.max_epsilon:g} at delta <= "
        f"{policy.max_delta:g}, threshold {policy.threshold:g}, corpus "
        f"{policy.calibration_corpus_digest}, expiry <= {policy.max_expiry_policy_updates} "
        "policy updates",
        file=out,
    )
    print(f"calibration      {_calibration_words(bundle)}", file=out)
    held = bundle.certificate
    print(
        f"certificate.json {held.certificate_id if held is not None else '(none)'}",
        file=out,
    )
    return 0


def _reads(recipe: Mapping[str, Any]) -> str:
    kind = recipe.get("kind")
    if kind == "sql":
        database = recipe.get("database", {})
        where = (
            f"${database['url_env']}"
            if "url_env" in database
            else f"SQLite file {database.get('sqlite_path')}"
        )
        return f"sql table {recipe.get('table')!r} at {where}"
    if kind in ("rest", "fhir"):
        target = recipe.get("resource") if kind == "fhir" else recipe.get("collection")
        token = f" (bearer ${recipe['token_env']})" if "token_env" in recipe else ""
        return f"{kind} {target} at ${recipe.get('base_url_env')}{recipe.get('path', '')}{token}"
    return f"{kind} file {recipe.get('path')} collection {recipe.get('collection')!r}"


def _parameter_words(parameter: TaskParameter) -> str:
    kind = TaskParameterType.Name(parameter.type).removeprefix("TASK_PARAMETER_TYPE_").lower()
    words = [f"{parameter.name}: {kind}"]
    if parameter.HasField("max_length"):
        words.append(f"at most {parameter.max_length} characters")
    if parameter.allowed_values:
        words.append(f"one of {sorted(parameter.allowed_values)}")
    if parameter.HasField("minimum"):
        words.append(f">= {parameter.minimum:g}")
    if parameter.HasField("maximum"):
        words.append(f"<= {parameter.maximum:g}")
    return ", ".join(words)


def _shown(value: Any) -> str:
    if isinstance(value, IdentityRef):
        return f"<{value.key}>"
    if isinstance(value, ParamRef):
        return f"<param {value.name}>"
    return repr(value)


def _effect_words(spec: EffectSpec) -> str:
    shown = _shown

    where = ", ".join(f"{f} = {shown(v)}" for f, v in spec.select.items())
    parts = [f"{spec.name}: in {spec.collection} where {where}"]
    if spec.updates:
        # An update effect: records of the baseline read that changed (a status change, say).
        was = ", ".join(f"{f} = {v!r}" for f, v in spec.before.items())
        parts.append(f"records that existed before{f' with {was}' if was else ''} and changed")
        if spec.changed_records is not None:
            parts.append(f"exactly {spec.changed_records} changed record(s)")
    if spec.new_records is not None:
        parts.append(f"exactly {spec.new_records} new record(s)")
    if spec.expect:
        now = "now with " if spec.updates else "with "
        parts.append(now + ", ".join(f"{f} = {shown(v)}" for f, v in spec.expect.items()))
    if spec.required_fields:
        parts.append(f"fields {sorted(spec.required_fields)} set")
    if spec.allowed_fields is not None:
        what = "no change outside" if spec.updates else "nothing outside"
        parts.append(f"{what} {sorted(spec.allowed_fields)}")
    return "; ".join(parts)


def _calibration_words(bundle: ContractBundle) -> str:
    if bundle.calibration is None:
        return "(none: run rewardseal-worker calibrate)"
    try:
        summary = summary_from_json(bundle.calibration)
        epsilon = epsilon_from_summary(summary)
    except ValidationError as exc:
        return f"calibration.json does not parse ({exc.message})"
    held = "held-out" if summary.held_out else "not held-out"
    return (
        f"{summary.false_accepts} false accepts in {summary.trials} trials, epsilon "
        f"{epsilon:.6f} at confidence {summary.confidence:g}, seed {summary.generator_seed}, "
        f"{held}"
    )
