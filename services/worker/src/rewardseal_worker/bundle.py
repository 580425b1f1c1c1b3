"""Contract bundles: the contract and the documents it binds by digest, in one directory.

A bundle directory (``data_dir/contracts/<bundle>/``) holds::

    contract.json            RewardContract, proto3 JSON with original field names
    required_effects.json    {"effects": [...]}, bound by required_effects_digest
    forbidden_effects.json   {"effects": [...]}, bound by forbidden_effects_digest
    oracle_recipe.json       the oracle recipe, bound by oracle.oracle_recipe_digest
    certificate.json         optional RewardCertificate for this contract
    calibration.json         optional calibration summary beside the certificate (R-CAL-2)

:func:`load_bundle` and :func:`write_bundle` run the same consistency checks, so a bundle that
could be written can be loaded and a bundle that loads is one the worker can score with.
Nothing in a digest depends on the directory's absolute path (R-DIG-1, R-W-6).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from rewardseal import strict_json
from rewardseal.accepting import accept_certificate
from rewardseal.contract import contract_digest, contract_tier
from rewardseal.digest import digest_json
from rewardseal.errors import SignatureError, ValidationError
from rewardseal.judging import EffectSpec, parse_effects
from rewardseal.signing import TrustSet
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import OracleChannel
from rewardseal.validation import validate_contract
from rewardseal_worker.oracles.base import (
    KIND_FHIR,
    KIND_JSON_FILE,
    KIND_REST,
    KIND_SCREEN_DUMP,
    KIND_SQL,
    recipe_collection,
    recipe_identity_fields,
)
from rewardseal_worker.oracles.registry import validate_recipe

CONTRACT_FILE = "contract.json"
REQUIRED_EFFECTS_FILE = "required_effects.json"
FORBIDDEN_EFFECTS_FILE = "forbidden_effects.json"
ORACLE_RECIPE_FILE = "oracle_recipe.json"
CERTIFICATE_FILE = "certificate.json"
CALIBRATION_FILE = "calibration.json"
BUNDLE_FILES: tuple[str, ...] = (
    CONTRACT_FILE,
    REQUIRED_EFFECTS_FILE,
    FORBIDDEN_EFFECTS_FILE,
    ORACLE_RECIPE_FILE,
    CERTIFICATE_FILE,
    CALIBRATION_FILE,
)
"""Every file a bundle may hold; the last two are optional."""

RECIPE_CHANNELS: Mapping[str, frozenset[int]] = MappingProxyType(
    {
        KIND_SQL: frozenset({OracleChannel.ORACLE_CHANNEL_DB}),
        KIND_JSON_FILE: frozenset({OracleChannel.ORACLE_CHANNEL_FILE}),
        KIND_SCREEN_DUMP: frozenset(
            {OracleChannel.ORACLE_CHANNEL_OCR, OracleChannel.ORACLE_CHANNEL_VISUAL}
        ),
        KIND_REST: frozenset({OracleChannel.ORACLE_CHANNEL_API}),
        KIND_FHIR: frozenset({OracleChannel.ORACLE_CHANNEL_API}),
    }
)
"""The contract channels each recipe kind may serve: the channel fixes the tier, so a screen
dump can never pose as a database read."""

_Msg = TypeVar("_Msg", bound=Message)


@dataclass(frozen=True)
class ContractBundle:
    """A loaded, checked bundle: what one worker needs to score one contract."""

    path: Path
    contract: RewardContract
    contract_digest: str
    tier: int
    required: tuple[EffectSpec, ...]
    forbidden: tuple[EffectSpec, ...]
    recipe: Mapping[str, Any]
    certificate: RewardCertificate | None
    certificate_digest: str | None
    calibration: Mapping[str, Any] | None


def load_bundle(path: Path, *, trust: TrustSet | None = None) -> ContractBundle:
    """Load the bundle in directory ``path`` and run every consistency check.

    With ``trust``, a certificate must also verify against one of its keys (a self-signed
    certificate verifies against the worker's own key).

    Raises:
        ValidationError: naming the file and the rule for the first problem found.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise ValidationError(f"bundle directory {str(directory)!r} does not exist")
    contract = _read_message(directory, CONTRACT_FILE, RewardContract)
    required_doc = _read_json(directory, REQUIRED_EFFECTS_FILE)
    forbidden_doc = _read_json(directory, FORBIDDEN_EFFECTS_FILE)
    recipe_doc = _read_json(directory, ORACLE_RECIPE_FILE)
    certificate = (
        _read_message(directory, CERTIFICATE_FILE, RewardCertificate)
        if (directory / CERTIFICATE_FILE).exists()
        else None
    )
    calibration = (
        _read_json(directory, CALIBRATION_FILE) if (directory / CALIBRATION_FILE).exists() else None
    )
    return _assemble(
        directory.resolve(),
        contract=contract,
        required_doc=required_doc,
        forbidden_doc=forbidden_doc,
        recipe_doc=recipe_doc,
        certificate=certificate,
        calibration=calibration,
        trust=trust,
    )


def write_bundle(
    path: Path,
    *,
    contract: RewardContract,
    required_doc: Mapping[str, Any],
    forbidden_doc: Mapping[str, Any],
    recipe_doc: Mapping[str, Any],
    certificate: RewardCertificate | None = None,
    calibration: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> None:
    """Check a bundle like :func:`load_bundle` does, then write it to directory ``path``.

    Each file is written atomically (temporary file, fsync, ``os.replace``). An existing file
    whose content differs (or an optional file this bundle does not have) is refused unless
    ``overwrite=True``, which replaces or removes it; nothing is written when a check fails.

    Raises:
        ValidationError: a consistency check failed or a file would be overwritten.
    """
    directory = Path(path)
    _assemble(
        directory.resolve(),
        contract=contract,
        required_doc=required_doc,
        forbidden_doc=forbidden_doc,
        recipe_doc=recipe_doc,
        certificate=certificate,
        calibration=calibration,
        trust=None,
    )
    contents: dict[str, bytes | None] = {
        CONTRACT_FILE: _message_bytes(contract),
        REQUIRED_EFFECTS_FILE: _json_bytes(required_doc),
        FORBIDDEN_EFFECTS_FILE: _json_bytes(forbidden_doc),
        ORACLE_RECIPE_FILE: _json_bytes(recipe_doc),
        CERTIFICATE_FILE: _message_bytes(certificate) if certificate is not None else None,
        CALIBRATION_FILE: _json_bytes(calibration) if calibration is not None else None,
    }
    # Look at every file before writing any, so a refusal leaves the directory untouched.
    existing = {name: _existing(directory / name) for name in BUNDLE_FILES}
    changed = [
        name
        for name, data in contents.items()
        if existing[name] is not None and existing[name] != data
    ]
    if changed and not overwrite:
        raise ValidationError(
            f"bundle files {changed} already exist with different content; "
            "pass overwrite=True to replace them"
        )
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in contents.items():
        target = directory / name
        if data is None:
            if existing[name] is not None:
                target.unlink()  # a stale optional file would be loaded with this contract
        elif existing[name] != data:
            _write_atomic(target, data)
    _fsync_directory(directory)


def _assemble(
    directory: Path,
    *,
    contract: RewardContract,
    required_doc: Any,
    forbidden_doc: Any,
    recipe_doc: Any,
    certificate: RewardCertificate | None,
    calibration: Any,
    trust: TrustSet | None,
) -> ContractBundle:
    """Every consistency check, in a fixed order; the bundle when they all pass."""
    try:
        validate_contract(contract)
    except ValidationError as exc:
        raise ValidationError(f"{CONTRACT_FILE}: {exc.message}") from exc
    digest = contract_digest(contract)

    # The documents are bound by digest: a file that changed is a different contract.
    for name, doc, bound in (
        (REQUIRED_EFFECTS_FILE, required_doc, contract.required_effects_digest),
        (FORBIDDEN_EFFECTS_FILE, forbidden_doc, contract.forbidden_effects_digest),
        (ORACLE_RECIPE_FILE, recipe_doc, contract.oracle.oracle_recipe_digest),
    ):
        if not isinstance(doc, Mapping):
            raise ValidationError(f"{name}: must be a JSON object")
        actual = digest_json(doc)
        if actual != bound:
            raise ValidationError(
                f"{name}: digest mismatch; the file has {actual} but the contract binds {bound}"
            )

    required = _effects(REQUIRED_EFFECTS_FILE, required_doc)
    forbidden = _effects(FORBIDDEN_EFFECTS_FILE, forbidden_doc)
    if not required:
        # With nothing required, rule 5 of R-W-4 would verify every completed episode.
        raise ValidationError(f"{REQUIRED_EFFECTS_FILE}: the contract has no required effect")
    for spec in forbidden:
        if (
            spec.new_records is not None
            or spec.changed_records is not None
            or spec.allowed_fields is not None
        ):
            raise ValidationError(
                f"{FORBIDDEN_EFFECTS_FILE}: effect {spec.name!r} declares new_records, "
                "changed_records or allowed_fields, which only required effects use"
            )

    contract_keys = set(contract.oracle.identity_keys)
    selected: set[str] = set()
    for spec in (*required, *forbidden):
        outside = spec.identity_keys() - contract_keys
        if outside:
            raise ValidationError(
                f"effect {spec.name!r} references identity keys {sorted(outside)} that the "
                "contract does not declare"
            )
        selected |= spec.identity_keys()
    unselected = sorted(contract_keys - selected)
    if unselected:
        raise ValidationError(
            f"contract identity keys {unselected} are selected by no effect; an unselected key "
            "would not bind the effect to the episode's subject"
        )

    try:
        kind = validate_recipe(recipe_doc)
    except ValidationError as exc:
        raise ValidationError(f"{ORACLE_RECIPE_FILE}: {exc.message}") from exc
    channel = contract.oracle.channel
    if channel not in RECIPE_CHANNELS[kind]:
        raise ValidationError(
            f"{ORACLE_RECIPE_FILE}: recipe kind {kind!r} cannot serve the contract's channel "
            f"{OracleChannel.Name(channel)}"
        )
    recipe_keys = set(recipe_identity_fields(recipe_doc))
    if recipe_keys != contract_keys:
        raise ValidationError(
            f"{ORACLE_RECIPE_FILE}: identity_fields keys {sorted(recipe_keys)} differ from the "
            f"contract's identity keys {sorted(contract_keys)}"
        )
    collection = recipe_collection(recipe_doc)
    for spec in (*required, *forbidden):
        if spec.collection != collection:
            raise ValidationError(
                f"effect {spec.name!r} lives in collection {spec.collection!r} but the oracle "
                f"recipe reads {collection!r}"
            )

    cert_digest: str | None = None
    if certificate is not None:
        cert_digest = _check_certificate(certificate, contract, digest, trust)
    if calibration is not None:
        if not isinstance(calibration, Mapping):
            raise ValidationError(f"{CALIBRATION_FILE}: must be a JSON object")
        named = calibration.get("reward_contract_digest")
        if named is not None and named != digest:
            raise ValidationError(f"{CALIBRATION_FILE}: the summary is for another contract")
        digest_json(calibration)  # refuses a document with no canonical form

    return ContractBundle(
        path=directory,
        contract=contract,
        contract_digest=digest,
        tier=contract_tier(contract),
        required=required,
        forbidden=forbidden,
        recipe=MappingProxyType(dict(recipe_doc)),
        certificate=certificate,
        certificate_digest=cert_digest,
        calibration=MappingProxyType(dict(calibration)) if calibration is not None else None,
    )


def _effects(name: str, doc: Mapping[str, Any]) -> tuple[EffectSpec, ...]:
    try:
        return parse_effects(doc)
    except ValidationError as exc:
        raise ValidationError(f"{name}: {exc.message}") from exc


def _check_certificate(
    certificate: RewardCertificate, contract: RewardContract, digest: str, trust: TrustSet | None
) -> str:
    try:
        accepted = accept_certificate(
            certificate, trust=trust, contract=contract, contract_digest=digest, check_policy=False
        )
    except (ValidationError, SignatureError) as exc:
        raise ValidationError(f"{CERTIFICATE_FILE}: {exc.message}") from exc
    assert accepted.digest is not None
    return accepted.digest


def _read_text(directory: Path, name: str) -> str:
    target = directory / name
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValidationError(f"bundle file {name} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{name}: cannot be read ({type(exc).__name__})") from None


def _read_json(directory: Path, name: str) -> Any:
    text = _read_text(directory, name)
    try:
        return strict_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"{name}: not valid JSON ({exc})") from None


def _read_message(directory: Path, name: str, message_type: type[_Msg]) -> _Msg:
    text = _read_text(directory, name)
    message = message_type()
    try:
        json_format.Parse(text, message)
    except json_format.ParseError as exc:
        raise ValidationError(f"{name}: not a valid {message_type.__name__} ({exc})") from None
    return message


def _json_bytes(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _message_bytes(message: Message) -> bytes:
    text = json_format.MessageToJson(message, preserving_proto_field_name=True)
    return (text + "\n").encode("utf-8")


def _existing(target: Path) -> bytes | None:
    try:
        return target.read_bytes()
    except FileNotFoundError:
        return None


def _write_atomic(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` so a reader sees the old file or the new one, never half."""
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)  # bundles hold no secrets; mkstemp's 0600 would hide them
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _fsync_directory(directory: Path) -> None:
    # Makes the renames durable; not every platform can open a directory.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
