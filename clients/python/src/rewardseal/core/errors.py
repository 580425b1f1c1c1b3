"""The one error hierarchy of rewardseal (R-VAL-7, docs/spec.md §8).

Every error knows its status code (:class:`Code`, the numbers of ``google.rpc.Code``) and its
``ErrorInfo.reason`` so that the services map a domain error to ``google.rpc.Status`` in exactly
one place (:mod:`rewardseal.rpc.status`). The codes are plain numbers here, not gRPC's enum, so the
core rules import no transport. Raise the most specific class; pass
``reason=`` only where docs/spec.md §8 names a finer reason than the class default.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

ERROR_DOMAIN = "rewardseal"


class Code(enum.IntEnum):
    """A status code: the names and numbers of ``google.rpc.Code`` (and of ``grpc.StatusCode``)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


PREVIEW_LIMIT = 64
"""Most characters of caller-supplied text an error message quotes (see :func:`preview`)."""


def preview(value: object, limit: int = PREVIEW_LIMIT, *, quoted: bool = True) -> str:
    """At most ``limit`` characters of ``value`` (its ``repr`` unless ``quoted`` is False), for
    quoting caller-supplied input in an error message.

    Error messages travel back in gRPC trailers, which have a size limit: quoting a 20 kB key
    whole turns an INVALID_ARGUMENT into RESOURCE_EXHAUSTED, and echoes hostile text into logs.
    Longer text is cut and its full length stated, so the message stays short but says why.
    ``quoted=False`` suits text the service built itself from checked parts (a field path).
    """
    text = value if isinstance(value, str) else str(value)
    shown = text if len(text) <= limit else text[:limit]
    shown = repr(shown) if quoted else shown
    return shown if len(text) <= limit else f"{shown}... ({len(text)} characters)"


class RewardSealError(Exception):
    """Base of every rewardseal error."""

    code: Code = Code.INTERNAL
    reason: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})


class ValidationError(RewardSealError):
    """A contract, certificate, receipt or descriptor breaks a rule of docs/spec.md §5."""

    code = Code.INVALID_ARGUMENT
    reason = "invalid_argument"


class InvalidEpisode(ValidationError):
    """A descriptor is malformed: bad id, UNSPECIFIED enum, forbidden metadata key."""

    reason = "invalid_episode"


class InvalidTaskParameters(ValidationError):
    """Task parameters missing, extra, ill-typed or out of range for the contract's declaration,
    or a descriptor repeating other values than the begin bound (R-W-18); ``metadata
    ["parameter"]`` names the parameter."""

    reason = "invalid_task_parameters"


class ContractMismatch(ValidationError):
    """A descriptor names another contract digest, task or environment."""

    reason = "contract_mismatch"


class IdentityMissing(ValidationError):
    """No oracle identity in the descriptor, its metadata, or a registration (R-W-2)."""

    reason = "identity_missing"


class IdentityMismatch(ValidationError):
    """The identity's keys differ from the contract's identity_keys, or a value is empty (R-W-2)."""

    reason = "identity_mismatch"


class IdentityConflict(ValidationError):
    """The descriptor names another subject than the BeginEpisode registration (R-W-2)."""

    reason = "identity_conflict"


class PolicyUpdateRegressed(ValidationError):
    """A descriptor's policy update is below the window its contract's ledger accepts: more
    than the worker's ``max_policy_lag`` below the highest scored (R-W-7; ErrorInfo metadata
    ``highest``, ``max_policy_lag``, ``lowest_accepted``)."""

    reason = "policy_update_regressed"


class PolicyUpdateJump(ValidationError):
    """A descriptor's policy update is further above its contract's highest than one call may
    move it (a single call could otherwise expire the certificate for every later episode)."""

    reason = "policy_update_jump"


class CertificationRefused(ValidationError):
    """Something claims certified=true where the rules forbid it (R-VAL-2)."""

    reason = "certification_refused"


class StaleRevocationList(ValidationError):
    """A revocation list is older than one held, past its expiry, or contradicts one (R-C-4)."""

    reason = "stale_revocation_list"


class SignatureError(RewardSealError):
    """No trusted signature verifies over the exact payload (R-SIG-2)."""

    code = Code.INVALID_ARGUMENT
    reason = "signature_invalid"


class ReceiptMismatch(SignatureError):
    """A validly signed receipt answers another request (episode, update, checkpoint, contract)."""

    reason = "receipt_mismatch"


class DuplicateEpisode(RewardSealError):
    """The episode already has a receipt; metadata carries its receipt_id (R-W-8)."""

    code = Code.ALREADY_EXISTS
    reason = "duplicate_episode"


class IdentityBusy(RewardSealError):
    """The identity already has an open episode (R-W-3)."""

    code = Code.FAILED_PRECONDITION
    reason = "identity_busy"


class Unscored(RewardSealError):
    """A caller that cannot carry 'no score' asked for one on an unscored episode (R-W-9)."""

    code = Code.FAILED_PRECONDITION
    reason = "unscored"


class NotFound(RewardSealError):
    """The receipt, contract or certificate is unknown."""

    code = Code.NOT_FOUND
    reason = "not_found"


class Unauthenticated(RewardSealError):
    """The bearer token is missing or wrong (R-W-10)."""

    code = Code.UNAUTHENTICATED
    reason = "unauthenticated"


class PermissionDenied(RewardSealError):
    """The credential presented may not make this call (an admin RPC, or outside its role)."""

    code = Code.PERMISSION_DENIED
    reason = "permission_denied"


