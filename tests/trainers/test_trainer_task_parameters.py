"""Task parameters from the trainer's data (R-MSG-11, R-W-18): TRL's ``task_parameters`` column
verl's ``extra_info["task_parameters"]`` and the verifiers environment's task rows
(``info["task_parameters"]``), against a real worker over the parameterized
MockMed contract (encounter type and note per episode; grpc.aio on port 0, the seeded SQLite
system of record, real Ed25519) and, for TRL's actor mode, a real MockMed.

Per adapter, a batch whose rows carry different parameters: the honest action for a row's own
parameters pays 1.0, the action for another row's parameters is a wrong effect paid the
contract's wrong-effect reward, and every receipt carries the digest of its row's values. A row
without parameters is the worker's ``invalid_task_parameters`` for that sample: unscored (never
paid 0.0), as every per-sample refusal is (rewardseal.trainers.groups).

The parameterized bundle is seeded without a certificate: the functions run with
``require_certified=False``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from rewardseal_mockmed_extradup.reward import certify_row
from rewardseal_mockmed_extradup.tasks import (
    STORES,
    spec_from_json,
    spec_prompt,
    spec_to_json,
    task_parameters_of,
    train_rows,
)
from support.mockmed_episodes import CHECKPOINT
from support.mockmed_service import RunningMockMed, running_mockmed
from support.verl_episodes import manager_kwargs
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.digest import digest_json
from rewardseal.core.errors import InvalidTaskParameters, ValidationError
from rewardseal.rpc.worker_client import VerifiedReceipt, WorkerClient
from rewardseal.trainers.actors import sandbox_identity
from rewardseal.trainers.task_parameters import PARAMETERS_KEY, row_parameters
from rewardseal.trainers.trl import CertifiedRewardFunction
from rewardseal.trainers.verl import CertifiedRewardManager
from rewardseal.trainers.verl.loop import LoopScorer, settings_from_config
from rewardseal_kit.actors import MockMedActor
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_mockmed.extradup import (
    CONTROL,
    REFUSED,
    mockmed_write_spec,
    parameterized_write_spec,
    scripted_completion,
)
from rewardseal_mockmed.seeding import count_encounters, write_encounter
from rewardseal_worker.seed import PARAMS_BUNDLE

CONSULT = {"encounter_type": "Consult", "note": "Synthetic: recheck the rash in a week."}
FOLLOWUP = {"encounter_type": "Followup", "note": "Synthetic: review the lab results."}
KINDS = ["sync", "async"]


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    running = await start_stack(data_dir, contract=PARAMS_BUNDLE.name)
    yield running
    await stop_stack(running)


@pytest.fixture
def sync_client(stack: RunningStack) -> Iterator[WorkerClient]:
    with WorkerClient(stack.target, token=stack.token, trust=stack.trust, timeout=20.0) as client:
        yield client


@pytest.fixture
def mockmed(stack: RunningStack, tmp_path: Path) -> Iterator[RunningMockMed]:
    with running_mockmed(f"sqlite:///{stack.database}", tmp_path) as service:
        yield service


def wrong_effect_reward(stack: RunningStack) -> float:
    return stack.app.bundle.contract.scoring_policy.wrong_effect_reward


def honest(patient: str, values: dict[str, str]) -> str:
    """The gold action report for a row's parameters: one encounter of its type and note."""
    return scripted_completion(CONTROL, parameterized_write_spec(patient, values))


async def receipt_of(stack: RunningStack, episode_id: str) -> VerifiedReceipt:
    stored = await stack.client.get_receipt(episode_id=episode_id)
    assert isinstance(stored, VerifiedReceipt)
    return stored


def test_a_rows_parameters_are_a_mapping_or_its_json_text() -> None:
    assert row_parameters(None, 0) == {}
    assert row_parameters(json.dumps(CONSULT), 0) == CONSULT
    # datasets fills a struct key a row lacks with None: absent, as for the identity.
    assert row_parameters({"encounter_type": "Consult", "note": None}, 0) == {
        "encounter_type": "Consult"
    }
    assert row_parameters({"qty": 3, "rush": True, "weight": 1.5}, 0)["qty"] == 3
    for bad in ("not json", "[1, 2]", {"note": ["a", "list"]}):
        with pytest.raises(ValidationError, match=f"{PARAMETERS_KEY} of sample 4"):
            row_parameters(bad, 4)


