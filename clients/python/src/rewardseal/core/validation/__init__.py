"""Validators for contracts, certificates, receipts and descriptors (docs/spec.md §5, R-MSG-*).

Each validator returns nothing and raises one error from ``rewardseal.core.errors`` naming the first
rule broken. They run when a message is built and when one is parsed, so a bad message never
travels far.

The package is split by what each part checks: :mod:`.fields` (ids, digests, floats, enums,
names), :mod:`.messages` (contract, certificate, receipt, calibration summary),
:mod:`.descriptors` (descriptor, metadata, oracle identity, runtime signal) and :mod:`.strict`
(parsing that refuses unknown fields). Importers use the names re-exported here.
"""

from __future__ import annotations

from rewardseal.core.validation.descriptors import (
    FORBIDDEN_METADATA_KEYS,
    MAX_IDENTITY_VALUE_LENGTH,
    MAX_METADATA_DEPTH,
    MAX_METADATA_KEY_LENGTH,
    RUNTIME_SIGNAL_METADATA_KEY,
    check_identity_values,
    check_metadata,
    runtime_signal_named,
    runtime_signal_of,
    validate_descriptor,
)
from rewardseal.core.validation.fields import (
    ID_PATTERN,
    KEY_ID_PATTERN,
    MAX_ABS_FLOAT,
    MAX_COMPONENTS,
    MAX_IDENTITY_KEYS,
    NAME_PATTERN,
    SIGNATURE_LENGTH,
    check_float,
    check_policy_update_field,
    is_bounded_float,
    validate_digest,
    validate_id,
    validate_key_id,
)
from rewardseal.core.validation.messages import (
    validate_calibration_summary,
    validate_certificate,
    validate_contract,
    validate_receipt,
    validate_receipt_claims,
    validate_receipt_facts,
)
from rewardseal.core.validation.strict import parse_strict

__all__ = [
    "FORBIDDEN_METADATA_KEYS",
    "ID_PATTERN",
    "KEY_ID_PATTERN",
    "MAX_ABS_FLOAT",
    "MAX_COMPONENTS",
    "MAX_IDENTITY_KEYS",
    "MAX_IDENTITY_VALUE_LENGTH",
    "MAX_METADATA_DEPTH",
    "MAX_METADATA_KEY_LENGTH",
    "NAME_PATTERN",
    "RUNTIME_SIGNAL_METADATA_KEY",
    "SIGNATURE_LENGTH",
    "check_float",
    "check_identity_values",
    "check_metadata",
    "check_policy_update_field",
    "is_bounded_float",
    "parse_strict",
    "runtime_signal_named",
    "runtime_signal_of",
    "validate_calibration_summary",
    "validate_certificate",
    "validate_contract",
    "validate_descriptor",
    "validate_digest",
    "validate_id",
    "validate_key_id",
    "validate_receipt",
    "validate_receipt_claims",
    "validate_receipt_facts",
]
