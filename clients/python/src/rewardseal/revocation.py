"""Signed revocation lists and the follower that refuses rollback and freeze (R-C-4).

The control plane signs every :class:`RevocationList` into a DSSE envelope with its
organization key. Whoever acts on revocations (the worker, a trainer) feeds each list it
receives to a :class:`RevocationFollower`, which

* verifies the signature over the exact payload bytes *before* parsing anything;
* refuses a list whose version is below the highest it has accepted, or below the ``floor`` its
  owner persisted from an earlier run (rollback: an attacker who replays an old list would
  otherwise un-revoke a certificate, also right after a restart);
* refuses a list with the same version but different content (a signer that says two things
  under one version cannot be followed);
* refuses a list that drops an entry an older list carried: a revoked certificate, or a
  revoked contract or checker configuration (revocation is permanent);
* refuses a list past its own expiry (freeze: an attacker who withholds new lists would
  otherwise keep a follower on a list that predates a revocation forever).

An entry revokes one certificate (``certificate_id``), or every certificate of one contract
(``reward_contract_digest``) or of one checker configuration (``checker_configuration_digest``),
whenever it was issued (R-C-13). :func:`revokes` answers for a certificate from a held list;
``score()`` takes the list and does the same.

Refusals raise :class:`~rewardseal.core.errors.SignatureError` for signatures and
:class:`~rewardseal.core.errors.StaleRevocationList` for rollback, conflict and freeze; the follower
keeps the list it held before. A follower whose list has expired is not :meth:`fresh`, and its
owner should then treat every certificate as not current until a fresh list arrives.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from rewardseal.core.clock import timestamp
from rewardseal.core.errors import SignatureError, StaleRevocationList, ValidationError
from rewardseal.core.signing import (
    REVOCATION_LIST_PAYLOAD_TYPE,
    SigningKey,
    TrustSet,
    sign_envelope,
)
from rewardseal.core.validation import parse_strict, validate_digest, validate_id, validate_key_id
from rewardseal.v1.certificate_pb2 import RevocationEntry, RevocationList, RewardCertificate
from rewardseal.v1.receipt_pb2 import SignedEnvelope

__all__ = [
    "CERTIFICATE",
    "CHECKER",
    "CONTRACT",
    "MAX_REASON_LENGTH",
    "RevocationFollower",
    "Scope",
    "build_revocation_list",
    "entry_scope",
    "expires_at",
    "open_revocation_list",
    "revokes",
    "revoking_entry",
    "sign_revocation_list",
    "validate_revocation_list",
]

MAX_REASON_LENGTH = 1024
"""Longest revocation reason a list may carry (a sentence for people, not a document)."""

ScopeKind = Literal["certificate", "contract", "checker"]
CERTIFICATE: Final = "certificate"
"""An entry that revokes one certificate (``certificate_id``)."""
CONTRACT: Final = "contract"
"""An entry that revokes every certificate of a contract (``reward_contract_digest``)."""
CHECKER: Final = "checker"
"""An entry that revokes every certificate of a checker configuration
(``checker_configuration_digest``)."""
Scope = tuple[ScopeKind, str]
"""What one entry revokes: its kind and the id or digest it names."""


def entry_scope(entry: RevocationEntry) -> Scope:
    """What ``entry`` revokes, checked: exactly one of its three targets is set, well formed.

    Raises:
        ValidationError: none or several of them are set, or the one set is malformed.
    """
    named: list[Scope] = []
    if entry.certificate_id:
        named.append((CERTIFICATE, entry.certificate_id))
    if entry.reward_contract_digest:
        named.append((CONTRACT, entry.reward_contract_digest))
    if entry.checker_configuration_digest:
        named.append((CHECKER, entry.checker_configuration_digest))
    if len(named) != 1:
        raise ValidationError(
            "a revocation entry names exactly one of certificate_id, reward_contract_digest "
            "and checker_configuration_digest"
        )
    kind, value = named[0]
    if kind == CERTIFICATE:
        validate_id(value, "revocation entry certificate_id")
    else:
        validate_digest(value, f"revocation entry {_FIELD[kind]}")
    return named[0]


_FIELD: Final[dict[str, str]] = {
    CERTIFICATE: "certificate_id",
    CONTRACT: "reward_contract_digest",
    CHECKER: "checker_configuration_digest",
}


def _describe(scope: Scope) -> str:
    kind, value = scope
    return f"certificate {value}" if kind == CERTIFICATE else f"every certificate of {kind} {value}"


def _scopes_of(certificate: RewardCertificate) -> tuple[Scope, Scope, Scope]:
    """Every scope an entry could name to revoke ``certificate``."""
    return (
        (CERTIFICATE, certificate.certificate_id),
        (CONTRACT, certificate.reward_contract_digest),
        (CHECKER, certificate.checker_configuration_digest),
    )


def revoking_entry(
    revocation_list: RevocationList, certificate: RewardCertificate
) -> RevocationEntry | None:
    """The first entry of ``revocation_list`` that revokes ``certificate`` (by its id, its
    contract or its checker configuration), or None.

    The list must be one the caller verified (:func:`open_revocation_list`, a follower's
    ``held``); this function reads it, it does not check its signature or freshness.
    """
    wanted = set(_scopes_of(certificate))
    for entry in revocation_list.entries:
        if _scope_or_none(entry) in wanted:
            return entry
    return None


def revokes(revocation_list: RevocationList, certificate: RewardCertificate) -> bool:
    """Whether the verified ``revocation_list`` revokes ``certificate`` (see
    :func:`revoking_entry`)."""
    return revoking_entry(revocation_list, certificate) is not None


def _scope_or_none(entry: RevocationEntry) -> Scope | None:
    try:
        return entry_scope(entry)
    except ValidationError:
        return None


def _sort_key(entry: RevocationEntry) -> tuple[str, str, str]:
    # Certificate id first: a list of certificate entries only sorts (and so serializes) as
    # it did before contract and checker entries existed; theirs (no id) sort first.
    return (entry.certificate_id, entry.reward_contract_digest, entry.checker_configuration_digest)


def _aware(now: datetime) -> datetime:
    # A naive "now" would compare against UTC instants as if it were UTC; refuse the ambiguity.
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now


def expires_at(revocation_list: RevocationList) -> datetime:
    """The instant (UTC) at and after which ``revocation_list`` is frozen and refused."""
    return revocation_list.expires_at.ToDatetime(tzinfo=UTC)


def build_revocation_list(
    *,
    version: int,
    entries: Iterable[RevocationEntry],
    issued_at: datetime,
    ttl: timedelta,
    issuer_key_id: str,
) -> RevocationList:
    """A validated revocation list, entries sorted by certificate id (then contract, then
    checker configuration digest).

    Sorting makes the payload a function of the set of revocations, not of the order a store
    returned them in, so re-signing the same set under the same version gives the same bytes.

    Raises:
        ValidationError: on a version below 1, a non-positive ``ttl``, a naive ``issued_at``, a
            bad id or digest, an entry naming none or several targets, a duplicate entry or an
            over-long reason.
    """
    if ttl <= timedelta(0):
        raise ValidationError(f"a revocation list needs a positive lifetime, not {ttl}")
    copies = sorted((_copy(entry) for entry in entries), key=_sort_key)
    revocation_list = RevocationList(
        version=version,
        issued_at=timestamp(issued_at, "issued_at"),
        expires_at=timestamp(issued_at + ttl, "expires_at"),
        entries=copies,
        issuer_key_id=issuer_key_id,
    )
    validate_revocation_list(revocation_list)
    return revocation_list


def _copy(entry: RevocationEntry) -> RevocationEntry:
    # Copy so the caller's messages are never moved into (and mutated by) the new list.
    copy = RevocationEntry()
    copy.CopyFrom(entry)
    return copy


def validate_revocation_list(revocation_list: RevocationList) -> None:
    """Refuse a list that breaks its own shape: version, times, ids, reasons, duplicates."""
    if revocation_list.version < 1:
        raise ValidationError("a revocation list version starts at 1")
    if not revocation_list.HasField("issued_at") or not revocation_list.HasField("expires_at"):
        raise ValidationError("a revocation list carries issued_at and expires_at")
    if expires_at(revocation_list) <= revocation_list.issued_at.ToDatetime(tzinfo=UTC):
        raise ValidationError("a revocation list must expire after it was issued")
    validate_key_id(revocation_list.issuer_key_id)
    seen: set[Scope] = set()
    for entry in revocation_list.entries:
        scope = entry_scope(entry)
        what = _describe(scope)
        if scope in seen:
            raise ValidationError(f"{what} is listed twice")
        seen.add(scope)
        if not entry.reason.strip() or len(entry.reason) > MAX_REASON_LENGTH:
            raise ValidationError(
                f"revocation of {what} needs a reason of 1-{MAX_REASON_LENGTH} characters"
            )
        if not entry.HasField("revoked_at"):
            raise ValidationError(f"revocation of {what} needs revoked_at")


def sign_revocation_list(revocation_list: RevocationList, key: SigningKey) -> SignedEnvelope:
    """Validate ``revocation_list`` and sign its exact deterministic bytes with ``key``.

    Raises:
        ValidationError: if the list is malformed or names another issuer key than ``key``.
    """
    validate_revocation_list(revocation_list)
    if revocation_list.issuer_key_id != key.key_id:
        raise ValidationError("the revocation list's issuer_key_id is not the signing key's id")
    payload = revocation_list.SerializeToString(deterministic=True)
    return sign_envelope(REVOCATION_LIST_PAYLOAD_TYPE, payload, key)


def open_revocation_list(envelope: SignedEnvelope, trust: TrustSet) -> RevocationList:
    """Verify, then parse, then validate one signed list; no history, no expiry check.

    Steps, in this order: a trusted key signs the exact payload bytes (nothing is parsed
    before); the payload parses with no unknown fields; the list passes
    :func:`validate_revocation_list`; the list names a key that signed it.

    Raises:
        SignatureError: if no trusted key signed the payload or the named issuer did not sign.
        ValidationError: if the payload is malformed.
    """
    verified = trust.verify(envelope, payload_type=REVOCATION_LIST_PAYLOAD_TYPE)
    revocation_list = parse_strict(RevocationList, verified.payload)
    validate_revocation_list(revocation_list)
    if revocation_list.issuer_key_id not in verified.key_ids:
        raise SignatureError("the revocation list's issuer_key_id did not sign it")
    return revocation_list


class RevocationFollower:
    """Holds the newest revocation list a trusted issuer signed, and refuses going back.

    Not thread-safe: give each follower one owner (one event loop or one lock).
    """

    def __init__(self, trust: TrustSet, *, floor: int = 0) -> None:
        """Follow lists signed by a key in ``trust`` (the organization's revocation keys).

        ``floor``: the highest version this follower's owner accepted before (kept across
        restarts); a list below it is a rollback even though nothing is held yet.

        Raises:
            ValueError: ``floor`` is negative.
        """
        if floor < 0:
            raise ValueError("floor must be at least 0")
        self._trust = trust
        self._floor = floor
        self._held: RevocationList | None = None
        self._revoked: frozenset[Scope] = frozenset()

    @property
    def held(self) -> RevocationList | None:
        """The newest accepted list (possibly expired by now), or None before the first."""
        return self._held

    @property
    def version(self) -> int:
        """The highest accepted version; 0 before the first list."""
        return self._held.version if self._held is not None else 0

    @property
    def floor(self) -> int:
        """The lowest version this follower may still accept: the held version, or the floor
        it was given while it holds nothing (a version its owner accepted before)."""
        return max(self._floor, self.version)

    def accept(self, envelope: SignedEnvelope, now: datetime) -> RevocationList:
        """Verify ``envelope`` and hold its list if it moves this follower forward.

        The same list delivered again (same version, same content, still fresh) is accepted and
        changes nothing, so a reconnecting watcher may be sent the head it already has.

        Raises:
            SignatureError: if no trusted key signed the exact payload.
            ValidationError: if the verified payload is malformed.
            StaleRevocationList: on rollback (a version below the held one), on conflict (the
                held version with different content, or a newer list that drops a revoked
                certificate, contract or checker configuration) and on freeze (``now`` at or
                past the list's ``expires_at``).
        """
        now = _aware(now)
        revocation_list = open_revocation_list(envelope, self._trust)
        version = revocation_list.version
        held = self._held
        if version < self._floor:
            # Nothing held yet (a restart), but a list this old was superseded before.
            raise StaleRevocationList(
                f"revocation list version {version} is older than version {self._floor} "
                "accepted before (rollback refused)",
                metadata=self._facts("rollback", version),
            )
        if held is not None:
            if version < held.version:
                raise StaleRevocationList(
                    f"revocation list version {version} is older than the held version "
                    f"{held.version} (rollback refused)",
                    metadata=self._facts("rollback", version),
                )
            if version == held.version and revocation_list != held:
                raise StaleRevocationList(
                    f"revocation list version {version} differs from the held list of the same "
                    "version (conflicting lists refused)",
                    metadata=self._facts("conflict", version),
                )
            listed = {entry_scope(entry) for entry in revocation_list.entries}
            dropped = sorted(self._revoked - listed)
            if dropped:
                kind, value = dropped[0]
                raise StaleRevocationList(
                    f"revocation list version {version} drops revoked {kind} {value} "
                    "(revocation is permanent)",
                    metadata=self._facts("conflict", version),
                )
        if now >= expires_at(revocation_list):
            raise StaleRevocationList(
                f"revocation list version {version} expired at "
                f"{expires_at(revocation_list).isoformat()} (frozen list refused)",
                metadata=self._facts("expired", version),
            )
        self._held = revocation_list
        self._revoked = frozenset(entry_scope(entry) for entry in revocation_list.entries)
        return revocation_list

    def _facts(self, problem: str, version: int) -> dict[str, str]:
        return {"problem": problem, "version": str(version), "held_version": str(self.floor)}

    def is_revoked(self, certificate_id: str) -> bool:
        """Whether the held list revokes ``certificate_id`` by name (an entry of its contract or
        checker configuration is :meth:`revokes`'s to answer: it needs the certificate).

        This answers from the last accepted list even after it expired: a revocation never
        lapses. Whether the list is still fresh enough to trust a *non*-revocation is
        :meth:`fresh`'s question.
        """
        return (CERTIFICATE, certificate_id) in self._revoked

    def revokes(self, certificate: RewardCertificate) -> bool:
        """Whether the held list revokes ``certificate``: by its id, its contract or its checker
        configuration (R-C-13); like :meth:`is_revoked`, also after the list expired."""
        return any(scope in self._revoked for scope in _scopes_of(certificate))

    def fresh(self, now: datetime) -> bool:
        """True while a list is held and ``now`` is before its expiry."""
        now = _aware(now)
        return self._held is not None and now < expires_at(self._held)
