"""Task parameters end to end (R-MSG-11, R-W-18): the parameterized MockMed contract through a
real worker (grpc.aio on port 0, the seeded MockMed SQLite system of record, real Ed25519).

The same policy action (one encounter written for the patient) pays for the parameters it
matches and is a wrong effect for others; values missing, extra, ill-typed or out of range are
refused at begin naming the parameter; a descriptor repeating other values is refused; the
receipt carries the values' digest and the client refuses a validly signed receipt that names
other parameters.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from support.http_worker import http_worker
from support.mockmed_episodes import descriptor
from worker.conftest import RunningStack, start_stack, stop_stack
from worker.test_worker_contract import wire_error

from rewardseal.core.digest import digest_json
from rewardseal.core.errors import InvalidTaskParameters, ReceiptMismatch
from rewardseal.core.receipts import seal_receipt
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.worker_client import make_begin
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt
from rewardseal_mockmed.contract import IDENTITY_KEY, mockmed_parameterized_contract
from rewardseal_mockmed.seeding import write_encounter
from rewardseal_worker.seed import PARAMS_BUNDLE
from rewardseal_worker.settings import KEY_FILE

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
TRIAGE = {"encounter_type": "Triage", "note": "Recheck vitals in 4 hours."}
CONSULT = {"encounter_type": "Consult", "note": "Recheck vitals in 4 hours."}


def identity(patient: str) -> dict[str, str]:
    return {IDENTITY_KEY: patient}


@pytest.fixture
async def params_stack(data_dir: Path) -> Any:
    running = await start_stack(data_dir, contract=PARAMS_BUNDLE.name)
    yield running
    await stop_stack(running)


def write(stack: RunningStack, patient: str, values: dict[str, str]) -> str:
    """The policy's action: one encounter for ``patient`` of the given type and note."""
    return write_encounter(
        stack.database, patient_id=patient, type=values["encounter_type"], note=values["note"]
    )


async def test_the_seeded_bundle_is_the_parameterized_contract(params_stack: RunningStack):
    health = await params_stack.client.health()
    assert health.reward_contract_digest == params_stack.digest
    names = [p.name for p in params_stack.app.bundle.contract.task_parameters]
    assert names == ["encounter_type", "note"]
    assert params_stack.app.bundle.contract == mockmed_parameterized_contract()


async def test_the_same_action_pays_for_matching_parameters_and_not_for_others(
    params_stack: RunningStack,
):
    client, digest = params_stack.client, params_stack.digest
    await client.begin("ep-params-match", digest, identity("p-params-1"), task_parameters=TRIAGE)
    await client.begin("ep-params-other", digest, identity("p-params-2"), task_parameters=CONSULT)
    # The same action for both patients: a Triage encounter with the same note.
    write(params_stack, "p-params-1", TRIAGE)
    write(params_stack, "p-params-2", TRIAGE)

    paid = await client.score(descriptor(digest, "ep-params-match"))
    refused = await client.score(descriptor(digest, "ep-params-other"))
    assert paid.receipt.reward_outcome == VERIFIED
    assert paid.scalar == 1.0
    # The seeded bundle is calibrated with values drawn per trial (R-CAL-6) and self-signed.
    assert paid.receipt.certified
    assert refused.receipt.reward_outcome == WRONG_EFFECT
    assert paid.task_parameters_digest == digest_json(TRIAGE)
    assert refused.task_parameters_digest == digest_json(CONSULT)


async def test_a_descriptor_may_repeat_the_begins_values(params_stack: RunningStack):
    client, digest = params_stack.client, params_stack.digest
    await client.begin("ep-params-repeat", digest, identity("p-params-3"), task_parameters=TRIAGE)
    write(params_stack, "p-params-3", TRIAGE)
    got = await client.score(descriptor(digest, "ep-params-repeat", task_parameters=TRIAGE))
    assert got.receipt.reward_outcome == VERIFIED
    assert got.receipt.task_parameters_digest == digest_json(TRIAGE)


async def test_a_descriptor_repeating_other_values_is_refused(params_stack: RunningStack):
    client, digest = params_stack.client, params_stack.digest
    await client.begin("ep-params-swap", digest, identity("p-params-4"), task_parameters=CONSULT)
    write(params_stack, "p-params-4", TRIAGE)
    with pytest.raises(InvalidTaskParameters) as caught:
        # The trainer claims the task was the Triage one the policy did: refused, not paid.
        await client.score(descriptor(digest, "ep-params-swap", task_parameters=TRIAGE))
    assert caught.value.reason == "invalid_task_parameters"
    assert caught.value.metadata["parameter"] == "encounter_type"
    # The episode stays open: scored with its begin's values, the action is a wrong effect.
    honest = await client.score(descriptor(digest, "ep-params-swap"))
    assert honest.receipt.reward_outcome == WRONG_EFFECT