class KeyNotAdmitted(RewardSealError):
    """A receipt's signing key is registered at control but not yet admitted by an admin or an
    enrollment credential (R-C-10); retryable: admitting it lets the same receipt in."""

    code = Code.FAILED_PRECONDITION
    reason = "key_not_admitted"


class KeyNotBound(PermissionDenied):
    """A receipt's signing key is admitted but not bound to the receipt's contract (R-C-10)."""

    reason = "key_not_bound"


class CertificateUnknown(ValidationError):
    """A receipt names a certificate that control never issued for its contract and that its
    signing key did not register as its bundle certificate (R-C-5)."""

    reason = "certificate_unknown"


class Unavailable(RewardSealError):
    """The service is overloaded or a dependency other than the system of record is down."""

    code = Code.UNAVAILABLE
    reason = "unavailable"


class CannotListen(RewardSealError):
    """A server cannot bind its address (the port is in use by another process, the host is
    not an address of this machine, ...). A local start-up error: it never crosses the wire."""

    code = Code.UNAVAILABLE
    reason = "cannot_listen"


class DataDirInUse(RewardSealError):
    """Another worker holds the data directory's lock (R-W-15): two workers would share one key
    and one store. A local start-up error: it never crosses the wire."""

    code = Code.FAILED_PRECONDITION
    reason = "data_dir_in_use"


class SystemOfRecordUnavailable(Unavailable):
    """The system of record did not answer the worker's start-up probe (R-W-16): every episode
    would be FAILED_PLATFORM. A local start-up error: it never crosses the wire (a read that
    fails while serving is an outcome, never an RPC error)."""

    reason = "sor_unavailable"


class IntegritySpecInvalid(ValidationError):
    """A reward-system, retention-protocol or integrity-profile document has blockers (R-I-1)."""

    reason = "integrity_spec_invalid"


class RewardMappingError(ValidationError):
    """A raw reward is not finite or lies outside its normalization range (R-I-1 mapping)."""

    reason = "reward_mapping_failed"


class ShardCorrupt(ValidationError):
    """A signal shard's rows do not hash to its manifest, or the manifest is malformed (R-I-3)."""

    reason = "shard_corrupt"


class ShardSealed(RewardSealError):
    """Rows were appended to a boundary whose signal shard is sealed already (R-I-3)."""

    code = Code.FAILED_PRECONDITION
    reason = "shard_sealed"


class AuditStateConflict(RewardSealError):
    """An audit is not in a state the request needs: cancelling a finished audit, retrying a
    queued or running one, reading the metrics or bundle of an undecided one (R-I-7/8)."""

    code = Code.FAILED_PRECONDITION
    reason = "audit_state_conflict"


class ShardAlreadyAudited(RewardSealError):
    """StartAudit of a shard that has an audit already: auditing the same evidence again is
    RetryAudit, the admin's (R-I-10); metadata ``audit_id`` (the shard's first audit), ``state``."""

    code = Code.FAILED_PRECONDITION
    reason = "shard_already_audited"


class BindingMismatch(ValidationError):
    """An audit under another profile, protocol or reward system than the run's binding, which
    its first audit fixed (R-I-10); metadata ``field`` (``profile``, ``protocol`` or ``system``),
    ``bound`` (the run's revision) and ``given``."""

    reason = "binding_mismatch"


class ReviewRefused(ValidationError):
    """A decision review lacks a reason, names an unknown action, or forks without a checkpoint."""

    reason = "review_refused"


class DecisionSuperseded(RewardSealError):
    """A review names a decision that is no longer the current one, or the run has stopped."""

    code = Code.FAILED_PRECONDITION
    reason = "decision_superseded"


class BindingRefused(RewardSealError):
    """A training binding is incomplete or not gating-eligible; metadata lists blockers (R-I-9)."""

    code = Code.FAILED_PRECONDITION
    reason = "binding_refused"


class IntegrityBufferFull(RewardSealError):
    """The trainer's on-disk signal buffer reached its row or byte limit while control was away
    (R-I-3); metadata ``rows``, ``bytes`` and ``refused_rows``. Nothing buffered is dropped."""

    code = Code.RESOURCE_EXHAUSTED
    reason = "integrity_buffer_full"


class IntegrityHalted(RewardSealError):
    """A run may not (re)start or go on: its gate (R-I-10) is a pause nobody has reviewed yet, a
    stop (final), or a fork from another checkpoint (R-I-8); metadata ``action``, ``audit_id``."""

    code = Code.FAILED_PRECONDITION
    reason = "integrity_halted"


class InvalidSubject(ValidationError):
    """An attestation's checkpoint subjects are unusable: none, an empty or repeated name, a
    digest that is not 64 lowercase hex digits (R-C-15; metadata ``subject``, the name)."""

    reason = "invalid_subject"


class NothingToAttest(RewardSealError):
    """An attestation's scope holds no receipt: no receipt of the contracts, checkpoint ids and
    policy updates asked for is in the index (R-C-15; metadata ``policy_update_first``,
    ``policy_update_last``)."""

    code = Code.FAILED_PRECONDITION
    reason = "nothing_to_attest"


class AttestationError(ValidationError):
    """A reward attestation does not verify (R-A-4); ``reason`` says which check failed:
    ``bad_signature``, ``subject_mismatch``, ``merkle_mismatch``, ``certificate_revoked`` or
    ``malformed``. A local (command line, library) error: it never crosses the wire."""

    reason = "malformed"
