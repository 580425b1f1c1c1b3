"""The worker's Prometheus metrics (``serve --metrics-port``; docs/operations.md lists them).

Besides the RPC counts and latencies every server has (:mod:`rewardseal_server.metrics`):

* ``rewardseal_worker_receipts_total{outcome, certified}``: receipts answered (committed, and
  the grader's dry runs), counted in the scoring thread as each round ends;
* ``rewardseal_worker_batch_size{batcher}``: calls per micro-batch of unary calls
  (``scoring``, ``begin``);
* read at scrape time (in the metrics server's thread, never on the event loop): the outbox's
  depth and the age of its oldest row, the dead letter's rows (in all and by refusal reason,
  R-C-12), the revocation list's version and age, and the certificate in use with its state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from prometheus_client import Counter, Histogram

from rewardseal.core.certificates import state_name
from rewardseal.core.clock import utc_now
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt
from rewardseal_server.metrics import Sample, ScrapeGauges, ServiceMetrics, receipt_labels
from rewardseal_worker.control_link import ControlLink
from rewardseal_worker.engine import Scorer
from rewardseal_worker.store import WorkerStore

NAMESPACE = "rewardseal_worker"
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class WorkerMetrics(ServiceMetrics):
    """The metrics of one worker server (one process of ``serve --processes N``)."""

    def __init__(self) -> None:
        super().__init__(NAMESPACE)
        self.receipts = Counter(
            "receipts",
            "Receipts answered, by reward outcome and whether they are certified.",
            ("outcome", "certified"),
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "batch_size",
            "Calls per micro-batch of unary calls, by batcher (scoring, begin).",
            ("batcher",),
            namespace=NAMESPACE,
            registry=self.registry,
            buckets=BATCH_BUCKETS,
        )

    def count_receipts(self, receipts: Sequence[RewardEvidenceReceipt]) -> None:
        """Count answered receipts (the scorer's ``on_receipts``; any thread)."""
        for receipt in receipts:
            self.receipts.labels(*receipt_labels(receipt.reward_outcome, receipt.certified)).inc()

    def observe_batch(self, batcher: str, size: int) -> None:
        """Observe one micro-batch's size (the scorer's ``observe_batches``)."""
        self.batch_size.labels(batcher).observe(size)

    def watch(
        self,
        scorer: Scorer,
        store: WorkerStore,
        control: ControlLink | None,
        *,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        """Feed the counters from ``scorer`` and register the scrape-time gauges."""
        scorer.on_receipts = self.count_receipts
        scorer.observe_batches(self.observe_batch)
        gauges = [_certificate_gauge(scorer)]
        if control is not None:
            gauges += (
                _outbox_gauges(store, clock)
                + _dead_letter_gauges(store)
                + _revocation_gauges(control, clock)
            )
        for gauge in gauges:
            self.registry.register(gauge)


def _certificate_gauge(scorer: Scorer) -> ScrapeGauges:
    def read() -> Iterable[Sample]:
        health = scorer.health()  # one store read: where training is, for the state
        name = health.certificate_id or "none"
        return [((name, state_name(health.certificate_state)), 1.0)]

    return ScrapeGauges(
        f"{NAMESPACE}_certificate_in_use",
        "1 for the certificate receipts are issued under now, with its state at the contract's "
        "highest scored policy update (certificate_id none, state ABSENT: uncertified).",
        ("certificate_id", "state"),
        read,
    )


def _outbox_gauges(store: WorkerStore, clock: Callable[[], datetime]) -> list[ScrapeGauges]:
    def depth() -> Iterable[Sample]:
        return [((), float(store.outbox_backlog().depth))]

    def oldest_age() -> Iterable[Sample]:
        oldest = store.outbox_backlog().oldest
        age = 0.0 if oldest is None else max(0.0, (clock() - oldest).total_seconds())
        return [((), age)]

    return [
        ScrapeGauges(
            f"{NAMESPACE}_outbox_depth",
            "Receipts waiting in the outbox to be forwarded to control.",
            (),
            depth,
        ),
        ScrapeGauges(
            f"{NAMESPACE}_outbox_oldest_age_seconds",
            "Seconds since the oldest receipt waiting in the outbox was committed (0: empty).",
            (),
            oldest_age,
        ),
    ]


def _dead_letter_gauges(store: WorkerStore) -> list[ScrapeGauges]:
    def depth() -> Iterable[Sample]:
        return [((), float(sum(store.dead_letter_counts().values())))]

    def by_reason() -> Iterable[Sample]:
        return [((reason,), float(n)) for reason, n in sorted(store.dead_letter_counts().items())]

    return [
        ScrapeGauges(
            f"{NAMESPACE}_dead_letter_depth",
            "Receipts control refused permanently, kept in the dead letter and no longer sent "
            "(R-C-12; `rewardseal-worker outbox dead-letter list`).",
            (),
            depth,
        ),
        ScrapeGauges(
            f"{NAMESPACE}_dead_letter_receipts",
            "Receipts in the dead letter by control's refusal reason (absent: none).",
            ("reason",),
            by_reason,
        ),
    ]


def _revocation_gauges(control: ControlLink, clock: Callable[[], datetime]) -> list[ScrapeGauges]:
    def version() -> Iterable[Sample]:
        held = control.revocation_list
        return [((), float(held.version if held is not None else 0))]

    def age() -> Iterable[Sample]:
        held = control.revocation_list
        if held is None or not held.HasField("issued_at"):
            return []
        return [((), (clock() - held.issued_at.ToDatetime(tzinfo=clock().tzinfo)).total_seconds())]

    def expires_in() -> Iterable[Sample]:
        held = control.revocation_list
        if held is None or not held.HasField("expires_at"):
            return []
        return [((), (held.expires_at.ToDatetime(tzinfo=clock().tzinfo) - clock()).total_seconds())]

    return [
        ScrapeGauges(
            f"{NAMESPACE}_revocation_list_version",
            "Version of the verified revocation list held (0: none yet).",
            (),
            version,
        ),
        ScrapeGauges(
            f"{NAMESPACE}_revocation_list_age_seconds",
            "Seconds since the held revocation list was issued (absent before the first).",
            (),
            age,
        ),
        ScrapeGauges(
            f"{NAMESPACE}_revocation_list_expires_in_seconds",
            "Seconds until the held revocation list expires; at 0 receipts stop being certified.",
            (),
            expires_in,
        ),
    ]