async def test_without_a_begin_the_descriptor_carries_the_parameters(
    params_stack: RunningStack,
):
    client, digest = params_stack.client, params_stack.digest
    write(params_stack, "p-params-5", TRIAGE)
    got = await client.score(
        descriptor(
            digest,
            "ep-params-nobegin",
            oracle_identity=identity("p-params-5"),
            task_parameters=TRIAGE,
        )
    )
    assert got.task_parameters_digest == digest_json(TRIAGE)
    with pytest.raises(InvalidTaskParameters) as caught:
        await client.score(
            descriptor(digest, "ep-params-nobegin-2", oracle_identity=identity("p-params-6"))
        )
    assert caught.value.metadata["parameter"] == "encounter_type"


BAD_VALUES = [
    pytest.param({"note": "x"}, "encounter_type", "missing", id="missing"),
    pytest.param({**TRIAGE, "priority": "stat"}, "priority", "not a parameter", id="extra"),
    pytest.param({**TRIAGE, "note": 7}, "note", "must be a string", id="ill-typed"),
    pytest.param({**TRIAGE, "encounter_type": "Surgery"}, "encounter_type", "allowed", id="range"),
    pytest.param({**TRIAGE, "note": "n" * 300}, "note", "longer than 256", id="too-long"),
]


@pytest.mark.parametrize(("values", "parameter", "words"), BAD_VALUES)
async def test_bad_values_are_refused_at_begin_naming_the_parameter(
    params_stack: RunningStack, values: dict[str, Any], parameter: str, words: str
):
    client, digest = params_stack.client, params_stack.digest
    with pytest.raises(InvalidTaskParameters, match=words) as caught:
        await client.begin("ep-params-bad", digest, identity("p-bad"), task_parameters=values)
    assert caught.value.metadata["parameter"] == parameter
    # Nothing was registered: a good begin of the same episode goes through.
    await client.begin("ep-params-bad", digest, identity("p-bad"), task_parameters=TRIAGE)


