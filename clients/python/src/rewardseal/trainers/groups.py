"""Trainer-side rules shared by every adapter (docs/spec.md §11).

A batch of samples is scored into :class:`SampleResult` rows, one per sample, whatever happened
to each (a verified receipt, a worker error, an unreachable worker): the metadata columns are
therefore always aligned with the batch (R-T-3). :func:`fill_unscored` turns the per-sample
scalars into trainer rewards without ever writing 0.0 for an unscored sample (R-T-1),
:func:`enforce_certified` stops a run that requires certified rewards (R-T-2), and
:func:`stop_on_setup_errors` stops a run on a per-sample error that is not the sample's own:
a setup bug, or a receipt that answers another request (``ReceiptMismatch``: a misrouted or
attacked link). Paying such a sample would pay the wrong episode, and filling it from its
group's mean would hide the fault while training goes on.
"""

from __future__ import annotations

import secrets
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rewardseal.core.errors import (
    CertificationRefused,
    Code,
    ReceiptMismatch,
    RewardSealError,
    Unavailable,
    ValidationError,
)
from rewardseal.core.judging.receipt_findings import findings_text
from rewardseal.rpc.worker_client import ReceiptOrError, VerifiedReceipt
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateState, RewardOutcome

__all__ = [
    "BatchTally",
    "DEVELOPMENT_ONLY",
    "is_setup_error",
    "is_transient",
    "ERROR_OUTCOME",
    "METADATA_COLUMNS",
    "SampleResult",
    "contiguous_groups",
    "column",
    "enforce_certified",
    "fill_unscored",
    "metadata_columns",
    "mint_episode_id",
    "sample_results",
    "stop_on_setup_errors",
    "tally",
]

ERROR_OUTCOME: Final = "ERROR"
"""The outcome column of a sample that has no receipt (the worker refused it or was unreachable)."""
DEVELOPMENT_ONLY: Final = "development_only"
"""The scope column of a receipt that is not certified (or of every receipt when not required)."""
METADATA_COLUMNS: Final = (
    "reward_outcome",
    "reward_certified",
    "reward_calibration_scope",
    "reward_certificate_state",
    "reward_unscored",
    "reward_episode_id",
    "reward_error",
    "reward_findings",
)
"""The per-sample metadata columns, in the order :func:`metadata_columns` returns them."""

# A call failing with these codes is a passing outage: its samples are unscored, the run goes on.
_TRANSIENT_CODES: Final = frozenset({Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED})
# Refused for these, every sample would be refused alike: a setup bug, which must stop the run
# rather than turn a whole batch into unscored samples.
_SETUP_CODES: Final = frozenset({Code.UNAUTHENTICATED, Code.PERMISSION_DENIED})
_SETUP_REASONS: Final = frozenset({"contract_mismatch"})

_OUTCOME_PREFIX = "REWARD_OUTCOME_"
_STATE_PREFIX = "CERTIFICATE_STATE_"
_SCOPE_PREFIX = "CALIBRATION_SCOPE_"


def _enum_name(name: str, prefix: str) -> str:
    return name[len(prefix) :] if name.startswith(prefix) else name


