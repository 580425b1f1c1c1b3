"""Which of control's per-receipt refusals are permanent (R-C-12): dead letter, or retry later.

``RecordReceipts`` answers each forwarded receipt on its own; a refused one carries an
``EpisodeError`` (a ``google.rpc.Code`` and an ``ErrorInfo`` reason). The forwarder asks
:func:`classify` what to do with it, by the pair (code, reason):

=======================  ===================  =========  ===================================
reason                   code                 kind       what control says
=======================  ===================  =========  ===================================
``duplicate_episode``    ALREADY_EXISTS       permanent  another receipt holds the episode
``signature_invalid``    INVALID_ARGUMENT     permanent  no active worker key verifies it
                                                         (a key control forgot: see below)
``not_found``            NOT_FOUND            permanent  control does not know the contract
``invalid_argument``     INVALID_ARGUMENT     permanent  the receipt breaks R-VAL (or its id
                                                         is recorded with other content)
``key_not_bound``        PERMISSION_DENIED    permanent  the signing key is not bound to the
                                                         receipt's contract
``certificate_unknown``  INVALID_ARGUMENT     permanent  the receipt names a certificate
                                                         control did not issue for it
``key_not_admitted``     FAILED_PRECONDITION  retryable  the key awaits an admin's approval
``unavailable``          UNAVAILABLE          retryable  control or its database is down
anything else            any                  retryable  unknown here: see below
=======================  ===================  =========  ===================================

A permanent refusal says the receipt itself will never be recorded as it is: resending it
changes nothing, so it leaves the outbox for the dead letter
(:mod:`rewardseal_worker.store.dead_letter`), where an operator lists it and, once the cause is
fixed (a contract registered, a key bound), retries it. A retryable one stays in the outbox
with backoff, as a failed call does. Whole-call failures and transport errors never reach this
module: the forwarder keeps every receipt of that call in the outbox.

Unknown pairs are retryable on purpose: failing toward keeping costs a resend every
``MAX_BACKOFF_SECONDS``; failing toward the dead letter would take a receipt out of forwarding
for a reason this worker cannot judge (a newer control's refusal, a known reason under an
unexpected code). A reason is matched with its code, so a known reason under another code is
unknown too.

``signature_invalid`` has one exception the forwarder settles, not this table: when control
does not hold this worker's own key (its database was reset), the refusal is about the key,
not the receipt, and registering the key again makes control take it
(:mod:`rewardseal_worker.key_refusals`); the forwarder then keeps the receipts.

"""

from __future__ import annotations

import enum
from typing import Final

import grpc

from rewardseal.core.errors import (
    CertificateUnknown,
    DuplicateEpisode,
    KeyNotAdmitted,
    KeyNotBound,
    NotFound,
    RewardSealError,
    SignatureError,
    Unavailable,
    ValidationError,
)
from rewardseal.v1.episode_pb2 import EpisodeError

__all__ = ["Refusal", "classify"]


class Refusal(enum.Enum):
    """What the forwarder does with a receipt control refused."""

    PERMANENT = "permanent"
    """Move it to the dead letter: resending it as it is can never succeed."""
    RETRYABLE = "retryable"
    """Keep it in the outbox and send it again later (backoff)."""


def _code(status: grpc.StatusCode) -> int:
    """The ``google.rpc.Code`` number of ``status`` (what ``EpisodeError.code`` carries)."""
    number: int = status.value[0]
    return number


def _pair(error: type[RewardSealError]) -> tuple[int, str]:
    """The (``google.rpc.Code`` number, reason) an error class travels as."""
    return _code(error.code), error.reason


_KINDS: Final[dict[tuple[int, str], Refusal]] = {
    _pair(DuplicateEpisode): Refusal.PERMANENT,
    _pair(SignatureError): Refusal.PERMANENT,
    _pair(NotFound): Refusal.PERMANENT,
    _pair(ValidationError): Refusal.PERMANENT,
    _pair(KeyNotBound): Refusal.PERMANENT,
    _pair(CertificateUnknown): Refusal.PERMANENT,
    _pair(KeyNotAdmitted): Refusal.RETRYABLE,
    _pair(Unavailable): Refusal.RETRYABLE,
}


def classify(error: EpisodeError) -> Refusal:
    """Permanent or retryable, by ``error``'s (code, reason); anything unknown is retryable."""
    return _KINDS.get((error.code, error.reason), Refusal.RETRYABLE)
