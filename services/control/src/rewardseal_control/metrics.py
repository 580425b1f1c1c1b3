"""The control plane's Prometheus metrics (``serve --metrics-port``; docs/operations.md lists
them).

Besides the RPC counts and latencies every server has (:mod:`rewardseal_server.metrics`):

* ``rewardseal_control_receipts_recorded_total{outcome, certified}``: receipts newly stored in
  the index (a resend of one already stored is not counted again);
* ``rewardseal_control_admin_actions_total{action}``: admin actions that changed something or
  were recorded in the audit log (keys, certificates, revocations);
* read at scrape time: the version of the revocation list this control plane serves, its age and
  the time left before it expires (the refresher re-signs it at half its lifetime).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from prometheus_client import Counter

from rewardseal.core.clock import utc_now
from rewardseal.core.receipts import OpenedReceipt
from rewardseal_control.service import ControlPlaneServicer
from rewardseal_server.metrics import Sample, ScrapeGauges, ServiceMetrics, receipt_labels

NAMESPACE = "rewardseal_control"


class ControlMetrics(ServiceMetrics):
    """The metrics of one control plane server."""

    def __init__(self) -> None:
        super().__init__(NAMESPACE)
        self.receipts = Counter(
            "receipts_recorded",
            "Receipts newly stored in the receipt index, by reward outcome and certified.",
            ("outcome", "certified"),
            namespace=NAMESPACE,
            registry=self.registry,
        )
        self.admin_actions = Counter(
            "admin_actions",
            "Admin actions written to the audit log, by action.",
            ("action",),
            namespace=NAMESPACE,
            registry=self.registry,
        )

    def count_recorded(self, receipts: Sequence[OpenedReceipt]) -> None:
        """Count receipts the index stored now (the servicer's ``on_recorded``)."""
        for opened in receipts:
            receipt = opened.receipt
            self.receipts.labels(*receipt_labels(receipt.reward_outcome, receipt.certified)).inc()

    def count_action(self, action: str) -> None:
        """Count one audited admin action (the servicer's ``on_admin_action``)."""
        self.admin_actions.labels(action).inc()

    def watch(
        self, servicer: ControlPlaneServicer, *, clock: Callable[[], datetime] = utc_now
    ) -> None:
        """Feed the counters from ``servicer`` and register the revocation-list gauges."""
        servicer.on_recorded = self.count_recorded
        servicer.on_admin_action = self.count_action

        def version() -> Iterable[Sample]:
            head = servicer.revocation_head
            return [((), float(head.version))] if head is not None else []

        def age() -> Iterable[Sample]:
            head = servicer.revocation_head
            return [((), (clock() - head.issued_at).total_seconds())] if head is not None else []

        def expires_in() -> Iterable[Sample]:
            head = servicer.revocation_head
            return [((), (head.expires_at - clock()).total_seconds())] if head is not None else []

        for name, documentation, read in (
            ("version", "Version of the signed revocation list served now.", version),
            ("age_seconds", "Seconds since the served revocation list was signed.", age),
            (
                "expires_in_seconds",
                "Seconds until the served revocation list expires (re-signed at half its life).",
                expires_in,
            ),
        ):
            self.registry.register(
                ScrapeGauges(f"{NAMESPACE}_revocation_list_{name}", documentation, (), read)
            )