@dataclass(frozen=True)
class SampleResult:
    """What one sample of a batch got: a verified receipt, or the error that stands in for one.

    ``scalar`` is None for every sample without a reward: an unscored outcome
    (RECONCILIATION_REQUIRED, FAILED_PLATFORM) and every error. It is never 0.0 for those.
    """

    episode_id: str
    receipt: VerifiedReceipt | None
    error: RewardSealError | None

    @property
    def scalar(self) -> float | None:
        """The receipt's scalar, or None when there is none to pay."""
        return None if self.receipt is None else self.receipt.scalar

    @property
    def unscored(self) -> bool:
        """True when this sample must be dropped from its group, never paid 0.0."""
        return self.scalar is None

    @property
    def paid(self) -> bool:
        """True when the receipt pays a positive scalar: what "paid" means everywhere (a 0.0
        receipt, a wrong effect, is scored and not paid; an unscored sample is never paid)."""
        return self.scalar is not None and self.scalar > 0

    @property
    def outcome(self) -> str:
        """``VERIFIED``, ``WRONG_EFFECT``, ... or ``ERROR`` when there is no receipt."""
        if self.receipt is None:
            return ERROR_OUTCOME
        return _enum_name(RewardOutcome.Name(self.receipt.receipt.reward_outcome), _OUTCOME_PREFIX)

    @property
    def certified(self) -> bool:
        """The receipt's own ``certified`` (False without a receipt)."""
        return self.receipt is not None and self.receipt.receipt.certified

    @property
    def certificate_state(self) -> str:
        """``CURRENT``, ``EXPIRED``, ``REVOKED``, ``ABSENT``, ... or ``""`` without a receipt."""
        if self.receipt is None:
            return ""
        return _enum_name(
            CertificateState.Name(self.receipt.receipt.certificate_state), _STATE_PREFIX
        )

    def scope(self, *, require_certified: bool) -> str:
        """The calibration scope a certified receipt states, else ``development_only``.

        With ``require_certified=False`` every receipt is logged as development only (R-T-2).
        """
        if self.receipt is None:
            return ""
        if not require_certified or not self.certified:
            return DEVELOPMENT_ONLY
        scope = self.receipt.receipt.calibration_scope
        return _enum_name(CalibrationScope.Name(scope), _SCOPE_PREFIX).lower()

    @property
    def findings(self) -> str:
        """The receipt's findings as words (``effect:code(fields)``, space-separated; R-MSG-12):
        ``""`` when verified or without a receipt."""
        return "" if self.receipt is None else findings_text(self.receipt.findings)

    @property
    def error_reason(self) -> str:
        """The error's reason (``unavailable``, ``identity_busy``, ...), ``""`` with a receipt."""
        return "" if self.error is None else self.error.reason


def is_transient(error: RewardSealError) -> bool:
    """True for a passing outage (worker unreachable, deadline exceeded): unscore, go on."""
    return error.code in _TRANSIENT_CODES


def is_setup_error(error: RewardSealError) -> bool:
    """True for an error that must stop the run rather than unscore a sample.

    Errors every sample would get (bad token, no permission, wrong contract), and a receipt
    answering another request (``ReceiptMismatch``): the link to the worker is misrouted or
    attacked, so no answer on it can be trusted to belong to its sample.
    """
    return (
        error.code in _SETUP_CODES
        or error.reason in _SETUP_REASONS
        or isinstance(error, ReceiptMismatch)
    )


def stop_on_setup_errors(rows: Sequence[SampleResult]) -> None:
    """Raise the first row's error that :func:`is_setup_error` says must stop the run.

    Call it before paying or filling a batch: such a row must never become a group fill.
    """
    for row in rows:
        if row.error is not None and is_setup_error(row.error):
            raise row.error


def sample_results(
    episode_ids: Sequence[str], answers: Sequence[ReceiptOrError | None]
) -> list[SampleResult]:
    """Pair each episode id with its answer; ``None`` (never asked) becomes an error row.

    Raises ValidationError when the lengths differ: a misaligned batch is a bug, not an outcome.
    """
    if len(episode_ids) != len(answers):
        raise ValidationError(
            f"{len(answers)} answers for {len(episode_ids)} episodes: the batch is misaligned"
        )
    rows: list[SampleResult] = []
    for episode_id, answer in zip(episode_ids, answers, strict=True):
        if isinstance(answer, VerifiedReceipt):
            rows.append(SampleResult(episode_id=episode_id, receipt=answer, error=None))
        elif answer is None:
            missing = Unavailable("no answer for this episode")
            rows.append(SampleResult(episode_id=episode_id, receipt=None, error=missing))
        else:
            rows.append(SampleResult(episode_id=episode_id, receipt=None, error=answer))
    return rows


