"""Episode descriptor checks (R-MSG-9/10, R-W-2, R-W-4): metadata, oracle identities and the
runtime signal."""

from __future__ import annotations

import math
from collections.abc import Mapping

from google.protobuf.struct_pb2 import ListValue, Struct, Value

from rewardseal.core.errors import InvalidEpisode, preview
from rewardseal.core.validation.fields import (
    MAX_IDENTITY_KEYS,
    NAME_PATTERN,
    check_enum,
    check_policy_update_field,
    validate_digest,
    validate_id,
)
from rewardseal.v1.enums_pb2 import (
    RUNTIME_SIGNAL_COMPLETED,
    RuntimeSignal,
)
from rewardseal.v1.episode_pb2 import EpisodeDescriptor

MAX_IDENTITY_VALUE_LENGTH = 256
MAX_METADATA_KEY_LENGTH = 128
"""Longest descriptor metadata key, at any depth (keys are free-form but bounded)."""
MAX_METADATA_DEPTH = 32
"""Deepest nesting of a descriptor's metadata (R-MSG-9): the metadata object itself is level 1,
each object or list inside it one more. The same bound on every face (gRPC, HTTP, the clients);
protobuf's own parse limit (100 messages, three per Struct level) lies just above it, and a
request past that is refused ``invalid_episode`` too (the worker's decoding guard)."""

FORBIDDEN_METADATA_KEYS: frozenset[str] = frozenset(
    {
        "screenshot",
        "screenshots",
        "screen",
        "screen_text",
        "image",
        "prompt",
        "prompts",
        "completion",
        "completions",
        "messages",
        "note",
        "notes",
        "record",
        "records",
        "row",
        "rows",
        "evidence",
        "phi",
        "pii",
        "patient",
        "url",
        "dsn",
        "password",
        "secret",
        "token",
        "credentials",
    }
)
"""Metadata keys that name record contents or secrets (R-MSG-9); refused at any depth."""


def check_metadata(metadata: Struct) -> None:
    """Refuse metadata nested deeper than :data:`MAX_METADATA_DEPTH`, keys that name record
    contents or secrets, at any depth (R-MSG-9), keys longer than
    :data:`MAX_METADATA_KEY_LENGTH` (no reader needs them; they only bloat), and numbers with no
    JSON form (NaN, infinity).

    The walk is iterative (an explicit stack), so no nesting a caller builds can exhaust the
    interpreter's recursion limit: a deep document is refused at its first level too many.
    """
    if not metadata.fields:  # most descriptors: nothing to walk
        return
    pending: list[tuple[Struct | ListValue, str, int]] = [(metadata, "metadata", 1)]
    while pending:
        node, path, depth = pending.pop()
        if depth > MAX_METADATA_DEPTH:
            raise InvalidEpisode(
                f"metadata nests deeper than {MAX_METADATA_DEPTH} levels "
                f"(at {preview(path, quoted=False)})"
            )
        if isinstance(node, ListValue):
            for index, value in enumerate(node.values):
                _push_value(pending, value, f"{path}[{index}]", depth)
            continue
        for key, value in node.fields.items():
            # Checked before anything quotes the path: a parent's keys are short by now.
            if len(key) > MAX_METADATA_KEY_LENGTH:
                raise InvalidEpisode(
                    f"a key in {preview(path, quoted=False)} is longer than "
                    f"{MAX_METADATA_KEY_LENGTH} characters ({len(key)})"
                )
            if key.lower() in FORBIDDEN_METADATA_KEYS:
                raise InvalidEpisode(
                    f"{preview(f'{path}.{key}', quoted=False)} names record contents; "
                    "metadata may not carry it"
                )
            _push_value(pending, value, f"{path}.{key}", depth)


