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
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from rewardseal.core.accepting import accept_certificate
from rewardseal.core.bundle_files import (
    BOUND_FILES,
    CALIBRATION_FILE,
    CERTIFICATE_FILE,
    CONTRACT_FILE,
    FORBIDDEN_EFFECTS_FILE,
    MISSING,
    ORACLE_RECIPE_FILE,
    REQUIRED_EFFECTS_FILE,
    Problems,
    check_bound_documents,
    one_error,
    read_json,
    read_message,
)
from rewardseal.core.contract import contract_digest, contract_tier
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import SignatureError, ValidationError
from rewardseal.core.judging import EffectSpec, parse_effects
from rewardseal.core.signing import TrustSet
from rewardseal.core.validation import validate_contract
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import OracleChannel
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

__all__ = [
    "BUNDLE_FILES",
    "CALIBRATION_FILE",
    "CERTIFICATE_FILE",
    "CONTRACT_FILE",
    "FORBIDDEN_EFFECTS_FILE",
    "ORACLE_RECIPE_FILE",
    "RECIPE_CHANNELS",
    "REQUIRED_EFFECTS_FILE",
    "BundleInspection",
    "ContractBundle",
    "inspect_bundle",
    "load_bundle",
    "write_bundle",
]
# The file names are rewardseal.core.bundle_files' (control reads bundles too, R-C-14); they are
# exported here as well, so the worker's modules name one bundle module.

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


@dataclass(frozen=True)
class BundleInspection:
    """Every problem of a bundle directory, found in one pass, and the bundle when there are none.

    ``contract_digest`` is set whenever ``contract.json`` parses and passes its own rules, even
    if another file of the bundle has problems (so an author sees which contract they edit).
    """

    bundle: ContractBundle | None
    contract_digest: str | None
    problems: tuple[str, ...]


def inspect_bundle(path: Path, *, trust: TrustSet | None = None) -> BundleInspection:
    """Read the bundle in directory ``path`` and run every consistency check, collecting every
    problem instead of stopping at the first (``rewardseal-worker contract check``).

    :func:`load_bundle` is this, raising when a problem was found: what a check passes, serve
    loads.
    """
    directory = Path(path)
    if not directory.is_dir():
        problem = f"bundle directory {str(directory)!r} does not exist"
        return BundleInspection(None, None, (problem,))
    problems = Problems()
    contract = read_message(directory, CONTRACT_FILE, RewardContract, problems)
    required_doc = read_json(directory, REQUIRED_EFFECTS_FILE, problems)
    forbidden_doc = read_json(directory, FORBIDDEN_EFFECTS_FILE, problems)
    recipe_doc = read_json(directory, ORACLE_RECIPE_FILE, problems)
    certificate = (
        read_message(directory, CERTIFICATE_FILE, RewardCertificate, problems)
        if (directory / CERTIFICATE_FILE).exists()
        else None
    )
    calibration = (
        read_json(directory, CALIBRATION_FILE, problems)
        if (directory / CALIBRATION_FILE).exists()
        else None
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
        problems=problems,
    )


