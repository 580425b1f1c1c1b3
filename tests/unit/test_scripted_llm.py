"""The kit's family scripts rendered as hermes tool-call turns (no verl needed)."""

from __future__ import annotations

import json

import pytest

from rewardseal.core.errors import ValidationError
from rewardseal_kit.scripted_llm import DRAFT_PLACEHOLDER, family_turns, resolve_draft
from rewardseal_kit.tools.families import DONE_TEXT, family_script
from rewardseal_mockmed.extradup import FAMILIES

REQUEST = {"type": "Triage", "note": "Synthetic.", "status": "open"}


def _calls(turns: list[str]) -> list[tuple[str, dict[str, str]]]:
    calls = []
    for turn in turns:
        if turn.startswith("<tool_call>"):
            body = json.loads(turn.removeprefix("<tool_call>").removesuffix("</tool_call>"))
            calls.append((body["name"], body["arguments"]))
    return calls


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_renders_its_table_script(family: str) -> None:
    turns = family_turns(family, REQUEST)
    assert len(turns) == len(family_script(family, REQUEST))
    assert turns[-1] == DONE_TEXT
    steps = [step for step in family_script(family, REQUEST) if not isinstance(step, str)]
    assert [name for name, _ in _calls(turns)] == [name for name, _ in steps]


def test_dup_submits_twice_naming_the_latest_draft() -> None:
    calls = _calls(family_turns("dup", REQUEST))
    submits = [arguments for name, arguments in calls if name == "submit_encounter"]
    assert submits == [{"draft_id": DRAFT_PLACEHOLDER}] * 2
    prompt = "opened draft-" + "a" * 32 + " then draft-" + "b" * 32
    assert resolve_draft(DRAFT_PLACEHOLDER, prompt) == "draft-" + "b" * 32
    assert resolve_draft(DRAFT_PLACEHOLDER, "nothing opened") == "none"


def test_an_unknown_family_is_refused() -> None:
    with pytest.raises(ValidationError):
        family_turns("nope", REQUEST)


def test_trls_scripted_policy_plays_the_same_table_turn_by_turn() -> None:
    # rewardseal_kit.scripted_tools (TRL's stand-in for sampling) reads the rendered
    # conversation: the family from its marker, the turn from the tool answers shown so far.
    from rewardseal_kit.scripted_tools import REQUEST as TRL_REQUEST
    from rewardseal_kit.scripted_tools import scripted_turn

    expected = family_turns("control", TRL_REQUEST)
    conversation = "user: Create one Triage encounter. [script: control]\n"
    played = []
    for _ in expected:
        turn = scripted_turn(conversation)
        played.append(turn.removesuffix("<|im_end|>"))
        answer = '{"draft": {"id": "draft-' + "c" * 32 + '"}}'
        conversation += f"{turn}\n<tool_response>\n{answer}\n</tool_response>\n"
    assert played[0] == expected[0]  # lookup_patient with {}
    assert json.loads(played[0].removeprefix("<tool_call>").removesuffix("</tool_call>")) == {
        "name": "lookup_patient",
        "arguments": {},
    }
    assert played[2] == expected[2].replace(DRAFT_PLACEHOLDER, "draft-" + "c" * 32)
    assert played[-1] == DONE_TEXT
    # Without a known family the policy closes at once.
    assert "<tool_call>" not in scripted_turn("[script: nonsense]")
    assert "<tool_call>" not in scripted_turn("no marker")
