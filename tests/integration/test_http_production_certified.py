"""HTTP says the truth about certification (R-H-24, issue 26 item 5): a receipt certified under
an organization's PRODUCTION certificate reads certified over HTTP, in rewardseal's own view
beside the compatibility receipt, while the compatibility fields stay what that shape's clients
parse (``certified: false`` there, with the sentence that says why).

A real control plane issues the PRODUCTION certificate (organization key, held-out summary,
R-MSG-5); a real seeded worker linked to it adopts it and serves gRPC and HTTP; httpx posts the
episode; the envelope in the answer verifies against the worker's key.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from google.protobuf import json_format
from support.linked_stack import (
    ADMIN_TOKEN,
    control_client,
    register_contract,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)
from support.mockmed_episodes import CHECKPOINT, write_triage
from support.worker_stack import stop_stack

from rewardseal.core.receipts import open_receipt
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.control_client import issue_certificate_request
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_worker.calibration import summary_from_json
from rewardseal_worker.http.shapes import WITHHELD_PRODUCTION


async def test_a_production_certified_receipt_reads_certified_over_http(
    tmp_path: Path, data_dir: Path
) -> None:
    control = await start_control_plane(tmp_path)
    stack = await start_linked_worker(data_dir, control.target, control.key, http_port=0)
    try:
        digest = stack.digest
        await register_contract(control.target, data_dir, digest)
        document = json.loads((data_dir / "contracts" / "mockmed" / "calibration.json").read_text())
        document["held_out"] = True  # R-MSG-5: PRODUCTION needs a summary marked held out
        async with control_client(control.target, ADMIN_TOKEN) as admin:
            await admin.issue_certificate(
                issue_certificate_request(
                    digest,
                    summary_from_json(document),
                    calibration_scope=CalibrationScope.CALIBRATION_SCOPE_PRODUCTION,
                    issuer=CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
                    issuer_key_id=control.key.key_id,
                    certificate_id="cert.mockmed.production.http",
                    reason="R-H-24",
                )
            )
        await scoring_under(stack, "cert.mockmed.production.http")

        assert stack.app.http is not None
        url = f"http://127.0.0.1:{stack.app.http.port}"
        headers = {"authorization": f"Bearer {stack.app.settings.token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=20.0) as http:
            begun = await http.post(
                "/v1/episodes",
                json={
                    "episode_id": "episode.http.production.1",
                    "reward_contract_digest": digest,
                    "oracle_identity": {"patient_id": "patient-http-production-1"},
                },
            )
            assert begun.status_code == 200, begun.text
            write_triage(stack.database, "patient-http-production-1")
            answer = await http.post(
                "/v1/rewards",
                json={
                    "episode_id": "episode.http.production.1",
                    "policy_checkpoint_id": CHECKPOINT,
                    "policy_update": 0,
                    "reward_contract_digest": digest,
                },
            )
            assert answer.status_code == 200, answer.text
            scored = answer.json()
            again = (await http.get(f"/v1/rewards/{scored['receipt']['receipt_id']}")).json()

        for got in (scored, again):
            # rewardseal's own view: certified, production, current, verified.
            assert got["rewardseal"] == {
                "certified": True,
                "calibration_scope": "production",
                "certificate_state": "current",
                "outcome": "verified",
                "findings": [],
                "task_parameters_digest": "",
            }
            # The compatibility receipt as its clients parse it: that shape has no production
            # scope, so it never says certified for one, and a sentence says why.
            assert got["receipt"]["certified"] is False
            assert got["receipt"]["calibration_scope"] == "production"
            assert got["receipt"]["certificate_id"] == "cert.mockmed.production.http"
            assert got["receipt"]["scalar_reward"] == 1.0
            assert WITHHELD_PRODUCTION in got["certification_refusals"]
        # The view is the signed receipt's word: the envelope beside it says the same.
        envelope = json_format.ParseDict(scored["envelope"], SignedEnvelope())
        opened = open_receipt(envelope, TrustSet([stack.app.key.public_key]))
        assert opened.receipt.certified
        assert (opened.scope, opened.certificate_state, opened.outcome) == (
            "production",
            "current",
            "verified",
        )
    finally:
        await stop_stack(stack)
        await control.stop()