def contiguous_groups(count: int, group_size: int) -> list[int]:
    """Group ids for a batch laid out as consecutive groups of ``group_size`` (TRL's layout)."""
    if group_size < 1:
        raise ValidationError(f"group size must be at least 1, got {group_size}")
    if count % group_size:
        raise ValidationError(
            f"a batch of {count} samples is not a whole number of groups of {group_size}"
        )
    return [index // group_size for index in range(count)]


def fill_unscored(
    scalars: Sequence[float | None], groups: Sequence[Hashable]
) -> list[float | None]:
    """R-T-1: every unscored sample takes the mean of its group's scored samples.

    Its advantage is then zero, so it adds no gradient. A group with no scored sample stays
    all None: there is nothing to compare it with, and 0.0 would be a made-up reward.
    """
    if len(scalars) != len(groups):
        raise ValidationError(f"{len(scalars)} scalars for {len(groups)} group ids")
    scored: dict[Hashable, list[float]] = {}
    for value, group in zip(scalars, groups, strict=True):
        if value is not None:
            scored.setdefault(group, []).append(value)
    means = {group: sum(values) / len(values) for group, values in scored.items()}
    return [
        value if value is not None else means.get(group)
        for value, group in zip(scalars, groups, strict=True)
    ]


def enforce_certified(rows: Sequence[SampleResult], *, require_certified: bool) -> None:
    """R-T-2: with ``require_certified``, a scored receipt that is not certified stops the run.

    Raises CertificationRefused naming the first offending episode, its certificate state and
    the receipt's own refusal sentences. Unscored samples and errors carry no reward to certify.
    """
    if not require_certified:
        return
    for row in rows:
        if row.receipt is None or row.unscored or row.certified:
            continue
        refusals = "; ".join(row.receipt.receipt.certification_refusals) or "no reason given"
        raise CertificationRefused(
            f"episode {row.episode_id!r} got a reward that is not certified "
            f"(certificate {row.certificate_state or 'unknown'}): {refusals}"
        )


def metadata_columns(
    rows: Sequence[SampleResult], *, require_certified: bool
) -> dict[str, list[Any]]:
    """R-T-3: one entry per sample in every column of :data:`METADATA_COLUMNS`."""
    return {
        "reward_outcome": [row.outcome for row in rows],
        "reward_certified": [row.certified for row in rows],
        "reward_calibration_scope": [
            row.scope(require_certified=require_certified) for row in rows
        ],
        "reward_certificate_state": [row.certificate_state for row in rows],
        "reward_unscored": [row.unscored for row in rows],
        "reward_episode_id": [row.episode_id for row in rows],
        "reward_error": [row.error_reason for row in rows],
        "reward_findings": [row.findings for row in rows],
    }


@dataclass(frozen=True)
class BatchTally:
    """One batch counted in the words the metrics and the examples use, each meaning one thing.

    ``paid``: receipts with a positive scalar; ``scored``: receipts with a scalar, 0.0 included
    (``paid`` of them paid); ``unscored``: samples without one (dropped, never paid 0.0);
    ``certified``: receipts certified. ``paid_share``/``scored_share``/``unscored_share`` are
    TRL's ``rewardseal/*_share`` metrics.
    """

    completions: int
    paid: int
    scored: int
    unscored: int
    certified: int

    def share(self, count: int) -> float:
        """``count`` as a share of the batch (0.0 for an empty batch)."""
        return count / self.completions if self.completions else 0.0

    @property
    def paid_share(self) -> float:
        return self.share(self.paid)

    @property
    def scored_share(self) -> float:
        return self.share(self.scored)

    @property
    def unscored_share(self) -> float:
        return self.share(self.unscored)

    def line(self) -> str:
        """``8 completions: 2 paid (reward > 0), 8 scored, 0 unscored, 8 certified``."""
        return (
            f"{self.completions} completions: {self.paid} paid (reward > 0), "
            f"{self.scored} scored, {self.unscored} unscored, {self.certified} certified"
        )

    def __add__(self, other: BatchTally) -> BatchTally:
        return BatchTally(
            self.completions + other.completions,
            self.paid + other.paid,
            self.scored + other.scored,
            self.unscored + other.unscored,
            self.certified + other.certified,
        )


def tally(rows: Sequence[SampleResult]) -> BatchTally:
    """Count a batch's rows (:class:`BatchTally`)."""
    return BatchTally(
        completions=len(rows),
        paid=sum(1 for row in rows if row.paid),
        scored=sum(1 for row in rows if not row.unscored),
        unscored=sum(1 for row in rows if row.unscored),
        certified=sum(1 for row in rows if row.certified),
    )


def mint_episode_id(prefix: str, step: int, index: int) -> str:
    """R-T-4: a fresh episode id for one completion (a dataset column alone collides).

    ``prefix`` is usually the dataset row's own id; the step, the position in the batch and 48
    random bits make the id unique per completion, also across restarts of a run.
    """
    if step < 0 or index < 0:
        raise ValidationError("step and index must not be negative")
    return f"{prefix}.u{step}.c{index}.{secrets.token_hex(6)}"


def column(kwargs: Mapping[str, Any], name: str, count: int) -> list[Any] | None:
    """A per-sample column from a trainer's keyword arguments, checked for length (or None)."""
    values = kwargs.get(name)
    if values is None:
        return None
    values = list(values)
    if len(values) != count:
        raise ValidationError(f"column {name!r} has {len(values)} entries for {count} samples")
    return values
