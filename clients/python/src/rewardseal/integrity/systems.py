"""Reward-system revisions (R-I-1): what training optimizes, who audits it, and the mapping.

A spec document::

    {
      "optimizer": {"kind": "contract", "contract_digest": "sha256:...",
                    "worker_key_id": "ed25519:sha256:...",
                    "fingerprints": {"implementation": "...", "artifact": "...",
                                     "configuration": "...", "runtime": "..."}},
      "auditors": [{"role": "primary_sentinel", "kind": "external",
                    "fingerprints": {"implementation": "..."}, "parameters": {...}},
                   {"role": "diagnostic", ...}],
      "mapping": {"normalization": {"min": 0, "max": 10, "direction": "maximize"},
                  "scale": 1, "center": 0, "threshold": 0.5, "failure_behavior": "reject"}
    }

A *source* (the optimizer or an auditor) is either a rewardseal contract served by a worker
(``kind: contract``: the contract digest and the worker's key id) or an external reward function
(``kind: external``), which is named by its implementation fingerprint. ``label`` (free text) and
``parameters`` (a free-form object: endpoint, model settings) are optional and part of the
content; credentials in them are scrubbed before the id is computed. Exactly one auditor has the
role ``primary_sentinel``; at most :data:`MAX_DIAGNOSTIC_AUDITORS` are ``diagnostic``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from rewardseal.core.digest import canonical_json, is_digest
from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.fields import JsonObject
from rewardseal.core.integrity.mapping import RewardMapping, mapping_blockers
from rewardseal.core.integrity.revisions import document_blockers, refuse_blocked, revision_id
from rewardseal.core.integrity.scrubbing import scrub_credentials

__all__ = [
    "FINGERPRINT_KINDS",
    "MAX_DIAGNOSTIC_AUDITORS",
    "Auditor",
    "AuditorRole",
    "Fingerprints",
    "RewardSource",
    "RewardSystem",
    "SourceKind",
    "parse_reward_system",
    "validate_reward_system",
]

SourceKind = Literal["contract", "external"]
AuditorRole = Literal["primary_sentinel", "diagnostic"]
FINGERPRINT_KINDS: Final = ("implementation", "artifact", "configuration", "runtime")
MAX_DIAGNOSTIC_AUDITORS: Final = 3
MAX_FINGERPRINT_CHARS: Final = 256
MAX_LABEL_CHARS: Final = 200

_SOURCE_KEYS: Final = (
    "kind",
    "contract_digest",
    "worker_key_id",
    "fingerprints",
    "label",
    "parameters",
)
_AUDITOR_KEYS: Final = ("role", *_SOURCE_KEYS)
_SYSTEM_KEYS: Final = ("optimizer", "auditors", "mapping")
_WORKER_KEY_ID: Final = re.compile(r"ed25519:sha256:[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Fingerprints:
    """What a reward source depends on; None where the source does not pin it.

    ``implementation`` is the code that computes the reward (for a rewardseal worker: the oracle
    recipe's reader, since every worker shares the worker binary), ``artifact`` a model or data
    artifact, ``configuration`` its settings, ``runtime`` the environment it runs in.
    """

    implementation: str | None = None
    artifact: str | None = None
    configuration: str | None = None
    runtime: str | None = None

    def to_json(self) -> JsonObject:
        """Only the pinned fingerprints (an absent key and a null one are the same content)."""
        return {
            kind: getattr(self, kind)
            for kind in FINGERPRINT_KINDS
            if getattr(self, kind) is not None
        }

    @classmethod
    def from_json(cls, doc: object) -> Fingerprints:
        """Read fingerprints; refuse unknown kinds and empty or over-long values."""
        blockers = _fingerprint_blockers(doc, "fingerprints")
        if blockers:
            raise ValidationError(f"fingerprints refused: {'; '.join(blockers)}")
        data = fields.mapping(doc, "fingerprints")
        return cls(**{kind: data.get(kind) for kind in FINGERPRINT_KINDS})


@dataclass(frozen=True, slots=True)
class RewardSource:
    """The optimizer's reward or an auditor: a rewardseal contract or an external function."""

    kind: SourceKind
    fingerprints: Fingerprints = Fingerprints()
    contract_digest: str | None = None
    worker_key_id: str | None = None
    label: str | None = None
    parameters: JsonObject = field(default_factory=dict)

    @property
    def source_revision(self) -> str:
        """The revision id of this source's own content (R-I-2's "shared revision")."""
        return revision_id(self.to_json())

    def to_json(self) -> JsonObject:
        """The normalized content: absent optional fields left out, parameters scrubbed."""
        doc: JsonObject = {"kind": self.kind, "fingerprints": self.fingerprints.to_json()}
        if self.contract_digest is not None:
            doc["contract_digest"] = self.contract_digest
        if self.worker_key_id is not None:
            doc["worker_key_id"] = self.worker_key_id
        if self.label is not None:
            doc["label"] = self.label
        if self.parameters:
            doc["parameters"] = scrub_credentials(self.parameters)
        return doc

    @classmethod
    def from_json(cls, doc: object, where: str = "source") -> RewardSource:
        """Read a source; refuse it unless it has no blockers."""
        blockers = _source_blockers(doc, where, _SOURCE_KEYS)
        if blockers:
            raise ValidationError(f"{where} refused: {'; '.join(blockers)}")
        return _source(fields.mapping(doc, where))


@dataclass(frozen=True, slots=True)
class Auditor:
    """An auditor of the optimizer's reward: the primary sentinel or a diagnostic auditor."""

    role: AuditorRole
    source: RewardSource

    def to_json(self) -> JsonObject:
        """The source's content with its role."""
        return {"role": self.role, **self.source.to_json()}


@dataclass(frozen=True, slots=True)
class RewardSystem:
    """An immutable reward-system revision (R-I-1); build one with :func:`parse_reward_system`."""

    optimizer: RewardSource
    auditors: tuple[Auditor, ...]
    mapping: RewardMapping

    @property
    def primary_sentinel(self) -> RewardSource:
        """The one auditor whose verdict gates (R-I-2)."""
        return next(a.source for a in self.auditors if a.role == "primary_sentinel")

    @property
    def diagnostic_auditors(self) -> tuple[RewardSource, ...]:
        """The auditors that are reported but never gate."""
        return tuple(a.source for a in self.auditors if a.role == "diagnostic")

    @property
    def revision_id(self) -> str:
        """The R-DIG-1 digest of :meth:`to_json` (scrubbed): equal content, equal id."""
        return revision_id(self.to_json())

    def to_json(self) -> JsonObject:
        """The normalized, scrubbed content (primary sentinel first, diagnostics sorted)."""
        content: JsonObject = scrub_credentials(
            {
                "optimizer": self.optimizer.to_json(),
                "auditors": [auditor.to_json() for auditor in self.auditors],
                "mapping": self.mapping.to_json(),
            }
        )
        return content

    @classmethod
    def from_json(cls, doc: object) -> RewardSystem:
        """Read a stored revision or a spec (the same as :func:`parse_reward_system`)."""
        return parse_reward_system(doc)


def _fingerprint_blockers(doc: object, where: str) -> set[str]:
    if doc is None:
        return set()
    if not isinstance(doc, Mapping):
        return {f"wrong_type:{where}"}
    found = {f"unknown_key:{where}.{key}" for key in doc if key not in FINGERPRINT_KINDS}
    for kind in FINGERPRINT_KINDS:
        value = doc.get(kind)
        if value is not None and (
            not isinstance(value, str) or not value.strip() or len(value) > MAX_FINGERPRINT_CHARS
        ):
            found.add(f"invalid_value:{where}.{kind}")
    return found


def _source_blockers(doc: object, where: str, allowed: tuple[str, ...]) -> set[str]:
    if not isinstance(doc, Mapping):
        return {f"missing:{where}" if doc is None else f"wrong_type:{where}"}
    found = {f"unknown_key:{where}.{key}" for key in doc if key not in allowed}
    kind = doc.get("kind")
    found |= _fingerprint_blockers(doc.get("fingerprints"), f"{where}.fingerprints")
    digest, key_id = doc.get("contract_digest"), doc.get("worker_key_id")
    if kind == "contract":
        if not (isinstance(digest, str) and is_digest(digest)):
            found.add(f"invalid_value:{where}.contract_digest")
        if not (isinstance(key_id, str) and _WORKER_KEY_ID.fullmatch(key_id)):
            found.add(f"invalid_value:{where}.worker_key_id")
    elif kind == "external":
        prints = doc.get("fingerprints")
        if not isinstance(prints, Mapping) or prints.get("implementation") is None:
            found.add(f"missing:{where}.fingerprints.implementation")
        found |= {
            f"not_allowed_for_external:{where}.{name}"
            for name in ("contract_digest", "worker_key_id")
            if doc.get(name) is not None
        }
    else:
        found.add(f"invalid_value:{where}.kind")
    label = doc.get("label")
    if label is not None and (not isinstance(label, str) or len(label) > MAX_LABEL_CHARS):
        found.add(f"invalid_value:{where}.label")
    parameters = doc.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        found.add(f"wrong_type:{where}.parameters")
    return found


def _source(doc: Mapping[str, Any]) -> RewardSource:
    """A source from a document :func:`_source_blockers` passed."""
    return RewardSource(
        kind=doc["kind"],
        fingerprints=Fingerprints.from_json(doc.get("fingerprints") or {}),
        contract_digest=doc.get("contract_digest"),
        worker_key_id=doc.get("worker_key_id"),
        label=doc.get("label"),
        parameters=scrub_credentials(dict(doc.get("parameters") or {})),
    )


def _duplicate_key(source: RewardSource) -> tuple[str, ...]:
    """Two auditors with the same key are the same judge asked twice."""
    if source.kind == "contract":
        return ("contract", source.contract_digest or "", source.worker_key_id or "")
    return ("external", source.fingerprints.implementation or "")


def validate_reward_system(doc: object) -> list[str]:
    """Every blocker of a reward-system spec, sorted and unique; empty when it is valid.

    Blockers are short codes with a JSON path where one helps, e.g. ``primary_sentinels_multiple``,
    ``diagnostic_auditors_over_limit``, ``auditor_duplicate:auditors[2]``,
    ``threshold_outside_mapped_range``, ``not_finite:$.mapping.scale``,
    ``unknown_key:optimizer.tokn``. Credentials are scrubbed first, so no blocker quotes one.
    """
    if not isinstance(doc, Mapping):
        return ["wrong_type:$"]
    found = document_blockers(doc, _SYSTEM_KEYS, named=False)
    doc = dict(scrub_credentials(doc))
    found |= _source_blockers(doc.get("optimizer"), "optimizer", _SOURCE_KEYS)
    found |= set(mapping_blockers(doc.get("mapping")) if "mapping" in doc else ["missing:mapping"])
    auditors = doc.get("auditors")
    if not isinstance(auditors, list):
        found.add("missing:auditors" if auditors is None else "wrong_type:auditors")
        return sorted(found)
    primaries = diagnostics = 0
    seen: dict[tuple[str, ...], int] = {}
    for index, auditor in enumerate(auditors):
        where = f"auditors[{index}]"
        problems = _source_blockers(auditor, where, _AUDITOR_KEYS)
        role = auditor.get("role") if isinstance(auditor, Mapping) else None
        if role == "primary_sentinel":
            primaries += 1
        elif role == "diagnostic":
            diagnostics += 1
        elif isinstance(auditor, Mapping):
            problems.add(f"invalid_value:{where}.role")
        found |= problems
        if not problems and isinstance(auditor, Mapping):
            key = _duplicate_key(_source(auditor))
            if key in seen:
                found.add(f"auditor_duplicate:{where}")
            seen.setdefault(key, index)
    if primaries == 0:
        found.add("primary_sentinel_missing")
    elif primaries > 1:
        found.add("primary_sentinels_multiple")
    if diagnostics > MAX_DIAGNOSTIC_AUDITORS:
        found.add("diagnostic_auditors_over_limit")
    return sorted(found)


def parse_reward_system(doc: object) -> RewardSystem:
    """The revision a spec defines: validated, scrubbed, normalized.

    Raises:
        IntegritySpecInvalid: the spec has blockers; ``metadata["blockers"]`` lists them
            (comma-separated) and nothing of the spec should be stored.
    """
    blockers = validate_reward_system(doc)
    refuse_blocked("reward-system spec", blockers)
    data = scrub_credentials(fields.mapping(doc, "$"))
    auditors = [Auditor(a["role"], _source(a)) for a in data["auditors"]]
    # The primary sentinel first, then the diagnostics in canonical order: listing the same
    # auditors in another order is the same reward system.
    auditors.sort(key=lambda a: (a.role != "primary_sentinel", canonical_json(a.to_json())))
    return RewardSystem(
        optimizer=_source(data["optimizer"]),
        auditors=tuple(auditors),
        mapping=RewardMapping.from_json(data["mapping"]),
    )