def _push_value(
    pending: list[tuple[Struct | ListValue, str, int]], value: Value, path: str, depth: int
) -> None:
    """Queue ``value``'s object or list one level below ``depth``; refuse a number with no
    JSON form."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        pending.append((value.struct_value, path, depth + 1))
    elif kind == "list_value":
        pending.append((value.list_value, path, depth + 1))
    elif kind == "number_value" and not math.isfinite(value.number_value):
        # The value itself is not quoted: it is the caller's.
        raise InvalidEpisode("metadata has no JSON form (NaN or infinity)")


def check_identity_values(identity: Mapping[str, object], field: str) -> None:
    """Refuse an identity with too many keys, a malformed key, or a value that is not a string
    of 1-:data:`MAX_IDENTITY_VALUE_LENGTH` characters (R-W-2); ``field`` names it in messages.

    The one shape check for an oracle identity wherever it enters: BeginEpisode, a descriptor's
    ``oracle_identity``, a descriptor's ``metadata.oracle_identity``, batches and streams. Key
    *set* checks against the contract (identity_mismatch) come after it, in the worker.
    """
    if len(identity) > MAX_IDENTITY_KEYS:
        raise InvalidEpisode(
            f"{field} has {len(identity)} keys; an identity has at most {MAX_IDENTITY_KEYS}"
        )
    for key, value in identity.items():
        if not isinstance(key, str) or not NAME_PATTERN.match(key):
            raise InvalidEpisode(f"{field} key {preview(key)} is not a valid name")
        if not isinstance(value, str) or not value or len(value) > MAX_IDENTITY_VALUE_LENGTH:
            raise InvalidEpisode(f"{field}.{key} must be 1-{MAX_IDENTITY_VALUE_LENGTH} characters")


def validate_descriptor(descriptor: EpisodeDescriptor) -> None:
    """R-MSG-9/10 shape checks; every failure is InvalidEpisode (``invalid_episode``).

    Checks that need the contract or the worker's state (digest match, identity keys,
    policy-update ledger) belong to the worker.
    """
    validate_id(descriptor.episode_id, "episode_id", error=InvalidEpisode)
    validate_id(descriptor.policy_checkpoint_id, "policy_checkpoint_id", error=InvalidEpisode)
    check_policy_update_field(descriptor.policy_update, "policy_update", error=InvalidEpisode)
    validate_digest(
        descriptor.reward_contract_digest, "reward_contract_digest", error=InvalidEpisode
    )
    if descriptor.HasField("task_id"):
        validate_id(descriptor.task_id, "task_id", error=InvalidEpisode)
    if descriptor.HasField("environment_id"):
        validate_id(descriptor.environment_id, "environment_id", error=InvalidEpisode)
    if descriptor.HasField("runtime_signal"):
        check_enum(descriptor.runtime_signal, RuntimeSignal, "runtime_signal", InvalidEpisode)
    if descriptor.oracle_identity:  # most descriptors name none (BeginEpisode did)
        check_identity_values(descriptor.oracle_identity, "oracle_identity")
    check_metadata(descriptor.metadata)
    runtime_signal_of(descriptor)


RUNTIME_SIGNAL_METADATA_KEY = "runtime_signal"
"""Where HTTP reward clients put the runtime's end-of-episode signal: ``metadata.runtime_signal``,
a lowercase word (``halted_before_effect``) or the enum's full name."""


def runtime_signal_named(word: str | None, field: str) -> RuntimeSignal.ValueType:
    """The runtime signal a JSON caller names: a lowercase word (``halted_before_effect``) or
    the enum's full name; ``field`` names where it came from in the error.

    Raises:
        InvalidEpisode: ``word`` is not a string naming a known signal (UNSPECIFIED is none).
    """
    name = "" if word is None else word.upper()
    if name and not name.startswith("RUNTIME_SIGNAL_"):
        name = f"RUNTIME_SIGNAL_{name}"
    names = RuntimeSignal.keys()
    if name not in names or name == "RUNTIME_SIGNAL_UNSPECIFIED":
        known = ", ".join(n.removeprefix("RUNTIME_SIGNAL_").lower() for n in names[1:])
        shown = preview(word) if word is not None else "a non-string value"
        raise InvalidEpisode(f"{field} must be one of {known}, got {shown}")
    return RuntimeSignal.Value(name)


def runtime_signal_of(descriptor: EpisodeDescriptor) -> RuntimeSignal.ValueType:
    """The runtime signal a descriptor states (R-MSG-9, R-W-4): the field, else
    ``metadata.runtime_signal``, else COMPLETED.

    Raises:
        InvalidEpisode: ``metadata.runtime_signal`` is not a known signal, or it names another
            signal than the field does (which one the runtime meant cannot be told).
    """
    field = descriptor.runtime_signal if descriptor.HasField("runtime_signal") else None
    fields = descriptor.metadata.fields
    if RUNTIME_SIGNAL_METADATA_KEY not in fields:
        return RUNTIME_SIGNAL_COMPLETED if field is None else field
    raw = fields[RUNTIME_SIGNAL_METADATA_KEY]
    word = raw.string_value if raw.WhichOneof("kind") == "string_value" else None
    value = runtime_signal_named(word, "metadata.runtime_signal")
    if field is not None and field != value:
        raise InvalidEpisode("metadata.runtime_signal names another signal than runtime_signal")
    return value
