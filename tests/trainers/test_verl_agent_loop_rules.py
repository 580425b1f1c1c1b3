"""The verl-free rules of CertifiedAgentLoop (rewardseal.trainers.verl.agent_loop): whose
sandbox a session acts on, which policy update it is scored at, its minted id, the drop count."""

from __future__ import annotations

import pytest

from rewardseal.core.errors import ValidationError
from rewardseal.trainers.verl.agent_loop import (
    CLASS_NAME,
    DroppedSessions,
    episode_prefix,
    load_object,
    policy_update_of,
    session_identity,
)


def test_each_session_takes_its_own_sandbox() -> None:
    info = {"oracle_identities": [{"patient_id": "p-0"}, {"patient_id": "p-1"}]}
    assert session_identity(info, 0, 2) == {"patient_id": "p-0"}
    assert session_identity(info, 1, 2) == {"patient_id": "p-1"}
    assert session_identity({"oracle_identity": {"patient_id": "p"}}, 0, 1) == {"patient_id": "p"}


def test_sessions_never_share_a_sandbox() -> None:
    # Two open episodes on one identity: the worker would refuse the second (identity_busy).
    with pytest.raises(ValidationError, match="oracle_identities"):
        session_identity({"oracle_identity": {"patient_id": "p"}}, 0, 2)
    with pytest.raises(ValidationError, match="2 identities for 3 sessions"):
        session_identity({"oracle_identities": [{"a": "1"}, {"a": "2"}]}, 0, 3)


@pytest.mark.parametrize(
    "info",
    [
        {},
        None,
        {"oracle_identity": {}},
        {"oracle_identity": {"patient_id": ""}},
        {"oracle_identities": "p"},
    ],
)
def test_a_session_without_a_usable_identity_is_refused(info: object) -> None:
    with pytest.raises(ValidationError):
        session_identity(info, 0, 1)


def test_the_policy_update_is_the_rows_own_step() -> None:
    # verl V1 gives every sample the step whose dataloader made it (async: older than now).
    assert policy_update_of({"global_steps": 4}, 9) == 4
    assert policy_update_of({}, 9) == 9
    with pytest.raises(ValidationError, match="no policy update"):
        policy_update_of({}, None)
    with pytest.raises(ValidationError, match="negative"):
        policy_update_of({"global_steps": -1}, None)


def test_the_id_prefix_never_is_the_id() -> None:
    assert episode_prefix({"index": 7, "uid": "u"}) == "verl.index-7"
    assert episode_prefix({"uid": "u"}) == "verl.uid-u"
    assert episode_prefix({}) == "verl.session"


def test_dropped_sessions_are_counted_by_reason() -> None:
    dropped = DroppedSessions()
    dropped.add("unavailable")
    dropped.add("unavailable")
    dropped.add("RECONCILIATION_REQUIRED")
    assert dropped.total == 3
    assert dropped.by_reason() == {"unavailable": 2, "RECONCILIATION_REQUIRED": 1}


def test_load_object_reads_both_spellings() -> None:
    assert load_object("rewardseal.trainers.verl.agent_loop:CLASS_NAME") == CLASS_NAME
    assert load_object("rewardseal.trainers.verl.agent_loop.CLASS_NAME") == CLASS_NAME
    with pytest.raises(ValidationError) as caught:
        load_object("rewardseal.nowhere:thing")
    assert caught.value.reason == "invalid_setting"
