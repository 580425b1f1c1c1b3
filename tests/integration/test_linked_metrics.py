"""/metrics of a worker joined to a control plane (both real servers, metrics on port 0): the
outbox backlog and the revocation list as the worker holds them, the receipts control recorded,
its admin actions and the revocation list it serves; the outbox depth counts receipts that wait
while control is down."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.linked_stack import (
    issue_certificate,
    link_of,
    score_honest,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)
from support.metrics_scrape import eventually_value, scrape, value
from support.worker_stack import stop_stack

W = "rewardseal_worker_"
C = "rewardseal_control_"


async def test_worker_and_control_metrics_follow_the_link(tmp_path: Path, data_dir: Path) -> None:
    control = await start_control_plane(tmp_path, metrics_port=0)
    stopped = False
    stack = await start_linked_worker(data_dir, control.target, control.key, metrics_port=0)
    try:
        assert control.metrics is not None
        assert stack.app.metrics is not None
        worker_url, control_url = stack.app.metrics.url, control.metrics.url
        await asyncio.wait_for(link_of(stack).registered.wait(), 20)
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, certificate_id)
        for index in range(2):
            assert (await score_honest(stack, index)).receipt.certified
        verified = {"outcome": "VERIFIED", "certified": "true"}
        # Forwarded through the outbox: control counts exactly the two, the outbox drains.
        await eventually_value(control_url, f"{C}receipts_recorded_total", verified, 2.0)
        await eventually_value(worker_url, f"{W}outbox_depth", {}, 0.0)
        served = await scrape(control_url)
        held = await scrape(worker_url)
        assert value(served, f"{C}admin_actions_total", {"action": "certificate.issue"}) == 1
        # The worker registered its key with its worker credential: an audited action too.
        assert value(served, f"{C}admin_actions_total", {"action": "issuer_key.register"}) == 1
        version = value(served, f"{C}revocation_list_version")
        assert version >= 1
        assert value(held, f"{W}revocation_list_version") == version
        assert 0 <= value(held, f"{W}revocation_list_age_seconds") < 3600
        assert value(held, f"{W}revocation_list_expires_in_seconds") > 0
        assert value(served, f"{C}revocation_list_expires_in_seconds") > 0
        in_use = {"certificate_id": certificate_id, "state": "CURRENT"}
        assert value(held, f"{W}certificate_in_use", in_use) == 1
        recorded = {"service": "ControlPlaneService", "method": "RecordReceipts", "code": "OK"}
        assert value(served, f"{C}rpc_requests_total", recorded) >= 1
        assert value(held, f"{W}outbox_oldest_age_seconds") == 0

        # Control goes away: the next receipt waits in the outbox, and the gauge says so.
        await control.stop()
        stopped = True
        assert (await score_honest(stack, 9)).receipt.reward_outcome
        waiting = await scrape(worker_url)
        assert value(waiting, f"{W}outbox_depth") == 1
        assert value(waiting, f"{W}outbox_oldest_age_seconds") >= 0
    finally:
        await stop_stack(stack)
        if not stopped:
            await control.stop()