def load_bundle(path: Path, *, trust: TrustSet | None = None) -> ContractBundle:
    """Load the bundle in directory ``path`` and run every consistency check.

    With ``trust``, a certificate must also verify against one of its keys (a self-signed
    certificate verifies against the worker's own key).

    Raises:
        ValidationError: naming the file and the rule of each problem found (all of them; see
            :func:`inspect_bundle`).
    """
    return _loaded(inspect_bundle(path, trust=trust))


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
    _loaded(
        _assemble(
            directory.resolve(),
            contract=contract,
            required_doc=required_doc,
            forbidden_doc=forbidden_doc,
            recipe_doc=recipe_doc,
            certificate=certificate,
            calibration=calibration,
            trust=None,
            problems=Problems(),
        )
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


def _loaded(inspection: BundleInspection) -> ContractBundle:
    """The bundle, or one ValidationError that names every problem."""
    if inspection.bundle is not None:
        return inspection.bundle
    raise one_error(inspection.problems)


def _assemble(
    directory: Path,
    *,
    contract: RewardContract | None,
    required_doc: Any,
    forbidden_doc: Any,
    recipe_doc: Any,
    certificate: RewardCertificate | None,
    calibration: Any,
    trust: TrustSet | None,
    problems: Problems,
) -> BundleInspection:
    """Every consistency check, in a fixed order; a check whose input is already known to be
    broken is skipped (its problem is reported once, where it was found)."""
    digest: str | None = None
    if contract is not None:
        with problems.catch(f"{CONTRACT_FILE}: "):
            validate_contract(contract)
            digest = contract_digest(contract)

    # The documents are bound by digest: a file that changed is a different contract.
    documents = dict(zip(BOUND_FILES, (required_doc, forbidden_doc, recipe_doc), strict=True))
    check_bound_documents(contract, documents, problems)

    required = _effects(REQUIRED_EFFECTS_FILE, required_doc, problems)
    forbidden = _effects(FORBIDDEN_EFFECTS_FILE, forbidden_doc, problems)
    if required is not None and not required:
        # With nothing required, rule 5 of R-W-4 would verify every completed episode.
        problems.add(f"{REQUIRED_EFFECTS_FILE}: the contract has no required effect")
    for spec in forbidden or ():
        if (
            spec.new_records is not None
            or spec.changed_records is not None
            or spec.allowed_fields is not None
        ):
            problems.add(
                f"{FORBIDDEN_EFFECTS_FILE}: effect {spec.name!r} declares new_records, "
                "changed_records or allowed_fields, which only required effects use"
            )

    contract_keys = set(contract.oracle.identity_keys) if contract is not None else None
    if contract_keys is not None:
        selected: set[str] = set()
        for spec in (*(required or ()), *(forbidden or ())):
            outside = spec.identity_keys() - contract_keys
            if outside:
                problems.add(
                    f"effect {spec.name!r} references identity keys {sorted(outside)} that the "
                    "contract does not declare"
                )
            selected |= spec.identity_keys()
        unselected = sorted(contract_keys - selected)
        if unselected and required is not None and forbidden is not None:
            problems.add(
                f"contract identity keys {unselected} are selected by no effect; an unselected "
                "key would not bind the effect to the episode's subject"
            )

    if contract is not None:
        # R-MSG-11: an effect may refer only to a parameter the contract declares.
        declared = {parameter.name for parameter in contract.task_parameters}
        for spec in (*(required or ()), *(forbidden or ())):
            undeclared = spec.parameter_names() - declared
            if undeclared:
                problems.add(
                    f"effect {spec.name!r} refers to task parameters {sorted(undeclared)} that "
                    "the contract does not declare (contract.json task_parameters)"
                )

    kind: str | None = None
    if isinstance(recipe_doc, Mapping):
        with problems.catch(f"{ORACLE_RECIPE_FILE}: "):
            kind = validate_recipe(recipe_doc)
        # A recipe with another problem still says what kind it means to be: check the channel.
        raw_kind = recipe_doc.get("kind")
        known = kind or (raw_kind if isinstance(raw_kind, str) else "")
        if contract is not None and known in RECIPE_CHANNELS:
            channel = contract.oracle.channel
            if channel not in RECIPE_CHANNELS[known]:
                valid = channel in OracleChannel.values()
                named = OracleChannel.Name(channel) if valid else str(channel)
                problems.add(
                    f"{ORACLE_RECIPE_FILE}: recipe kind {known!r} cannot serve the contract's "
                    f"channel {named}"
                )
    if kind is not None:
        recipe = recipe_doc
        recipe_keys = set(recipe_identity_fields(recipe))
        if contract_keys is not None and recipe_keys != contract_keys:
            problems.add(
                f"{ORACLE_RECIPE_FILE}: identity_fields keys {sorted(recipe_keys)} differ from "
                f"the contract's identity keys {sorted(contract_keys)}"
            )
        collection = recipe_collection(recipe)
        for spec in (*(required or ()), *(forbidden or ())):
            if spec.collection != collection:
                problems.add(
                    f"effect {spec.name!r} lives in collection {spec.collection!r} but the "
                    f"oracle recipe reads {collection!r}"
                )

    cert_digest: str | None = None
    if certificate is not None and contract is not None and digest is not None:
        with problems.catch(f"{CERTIFICATE_FILE}: "):
            cert_digest = _check_certificate(certificate, contract, digest, trust)
    if calibration is not None and calibration is not MISSING:
        if not isinstance(calibration, Mapping):
            problems.add(f"{CALIBRATION_FILE}: must be a JSON object")
        else:
            summarized = calibration.get("reward_contract_digest")
            if summarized is not None and digest is not None and summarized != digest:
                problems.add(f"{CALIBRATION_FILE}: the summary is for another contract")
            with problems.catch(f"{CALIBRATION_FILE}: "):
                digest_json(calibration)  # refuses a document with no canonical form

    if problems.items or contract is None or digest is None or required is None:
        if not problems.items:  # unreachable: each None above was recorded as a problem
            problems.add("the bundle could not be read")
        return BundleInspection(None, digest, tuple(problems.items))
    assert forbidden is not None
    bundle = ContractBundle(
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
    return BundleInspection(bundle, digest, ())


def _effects(name: str, doc: Any, problems: Problems) -> tuple[EffectSpec, ...] | None:
    """The parsed effects, or None when the document is missing or has a problem."""
    if not isinstance(doc, Mapping):
        return None  # missing or not an object: already recorded
    try:
        return parse_effects(doc)
    except ValidationError as exc:
        problems.add(f"{name}: {exc.message}")
        return None


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