# --------------------------------------------------------------------------------------------
# TRL: the dataset column (actor mode: bound at begin, handed to the actor)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_trl_rows_with_different_parameters_pay_each_rows_own_task(
    kind: str, stack: RunningStack, sync_client: WorkerClient, mockmed: RunningMockMed
) -> None:
    patients = [f"patient-trl-params-{kind}-{row}" for row in range(3)]
    # Three prompts, two completions each (TRL copies a row to its num_generations members):
    # row 0 asks for a Consult, row 1 for a Followup (given as JSON text), row 2 for nothing.
    parameters: list[Any] = [CONSULT] * 2 + [json.dumps(FOLLOWUP)] * 2 + [None] * 2
    completions = [
        honest(patients[0], CONSULT),
        honest(patients[0], FOLLOWUP),  # another row's task: a wrong effect here
        honest(patients[1], FOLLOWUP),
        honest(patients[1], CONSULT),
        honest(patients[2], CONSULT),
        honest(patients[2], FOLLOWUP),
    ]
    function = CertifiedRewardFunction(
        sync_client,
        reward_contract_digest=stack.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=2,
        require_certified=False,
        policy_update=1,
        actor=MockMedActor(mockmed.url, mockmed.token),
    )
    kwargs: dict[str, Any] = {
        "prompts": ["Create the encounter the task asks for."] * 6,
        "completions": completions,
        "oracle_identity": [{IDENTITY_KEY: patient} for patient in patients for _ in range(2)],
        "episode_id": [f"row-params-{kind}-{row}" for row in range(3) for _ in range(2)],
        PARAMETERS_KEY: parameters,
    }
    if kind == "sync":
        rewards = await asyncio.to_thread(lambda: function(**kwargs))
    else:
        rewards = await function.as_async(stack.client)(**kwargs)
    wrong = wrong_effect_reward(stack)
    # The row without parameters: both samples refused by the worker, unscored, never 0.0.
    assert rewards == [1.0, wrong, 1.0, wrong, None, None]
    columns = function.metadata_columns()
    assert columns["reward_outcome"] == ["VERIFIED", "WRONG_EFFECT"] * 2 + ["ERROR"] * 2
    assert columns["reward_error"] == [""] * 4 + ["invalid_task_parameters"] * 2
    assert columns["reward_unscored"] == [False] * 4 + [True] * 2
    ids = columns["reward_episode_id"]
    for index, values in enumerate([CONSULT, CONSULT, FOLLOWUP, FOLLOWUP]):
        receipt = await receipt_of(stack, ids[index])
        assert receipt.receipt.task_parameters_digest == digest_json(values)
    # The actor wrote what each completion said, into each completion's sandbox patient.
    sandbox = sandbox_identity(patients[0], ids[1])
    assert count_encounters(stack.database, patient_id=sandbox) == 1
    # The refused row was never acted on: nothing written for its sandboxes.
    for index in (4, 5):
        sandbox = sandbox_identity(patients[2], ids[index])
        assert count_encounters(stack.database, patient_id=sandbox) == 0


async def test_trl_without_an_actor_repeats_the_rows_parameters_in_the_descriptor(
    stack: RunningStack, sync_client: WorkerClient
) -> None:
    """The rollout began each episode; the column's values are repeated, so a row naming other
    values than its begin bound is refused for that sample (and a matching row pays)."""
    ids = [f"episode.trl.params.repeat.{i}" for i in range(2)]
    for episode_id, patient in zip(ids, ("p-trl-rep-0", "p-trl-rep-1"), strict=True):
        await stack.client.begin(
            episode_id, stack.digest, {IDENTITY_KEY: patient}, task_parameters=CONSULT
        )
        write_encounter(
            stack.database, patient_id=patient, type=CONSULT["encounter_type"], note=CONSULT["note"]
        )
    function = CertifiedRewardFunction(
        sync_client,
        reward_contract_digest=stack.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=2,
        require_certified=False,
        policy_update=1,
    )
    rewards = await asyncio.to_thread(
        lambda: function(
            prompts=["p"] * 2,
            completions=["done"] * 2,
            episode_id=ids,
            task_parameters=[CONSULT, FOLLOWUP],
        )
    )
    assert rewards == [1.0, 1.0]  # the refused sample takes its group's mean (R-T-1)
    columns = function.metadata_columns()
    assert columns["reward_outcome"] == ["VERIFIED", "ERROR"]
    assert columns["reward_error"] == ["", "invalid_task_parameters"]
    assert columns["reward_unscored"] == [False, True]


