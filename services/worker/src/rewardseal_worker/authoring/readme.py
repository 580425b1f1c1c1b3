"""The ``README.md`` that ``contract init`` writes beside a starting bundle.

The bundle's JSON documents cannot hold comments (JSON has none, and a ``"$comment"`` key inside
a document bound by digest would make every edit of a comment a new contract), so what each file
and each field means is written here, once, for the recipe kind the author chose.
"""

from __future__ import annotations

from typing import Final

__all__ = ["bundle_readme"]

_RECIPE_NOTES: Final = {
    "sql": (
        "`database.url_env` names the environment variable that holds the SQLAlchemy URL of the\n"
        "system of record (SQLite `sqlite:////abs/path.db` or PostgreSQL\n"
        "`postgresql://user@host/db`); the URL, and any password in it, never enters the bundle.\n"
        'For a SQLite file next to the bundle use `{"sqlite_path": "relative/path.sqlite"}`\n'
        "instead. `table` is read by `identity_fields` (contract identity key -> column) and\n"
        "`id_column` is the primary key. The worker reads read-only."
    ),
    "rest": (
        "`base_url_env` names the variable with the API's base URL and `token_env` the one\n"
        "with its bearer token (optional). The worker sends `GET <base><path>?<param>=<value>`\n"
        "with the identity in `identity_params` (contract identity key -> query parameter) and\n"
        "expects "
        '`{"<collection>": [record, ...]}` back, each record with a string or integer `id`.'
    ),
    "fhir": (
        "`base_url_env` names the variable with the FHIR server's base URL, `token_env` its\n"
        "bearer token (optional). The worker searches\n"
        "`GET <base><path>/Encounter?<param>=<value>` and maps each Encounter to a record of\n"
        "the `encounters` collection with the fields id,\n"
        "patient_id, type, note, status, priority, created_at. `calibrate` cannot write fault\n"
        "trials into a FHIR server yet (see docs/authoring.md)."
    ),
    "json_file": (
        "`path` is a JSON file relative to this directory (absolute paths are refused):\n"
        '`{"collections": {"<collection>": [record, ...]}}`, each record with an `id`.'
    ),
}


def bundle_readme(kind: str, contract_digest: str) -> str:
    """The README text for a starting bundle of recipe ``kind``."""
    return f"""# Contract bundle ({kind} recipe)

Written by `rewardseal-worker contract init`. Starting contract digest: `{contract_digest}`.
This file is not part of the contract (nothing here is digested); edit or delete it freely.

## Files

- `contract.json`: the RewardContract (proto3 JSON, snake_case field names): ids, the
  oracle's channel and identity keys, reward components, scoring policy, certificate policy,
  and the digests of the three documents below.
- `required_effects.json`: effects that must be present for VERIFIED (R-W-4).
- `forbidden_effects.json`: effects that make an episode WRONG_EFFECT when present.
- `oracle_recipe.json`: how the worker reads the system of record; it names environment
  variables and never holds a credential (R-W-6).
- `calibration.json`: written by `rewardseal-worker calibrate` (counts only, never the
  corpus).

JSON Schemas for each file ship with the worker (`rewardseal_worker/authoring/schemas/`).

## Effects

Each effect: `name`; `collection` (the table/collection the recipe reads); `select` (field ->
literal, or `{{"identity": "<key>"}}` for the episode's identity value: which records the effect
is about); `expect` (field -> exact value); `required_fields` (must be non-null); and, for
required effects only, `new_records` (exactly this many new records) and `allowed_fields`
(anything else on a new record is an extra field, WRONG_EFFECT). Every contract identity key
must be selected by some effect. A task that varies per episode declares task parameters
(`contract init --parameter sku:string:32`, or `task_parameters` in contract.json) and refers to
them in `select` or `expect` as `{{"param": "<name>"}}`; their values are bound at begin.

An effect is about new records unless it says `"change": "update"`: then it is about records
that existed at the baseline read and changed (a status change on another record). `before`
(field -> value) says what such a record was, `expect` what it must be now, `changed_records`
how many must change (required effects only), and `allowed_fields` which fields may change.
A forbidden update effect is present when such a record changed at all, or vanished.

## Recipe ({kind})

{_RECIPE_NOTES[kind]}

## The path

    rewardseal-worker contract check DIR        # every problem at once; exit 2 if any
    rewardseal-worker contract seal DIR         # after editing a document: rebind the digests
    rewardseal-worker contract show DIR         # what the contract says, in words
    rewardseal-worker calibrate DIR --sandbox URL_OR_DIR --trials 300
    rewardseal-worker serve --contract DIR --control HOST:PORT --trust-org-key KEY
    rewardseal-control certificates issue --contract DIGEST --calibration DIR/calibration.json

See docs/authoring.md for the whole path.
"""
