"""A contract bundle's files, read without a worker: the contract and the documents it binds.

A bundle directory (docs/authoring.md) holds ``contract.json`` (the RewardContract, proto3 JSON)
and the three documents it binds by digest (``required_effects.json``,
``forbidden_effects.json``, ``oracle_recipe.json``), with an optional certificate and
calibration summary beside them. This module is the part of reading one that needs no oracle:
the file names, reading each file while collecting problems instead of stopping at the first,
and checking each bound document against the digest the contract names.

Two readers share it, so a bundle means the same thing to both: the worker
(``rewardseal_worker.bundle``, which adds the rules that need its oracles: recipe kinds,
channels, certificates) and control's ``rewardseal-control contracts register BUNDLE_DIR``
(R-C-14), which needs only the sealed contract (:func:`read_sealed_contract`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from rewardseal.core import strict_json
from rewardseal.core.contract import contract_digest
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.validation import validate_contract
from rewardseal.v1.contract_pb2 import RewardContract

__all__ = [
    "BOUND_FILES",
    "CALIBRATION_FILE",
    "CERTIFICATE_FILE",
    "CONTRACT_FILE",
    "FORBIDDEN_EFFECTS_FILE",
    "MISSING",
    "ORACLE_RECIPE_FILE",
    "REQUIRED_EFFECTS_FILE",
    "Problems",
    "SealedContract",
    "bound_digest",
    "check_bound_documents",
    "one_error",
    "read_json",
    "read_message",
    "read_sealed_contract",
]

CONTRACT_FILE: Final = "contract.json"
REQUIRED_EFFECTS_FILE: Final = "required_effects.json"
FORBIDDEN_EFFECTS_FILE: Final = "forbidden_effects.json"
ORACLE_RECIPE_FILE: Final = "oracle_recipe.json"
CERTIFICATE_FILE: Final = "certificate.json"
CALIBRATION_FILE: Final = "calibration.json"
BOUND_FILES: Final = (REQUIRED_EFFECTS_FILE, FORBIDDEN_EFFECTS_FILE, ORACLE_RECIPE_FILE)
"""The documents ``contract.json`` binds by digest, in the order their problems are reported."""

MISSING: Final = object()
"""A bundle file that could not be read (its problem is already recorded)."""

_Msg = TypeVar("_Msg", bound=Message)


class Problems:
    """The problems found so far; :meth:`catch` records a check's ValidationError and goes on."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, text: str) -> None:
        """Record one problem (a sentence naming the file and the rule)."""
        self.items.append(text)

    @contextlib.contextmanager
    def catch(self, prefix: str = "") -> Iterator[None]:
        """Record a ValidationError raised inside as a problem, prefixed, and carry on."""
        try:
            yield
        except ValidationError as exc:
            self.add(f"{prefix}{exc.message}")


def one_error(problems: Sequence[str]) -> ValidationError:
    """One ValidationError that names every problem (numbered when there are several)."""
    if len(problems) == 1:
        return ValidationError(problems[0])
    listed = "; ".join(f"({index}) {text}" for index, text in enumerate(problems, 1))
    return ValidationError(f"the bundle has {len(problems)} problems: {listed}")


def _read_text(directory: Path, name: str, problems: Problems) -> str | None:
    target = directory / name
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        problems.add(f"bundle file {name} is missing")
    except (OSError, UnicodeDecodeError) as exc:
        problems.add(f"{name}: cannot be read ({type(exc).__name__})")
    return None


def read_json(directory: Path, name: str, problems: Problems) -> Any:
    """The decoded document (strict JSON), or :data:`MISSING` (the problem recorded)."""
    text = _read_text(directory, name, problems)
    if text is None:
        return MISSING
    try:
        return strict_json.loads(text)
    except (ValueError, RecursionError) as exc:
        problems.add(f"{name}: not valid JSON ({exc})")
        return MISSING


def read_message(
    directory: Path, name: str, message_type: type[_Msg], problems: Problems
) -> _Msg | None:
    """The message in ``name`` (proto3 JSON), or None (the problem recorded)."""
    text = _read_text(directory, name, problems)
    if text is None:
        return None
    message = message_type()
    try:
        json_format.Parse(text, message)
    except json_format.ParseError as exc:
        problems.add(f"{name}: not a valid {message_type.__name__} ({exc})")
        return None
    return message


def bound_digest(contract: RewardContract, name: str) -> str:
    """The digest ``contract`` binds the bound document ``name`` (one of :data:`BOUND_FILES`)
    with."""
    if name == REQUIRED_EFFECTS_FILE:
        return contract.required_effects_digest
    if name == FORBIDDEN_EFFECTS_FILE:
        return contract.forbidden_effects_digest
    if name == ORACLE_RECIPE_FILE:
        return contract.oracle.oracle_recipe_digest
    raise ValueError(f"{name!r} is not a document a contract binds")


def check_bound_documents(
    contract: RewardContract | None, documents: Mapping[str, Any], problems: Problems
) -> None:
    """Record a problem for each bound document that is not a JSON object or whose digest is
    not the one ``contract`` binds (a changed file is a different contract, R-DIG-1).

    ``documents`` maps each of :data:`BOUND_FILES` to its decoded document or :data:`MISSING`
    (already recorded); without a contract only the shapes are checked.
    """
    for name in BOUND_FILES:
        document = documents[name]
        if document is MISSING:
            continue
        if not isinstance(document, Mapping):
            problems.add(f"{name}: must be a JSON object")
            continue
        if contract is None:
            continue
        bound = bound_digest(contract, name)
        with problems.catch(f"{name}: "):
            actual = digest_json(document)
            if actual != bound:
                problems.add(
                    f"{name}: digest mismatch; the file has {actual} but the contract binds "
                    f"{bound} (after an edit, `rewardseal-worker contract seal DIR` rebinds)"
                )


@dataclass(frozen=True)
class SealedContract:
    """A bundle's contract whose three bound documents match its digests, and its digest."""

    contract: RewardContract
    digest: str


def read_sealed_contract(path: Path) -> SealedContract:
    """Read ``contract.json`` of the bundle in directory ``path``, check it against the contract
    rules, and check the documents it binds against its digests.

    What control needs to register the contract (R-C-14). The worker's own load
    (``rewardseal-worker contract check``) checks more: the effects' rules, the recipe against
    its oracle kinds and channels, any certificate; a bundle it loads always passes here.

    Raises:
        ValidationError: naming every problem found (a missing or unreadable file, a contract
            that breaks a rule, a document whose digest the contract does not bind).
    """
    directory = Path(path)
    if not directory.is_dir():
        raise ValidationError(f"bundle directory {str(directory)!r} does not exist")
    problems = Problems()
    contract = read_message(directory, CONTRACT_FILE, RewardContract, problems)
    digest: str | None = None
    if contract is not None:
        with problems.catch(f"{CONTRACT_FILE}: "):
            validate_contract(contract)
            digest = contract_digest(contract)
    documents = {name: read_json(directory, name, problems) for name in BOUND_FILES}
    check_bound_documents(contract, documents, problems)
    if problems.items:
        raise one_error(problems.items)
    # Each None was recorded as a problem above.
    assert contract is not None
    assert digest is not None
    return SealedContract(contract, digest)