# --------------------------------------------------------------------------------------------
# verl: extra_info["task_parameters"] (the batch manager and the reward loop)
# --------------------------------------------------------------------------------------------


async def play_verl(stack: RunningStack, tag: str) -> list[dict[str, Any]]:
    """Two uid groups as a verl rollout plays them: begun with the row's parameters, then one
    member writes its row's task and the other the other row's. A fifth sample, with no begin
    and no parameters, is the row the dataset forgot to parameterize."""
    rows = [("a", CONSULT, CONSULT), ("a", CONSULT, FOLLOWUP)]
    rows += [("b", FOLLOWUP, FOLLOWUP), ("b", FOLLOWUP, CONSULT)]
    infos: list[dict[str, Any]] = []
    for index, (group, asked, written) in enumerate(rows):
        episode_id = f"episode.verl.params.{tag}.{group}.{index}"
        identity = {IDENTITY_KEY: f"patient-verl-params-{tag}-{index}"}
        await stack.client.begin(episode_id, stack.digest, identity, task_parameters=asked)
        write_encounter(
            stack.database,
            patient_id=identity[IDENTITY_KEY],
            type=written["encounter_type"],
            note=written["note"],
        )
        infos.append({"episode_id": episode_id, "oracle_identity": identity, PARAMETERS_KEY: asked})
    infos.append(
        {
            "episode_id": f"episode.verl.params.{tag}.c.4",
            "oracle_identity": {IDENTITY_KEY: f"patient-verl-params-{tag}-4"},
        }
    )
    return infos


async def check_verl_receipts(stack: RunningStack, infos: list[dict[str, Any]]) -> None:
    for info in infos[:4]:
        receipt = await receipt_of(stack, info["episode_id"])
        assert receipt.receipt.task_parameters_digest == digest_json(info[PARAMETERS_KEY])


async def test_verl_manager_reads_each_samples_parameters_from_extra_info(
    stack: RunningStack,
) -> None:
    infos = await play_verl(stack, "manager")
    manager = CertifiedRewardManager(
        None, 0, None, **manager_kwargs(stack, require_certified=False)
    )
    uids = ["uid-a", "uid-a", "uid-b", "uid-b", "uid-c"]
    try:
        result = await asyncio.to_thread(manager.score_batch, infos, uids, {"global_steps": 2})
    finally:
        manager.close()
    wrong = wrong_effect_reward(stack)
    outcomes = result.extra_info["reward_outcome"]
    assert outcomes == ["VERIFIED", "WRONG_EFFECT"] * 2 + ["ERROR"]
    assert result.extra_info["reward_error"][4] == "invalid_task_parameters"
    # The unparameterized sample's group has no scored member: group-constant and flagged.
    assert result.rewards[:4] == [1.0, wrong, 1.0, wrong]
    assert result.extra_info["reward_group_unscored"] == [False] * 4 + [True]
    await check_verl_receipts(stack, infos)


async def test_verl_reward_loop_reads_the_samples_parameters_from_extra_info(
    stack: RunningStack,
) -> None:
    infos = await play_verl(stack, "loop")
    scorer = LoopScorer()
    scorer._init_scorer(settings_from_config(None, manager_kwargs(stack, require_certified=False)))
    try:
        answers = [
            await scorer.score_one(info, f"uid-{index // 2}", {"global_steps": 2})
            for index, info in enumerate(infos)
        ]
    finally:
        await scorer.aclose()
    wrong = wrong_effect_reward(stack)
    assert [answer["reward_score"] for answer in answers] == [1.0, wrong, 1.0, wrong, None]
    assert answers[4]["reward_extra_info"]["reward_error"] == "invalid_task_parameters"
    await check_verl_receipts(stack, infos)


# --------------------------------------------------------------------------------------------
# The verifiers environment: the task row carries the parameters
# --------------------------------------------------------------------------------------------