async def test_the_wire_error_names_the_parameter_and_quotes_a_short_prefix(
    params_stack: RunningStack,
):
    secret = "Surgery-" + "S" * 3000
    request = make_begin(
        "ep-params-wire",
        params_stack.digest,
        identity("p-wire"),
        {**TRIAGE, "encounter_type": secret},
    )
    code, reason, metadata = await wire_error(params_stack, "BeginEpisode", request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert reason == "invalid_task_parameters"
    assert metadata["parameter"] == "encounter_type"
    with pytest.raises(InvalidTaskParameters) as caught:
        await params_stack.client.begin(
            "ep-params-wire",
            params_stack.digest,
            identity("p-wire"),
            task_parameters={**TRIAGE, "encounter_type": secret},
        )
    assert "S" * 100 not in caught.value.message


async def test_begin_episodes_and_the_stream_refuse_the_bad_item_alone(
    params_stack: RunningStack,
):
    client, digest = params_stack.client, params_stack.digest
    items = [
        make_begin("ep-params-b1", digest, identity("p-b1"), TRIAGE),
        make_begin("ep-params-b2", digest, identity("p-b2"), {"note": "only"}),
    ]
    good, bad = await client.begin_many(items)
    assert isinstance(good, pb.BeginEpisodeResponse)
    assert isinstance(bad, InvalidTaskParameters)
    assert bad.metadata["parameter"] == "encounter_type"

    stream_items = [
        make_begin("ep-params-s1", digest, identity("p-s1"), CONSULT),
        make_begin("ep-params-s2", digest, identity("p-s2"), {**CONSULT, "qty": 1}),
    ]
    answers = [entry async for entry in client.stream(stream_items)]
    assert isinstance(answers[0], pb.BeginEpisodeResponse)
    assert isinstance(answers[1], InvalidTaskParameters)
    assert answers[1].metadata["parameter"] == "qty"
    write(params_stack, "p-s1", CONSULT)
    # The stream's begin bound CONSULT: the client remembers it for the receipt.
    got = await client.score(descriptor(digest, "ep-params-s1"))
    assert got.receipt.reward_outcome == VERIFIED
    assert got.task_parameters_digest == digest_json(CONSULT)


async def test_the_client_refuses_a_signed_receipt_naming_other_parameters(
    params_stack: RunningStack,
):
    """A substituted receipt: validly signed by the worker's own key, for the right episode,
    checkpoint, update and contract, but judged with other parameters. The client binds it to
    the parameters its begin sent, as it binds the episode id."""
    client, digest = params_stack.client, params_stack.digest
    await client.begin("ep-params-sub", digest, identity("p-sub"), task_parameters=TRIAGE)
    write(params_stack, "p-sub", TRIAGE)
    real = await client.score(descriptor(digest, "ep-params-sub"))

    key = SigningKey.load_or_create(params_stack.data_dir / KEY_FILE)
    forged = RewardEvidenceReceipt()
    forged.CopyFrom(real.receipt)
    forged.task_parameters_digest = digest_json(CONSULT)
    envelope = seal_receipt(forged, key)
    protocol = client._protocol
    for expected in (
        protocol.bound.expected(descriptor(digest, "ep-params-sub")),  # remembered from begin
        protocol.bound.expected(descriptor(digest, "ep-params-sub", task_parameters=TRIAGE)),
    ):
        with pytest.raises(ReceiptMismatch) as caught:
            protocol.verify(envelope, expected)
        assert caught.value.metadata["field"] == "task_parameters_digest"
    # The worker's own receipt passes both ways.
    protocol.verify(real.envelope, protocol.bound.expected(descriptor(digest, "ep-params-sub")))
    stored = await client.get_receipt(answers=descriptor(digest, "ep-params-sub"))
    assert stored.task_parameters_digest == digest_json(TRIAGE)


async def test_a_contract_without_parameters_behaves_as_before(stack: RunningStack):
    client, digest = stack.client, stack.digest
    await client.begin("ep-noparams-1", digest, identity("p-noparams"))
    write_encounter(stack.database, patient_id="p-noparams")
    got = await client.score(descriptor(digest, "ep-noparams-1"))
    assert got.receipt.reward_outcome == VERIFIED
    assert got.task_parameters_digest == ""
    with pytest.raises(InvalidTaskParameters) as caught:
        await client.begin(
            "ep-noparams-2", digest, identity("p-noparams-2"), task_parameters={"qty": 1}
        )
    assert caught.value.metadata["parameter"] == "qty"


def test_http_begin_binds_the_parameters(seeded_template: Path, tmp_path: Path):
    with http_worker(seeded_template, tmp_path / "data", contract=PARAMS_BUNDLE.name) as worker:
        http = httpx.Client(base_url=worker.url, headers=worker.auth, timeout=20.0)
        begin = {
            "episode_id": "ep-params-http",
            "reward_contract_digest": worker.digest,
            "oracle_identity": identity("p-http"),
            "task_parameters": TRIAGE,
        }
        bad = http.post("/v1/episodes", json={**begin, "task_parameters": {"note": "x"}})
        assert bad.status_code == 422
        assert bad.json()["error"] == "invalid_task_parameters"
        assert bad.json()["parameter"] == "encounter_type"
        typed = http.post(
            "/v1/episodes", json={**begin, "task_parameters": {**TRIAGE, "note": True}}
        )
        assert typed.status_code == 422
        assert typed.json()["parameter"] == "note"
        assert http.post("/v1/episodes", json=begin).status_code == 200
        write_encounter(worker.database, patient_id="p-http", type="Triage", note=TRIAGE["note"])
        scored = http.post(
            "/v1/rewards",
            json={
                "episode_id": "ep-params-http",
                "policy_checkpoint_id": "policy_checkpoint_mockmed_0",
                "policy_update": 0,
                "reward_contract_digest": worker.digest,
                "task_parameters": CONSULT,
            },
        )
        assert scored.status_code == 422
        assert scored.json()["parameter"] == "encounter_type"
        with worker.grpc() as client:
            got = client.score(descriptor(worker.digest, "ep-params-http"))
        assert got.receipt.reward_outcome == VERIFIED
        assert got.task_parameters_digest == digest_json(TRIAGE)


async def test_begins_of_many_episodes_with_parameters_score_concurrently(
    params_stack: RunningStack,
):
    client, digest = params_stack.client, params_stack.digest
    values = [
        {"encounter_type": kind, "note": f"note {n}"}
        for n, kind in enumerate(["Triage", "Followup", "Consult", "Discharge"] * 4)
    ]
    await asyncio.gather(
        *(
            client.begin(
                f"ep-params-many-{n:02d}", digest, identity(f"p-many-{n}"), task_parameters=v
            )
            for n, v in enumerate(values)
        )
    )
    for n, v in enumerate(values):
        write(params_stack, f"p-many-{n}", v if n % 2 == 0 else {**v, "note": "other"})
    got = await asyncio.gather(
        *(client.score(descriptor(digest, f"ep-params-many-{n:02d}")) for n in range(len(values)))
    )
    outcomes = [g.receipt.reward_outcome for g in got]
    assert outcomes == [VERIFIED if n % 2 == 0 else WRONG_EFFECT for n in range(len(values))]
    assert [g.task_parameters_digest for g in got] == [digest_json(v) for v in values]


async def test_a_rebegin_keeps_its_values_and_cannot_change_them(params_stack: RunningStack):
    client, digest = params_stack.client, params_stack.digest
    first = await client.begin("ep-params-re", digest, identity("p-re"), task_parameters=TRIAGE)
    again = await client.begin("ep-params-re", digest, identity("p-re"), task_parameters=TRIAGE)
    assert again.begun_at == first.begun_at  # idempotent: the first registration stands
    with pytest.raises(InvalidTaskParameters) as caught:
        await client.begin("ep-params-re", digest, identity("p-re"), task_parameters=CONSULT)
    assert caught.value.metadata["parameter"] == "encounter_type"
    write(params_stack, "p-re", TRIAGE)
    got = await client.score(descriptor(digest, "ep-params-re", task_parameters=TRIAGE))
    assert got.receipt.reward_outcome == VERIFIED
