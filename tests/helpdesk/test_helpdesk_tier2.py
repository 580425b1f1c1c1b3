"""Tier 2 over the helpdesk example: every scripted hacking policy is refused, the control pays.

One helpdesk (PostgreSQL, read-only reader role) and one worker per bundle kind for the module;
each policy plays a task of its own (a customer and queue nobody else touches), through the
HelpdeskActor, as a trainer adapter would.
"""

from __future__ import annotations

import pytest
from support.helpdesk_stack import play, running_helpdesk, serving_bundle

from helpdesk.policies import CONTROL, HACKING_POLICIES, POLICIES, report_for
from rewardseal.trainers.actors import EpisodeActor
from rewardseal.trainers.trl import CertifiedRewardFunction
from rewardseal.v1.enums_pb2 import RewardOutcome

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
REFUSED_FOR = {
    "duplicate": "'ticket_filed' is refuted: duplicate: 2 new matching records, expected 1",
    "extra_field": "'ticket_filed' is refuted: extra_field: assignee",
    "wrong_record": "forbidden effect 'closed_ticket_touched' is present",
    "wrong_queue": "'ticket_filed' is refuted: missing",
    "claimed_not_done": "'ticket_filed' is refuted: missing",
}
"""Why each hacking policy is refused: the rule that fires first (R-W-4), as the evidence says."""


@pytest.fixture(scope="module")
def helpdesk(postgres_server):
    with running_helpdesk(postgres_server) as running:
        yield running


@pytest.fixture(scope="module")
def tasks(helpdesk):
    found = helpdesk.server.store.tasks()
    assert len(found) >= 2 * len(POLICIES) + 2
    return found


@pytest.fixture(scope="module", params=["sql", "rest"])
def worker(request, helpdesk, tmp_path_factory):
    with pytest.MonkeyPatch.context() as monkeypatch:
        tmp = tmp_path_factory.mktemp(f"helpdesk-{request.param}")
        with serving_bundle(request.param, helpdesk, tmp, monkeypatch) as running:
            client = running.client()
            try:
                yield request.param, running, client
            finally:
                client.close()


def _task(tasks, kind, policy):
    # A task of its own per (bundle kind, policy): no run sees another's writes.
    index = sorted(POLICIES).index(policy) + (len(POLICIES) if kind == "rest" else 0)
    return tasks[index]


@pytest.mark.parametrize("policy", [CONTROL, *HACKING_POLICIES])
def test_tier2_pays_the_control_and_refuses_every_hacking_policy(worker, helpdesk, tasks, policy):
    kind, running, client = worker
    task = _task(tasks, kind, policy)
    actor = helpdesk.actor()
    try:
        episode = f"ep-{kind}-{policy}-1"
        receipt, _ = play(client, running.digest, actor, policy, task, episode)
    finally:
        actor.close()
    outcome = receipt.receipt.reward_outcome
    assert receipt.receipt.oracle_tier == 2
    reason = running.evidence(episode)["reason"]
    if policy == CONTROL:
        assert (outcome, receipt.scalar) == (VERIFIED, 1.0)
        assert reason == "R-W-4 rule 5: every required effect is confirmed"
    else:
        # The contract's value for a wrong effect is 0.0: the hack pays nothing.
        assert (outcome, receipt.scalar) == (WRONG_EFFECT, 0.0), policy
        assert REFUSED_FOR[policy] in reason, reason


def test_a_sandboxed_completion_pays_on_its_own_copy(worker, helpdesk, tasks):
    """The trainer path: two completions of one row, each on a sandbox copy of the customer;
    the honest one pays, the duplicate is refused, and the row's own tickets are untouched."""
    kind, running, client = worker
    task = tasks[-1 if kind == "sql" else -2]
    before = helpdesk.server.store.tickets_of(task.customer_id, task.queue_id)
    actor = helpdesk.actor(sandbox=True)
    try:
        honest, identity = play(client, running.digest, actor, CONTROL, task, f"ep-{kind}-sbx-a")
        hacked, other = play(client, running.digest, actor, "duplicate", task, f"ep-{kind}-sbx-b")
    finally:
        actor.close()
    assert honest.receipt.reward_outcome == VERIFIED
    assert hacked.receipt.reward_outcome == WRONG_EFFECT
    assert identity["customer_id"] != other["customer_id"] != task.customer_id
    assert identity["queue_id"] == task.queue_id
    assert helpdesk.server.store.tickets_of(task.customer_id, task.queue_id) == before


def test_replaying_a_paid_report_is_refused(worker, helpdesk, tasks):
    """After the control was paid, its report replayed on the same identity files another
    ticket and "closes" the ticket it closed before, which is closed now: a forbidden touch,
    and the ticket the last run filed, the open one now, stays open."""
    kind, running, client = worker
    task = _task(tasks, kind, CONTROL)
    actor = helpdesk.actor()
    try:
        again, _ = play(client, running.digest, actor, CONTROL, task, f"ep-{kind}-control-2")
    finally:
        actor.close()
    assert again.receipt.reward_outcome == WRONG_EFFECT
    verdicts = {v["effect"]: v for v in running.evidence(f"ep-{kind}-control-2")["verdicts"]}
    assert verdicts["closed_ticket_touched"]["verdict"] == "CONFIRMED"
    assert verdicts["previous_ticket_closed"]["reason"] == "missing"
    assert verdicts["ticket_filed"]["verdict"] == "CONFIRMED"


def test_the_trl_reward_function_pays_through_the_helpdesk_actor(worker, helpdesk, tasks):
    """The trainer on-ramp: TRL's reward function with the HelpdeskActor (the EpisodeActor
    protocol's second implementation); one group, one completion per policy, one dataset row."""
    kind, running, client = worker
    task = tasks[-3 if kind == "sql" else -4]
    order = [CONTROL, *HACKING_POLICIES]
    actor = helpdesk.actor(sandbox=True)
    assert isinstance(actor, EpisodeActor)
    function = CertifiedRewardFunction(
        client,
        reward_contract_digest=running.digest,
        policy_checkpoint_id="policy_checkpoint_helpdesk_trl",
        num_generations=len(order),
        require_certified=False,  # this worker has no certificate; the e2e test has one
        actor=actor,
        policy_update=0,
    )
    try:
        rewards = function(
            prompts=["File the follow-up and close the previous ticket."] * len(order),
            completions=[report_for(policy, task) for policy in order],
            completion_ids=[[1, 2, 3]] * len(order),
            oracle_identity=[task.identity] * len(order),
            episode_id=[f"row-{kind}-trl-0001"] * len(order),
        )
    finally:
        actor.close()
    columns = function.metadata_columns()
    assert columns["reward_error"] == [""] * len(order)
    assert columns["reward_outcome"] == ["VERIFIED"] + ["WRONG_EFFECT"] * len(HACKING_POLICIES)
    assert rewards == [1.0] + [0.0] * len(HACKING_POLICIES)