def env_row(patient: str, values: dict[str, str]) -> dict[str, Any]:
    """A MockMed task row of the environment, as :func:`tasks.train_rows` builds them."""
    spec = mockmed_write_spec(patient, values["note"], encounter_type=values["encounter_type"])
    info = {"spec": spec_to_json(spec), "store": "mockmed"}
    parameters = task_parameters_of(spec)
    assert parameters == values
    return {"prompt": spec_prompt(spec), "info": {**info, PARAMETERS_KEY: parameters}}


def test_env_rows_carry_the_parameterized_contracts_values() -> None:
    rows = train_rows(2, 0, STORES)
    mockmed_rows = [row for row in rows if row["info"]["store"] == "mockmed"]
    for row in mockmed_rows:
        spec = spec_from_json(row["info"]["spec"])
        assert row["info"][PARAMETERS_KEY] == {
            "encounter_type": spec.fields["type"],
            "note": spec.fields["note"],
        }
    assert mockmed_rows[0]["info"][PARAMETERS_KEY] != mockmed_rows[1]["info"][PARAMETERS_KEY]
    # The OpenEMR-shaped task declares no parameters: its rows carry none.
    assert all(PARAMETERS_KEY not in row["info"] for row in rows if row not in mockmed_rows)


def test_env_reward_judges_each_row_by_its_own_parameters() -> None:
    rows = [env_row("patient-env-params-0", CONSULT), env_row("patient-env-params-1", FOLLOWUP)]
    for own, other in ((0, 1), (1, 0)):
        info = rows[own]["info"]
        patient = spec_from_json(info["spec"]).identity
        assert certify_row(honest(patient, info[PARAMETERS_KEY]), info).reward == 1.0
        wrong = certify_row(honest(patient, rows[other]["info"][PARAMETERS_KEY]), info)
        assert wrong.verdict == REFUSED
        assert wrong.reward == 0.0
    # A row whose parameters are not the task its prompt shows is refused, naming the value.
    broken = {**rows[0]["info"], PARAMETERS_KEY: FOLLOWUP}
    with pytest.raises(InvalidTaskParameters) as refused:
        certify_row(honest("patient-env-params-0", CONSULT), broken)
    assert refused.value.metadata["parameter"] == "encounter_type"
    missing = {**rows[0]["info"], PARAMETERS_KEY: {"encounter_type": "Consult"}}
    with pytest.raises(InvalidTaskParameters, match="note"):
        certify_row(honest("patient-env-params-0", CONSULT), missing)


async def test_env_rows_begin_their_episodes_on_the_worker_with_their_parameters(
    stack: RunningStack, sync_client: WorkerClient, mockmed: RunningMockMed
) -> None:
    """The environment's rows, fed to a trainer as they are (the row's ``task_parameters`` as
    the column): the worker pays what the environment's own reward pays, and each receipt
    carries the digest of its row's values."""
    rows = [env_row("patient-env-worker-0", CONSULT), env_row("patient-env-worker-1", FOLLOWUP)]
    infos = [row["info"] for row in rows for _ in range(2)]
    patients = [spec_from_json(info["spec"]).identity for info in infos]
    completions = [
        honest(patients[0], CONSULT),
        honest(patients[1], FOLLOWUP),
        honest(patients[2], FOLLOWUP),
        honest(patients[3], CONSULT),
    ]
    function = CertifiedRewardFunction(
        sync_client,
        reward_contract_digest=stack.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=2,
        require_certified=False,
        policy_update=1,
        actor=MockMedActor(mockmed.url, mockmed.token),
    )
    rewards = await asyncio.to_thread(
        lambda: function(
            prompts=[info["spec"]["collection"] for info in infos],
            completions=completions,
            oracle_identity=[{IDENTITY_KEY: patient} for patient in patients],
            task_parameters=[info[PARAMETERS_KEY] for info in infos],
        )
    )
    local = [certify_row(text, info).reward for text, info in zip(completions, infos, strict=True)]
    assert local == [1.0, 0.0, 1.0, 0.0]
    assert rewards == [1.0, wrong_effect_reward(stack), 1.0, wrong_effect_reward(stack)]
    for episode_id, info in zip(
        function.metadata_columns()["reward_episode_id"], infos, strict=True
    ):
        receipt = await receipt_of(stack, episode_id)
        assert receipt.receipt.task_parameters_digest == digest_json(info[PARAMETERS_KEY])
