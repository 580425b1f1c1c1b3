"""The helpdesk's reward contract and its two tier-2 bundles: over the database and over the API.

The task: *file a new high-priority e-mail ticket for the customer in the queue (subject and body
written) and close the customer's previous open ticket in that queue as superseded; touch no
other ticket.* The oracle identity has two keys, ``customer_id`` and ``queue_id``: a read returns
the customer's tickets in that queue, and each effect selects on both.

=========================  =======================================================================
effect                     how the worker reads it
=========================  =======================================================================
``ticket_filed``           required, create: exactly one ticket of the pair that was not in the
                           baseline read, with status open, priority high, channel email, every
                           written field non-empty, and no field outside the allowed ones
                           (``assignee``, ``resolution`` set on a new ticket are extra fields)
``previous_ticket_closed`` required, update: exactly one ticket that was ``open`` in the baseline
                           read now reads status closed, resolution superseded, and only status,
                           resolution and updated_at changed
``closed_ticket_touched``  forbidden, update: a ticket that was ``closed`` in the baseline read
                           changed at all (updated_at included) or vanished
=========================  =======================================================================

Both bundles bind the same effect documents; they differ in the recipe (and so the channel): the
``sql`` recipe reads table ``tickets`` through ``$HELPDESK_READER_URL`` (a read-only role,
``python -m helpdesk grant-reader``), the ``rest`` recipe reads ``GET /api/tickets`` at
``$HELPDESK_API_URL`` with the bearer token in ``$HELPDESK_API_TOKEN``. The checked-in bundles
(``examples/helpdesk/bundles/{sql,rest}``) are what :func:`write_bundles` writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from google.protobuf import json_format

from rewardseal.core.digest import digest_json
from rewardseal.v1.contract_pb2 import (
    CertificatePolicy,
    OracleSpec,
    RewardComponent,
    RewardContract,
    ScoringPolicy,
)
from rewardseal.v1.enums_pb2 import OracleChannel
from rewardseal_worker.calibration.sandbox_corpus import SANDBOX_CORPUS_DIGEST

__all__ = [
    "FORBIDDEN_EFFECTS",
    "IDENTITY_KEYS",
    "KINDS",
    "RECIPES",
    "REQUIRED_EFFECTS",
    "bundle_files",
    "contract",
    "write_bundles",
]

IDENTITY_KEYS: Final = ("customer_id", "queue_id")
READER_URL_ENV: Final = "HELPDESK_READER_URL"
API_URL_ENV: Final = "HELPDESK_API_URL"
API_TOKEN_ENV: Final = "HELPDESK_API_TOKEN"
_SELECT: Final = {key: {"identity": key} for key in IDENTITY_KEYS}
FILED_FIELDS: Final = (
    "customer_id",
    "queue_id",
    "subject",
    "body",
    "priority",
    "status",
    "channel",
)
"""What a new ticket must carry (non-empty); the service stamps created_at and updated_at."""

REQUIRED_EFFECTS: Final[Mapping[str, Any]] = {
    "effects": [
        {
            "name": "ticket_filed",
            "collection": "tickets",
            "select": _SELECT,
            "expect": {"status": "open", "priority": "high", "channel": "email"},
            "required_fields": list(FILED_FIELDS),
            "new_records": 1,
            "allowed_fields": [*FILED_FIELDS, "created_at", "updated_at"],
        },
        {
            "name": "previous_ticket_closed",
            "collection": "tickets",
            "change": "update",
            "select": _SELECT,
            "before": {"status": "open"},
            "expect": {"status": "closed", "resolution": "superseded"},
            "changed_records": 1,
            "allowed_fields": ["status", "resolution", "updated_at"],
        },
    ]
}
FORBIDDEN_EFFECTS: Final[Mapping[str, Any]] = {
    "effects": [
        {
            "name": "closed_ticket_touched",
            "collection": "tickets",
            "change": "update",
            "select": _SELECT,
            "before": {"status": "closed"},
        }
    ]
}
RECIPES: Final[Mapping[str, Mapping[str, Any]]] = {
    "sql": {
        "kind": "sql",
        "database": {"url_env": READER_URL_ENV},
        "table": "tickets",
        "id_column": "id",
        "identity_fields": {key: key for key in IDENTITY_KEYS},
        "timeout_seconds": 2.0,
    },
    "rest": {
        "kind": "rest",
        "base_url_env": API_URL_ENV,
        "token_env": API_TOKEN_ENV,
        "path": "/api/tickets",
        "collection": "tickets",
        "identity_params": {key: key for key in IDENTITY_KEYS},
        "timeout_seconds": 2.0,
    },
}
KINDS: Final = tuple(RECIPES)
_CHANNELS: Final = {
    "sql": OracleChannel.ORACLE_CHANNEL_DB,
    "rest": OracleChannel.ORACLE_CHANNEL_API,
}


def contract(kind: str) -> RewardContract:
    """The tier-2 helpdesk contract read through recipe ``kind`` (``sql`` or ``rest``).

    A wrong effect is worth 0.0 here (the contract's choice; the default would be -1.0).
    """
    if kind not in RECIPES:
        raise ValueError(f"the helpdesk ships bundles {list(KINDS)}, not {kind!r}")
    return RewardContract(
        contract_id=f"helpdesk.file-and-supersede.{kind}",
        contract_version="1",
        task_id="helpdesk.task.file-and-supersede",
        task_digest=digest_json(
            {"task": "file one new ticket and close the previous open ticket as superseded"}
        ),
        environment_id="helpdesk.environment.synthetic",
        environment_digest=digest_json({"environment": "helpdesk", "version": 1}),
        required_effects_digest=digest_json(REQUIRED_EFFECTS),
        forbidden_effects_digest=digest_json(FORBIDDEN_EFFECTS),
        oracle=OracleSpec(
            channel=_CHANNELS[kind],
            identity_keys=list(IDENTITY_KEYS),
            oracle_recipe_digest=digest_json(RECIPES[kind]),
        ),
        components=[RewardComponent(name="ticket_filed_and_previous_closed", weight=1.0)],
        scoring_policy=ScoringPolicy(wrong_effect_reward=0.0),
        certificate_policy=CertificatePolicy(
            max_epsilon=0.05,
            max_delta=0.05,
            threshold=0.5,
            # Calibrated by `rewardseal-worker calibrate --sandbox`: the generic fault classes of
            # the contract's own effects, written into a sandbox copy and read back.
            calibration_corpus_digest=SANDBOX_CORPUS_DIGEST,
            max_expiry_policy_updates=1000,
        ),
    )


def _json(document: Any) -> str:
    # The layout rewardseal_worker.bundle.write_bundle writes (sorted keys, two spaces).
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def bundle_files(kind: str) -> dict[str, str]:
    """The four files of bundle ``kind``: file name -> text."""
    text = json_format.MessageToJson(contract(kind), preserving_proto_field_name=True) + "\n"
    return {
        "contract.json": text,
        "required_effects.json": _json(REQUIRED_EFFECTS),
        "forbidden_effects.json": _json(FORBIDDEN_EFFECTS),
        "oracle_recipe.json": _json(RECIPES[kind]),
    }


def write_bundles(directory: Path) -> list[Path]:
    """Write ``directory/sql`` and ``directory/rest``; return the bundle directories.

    Only the four contract files are written: a calibration and a certificate already beside
    them are left for ``rewardseal-worker contract check`` to judge (they name the digest).
    """
    written: list[Path] = []
    for kind in KINDS:
        target = Path(directory) / kind
        target.mkdir(parents=True, exist_ok=True)
        for name, content in bundle_files(kind).items():
            (target / name).write_text(content, encoding="utf-8")
        written.append(target)
    return written
