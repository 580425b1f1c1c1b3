"""The multi-turn tool tasks, and the scripted tool-calling policy of every family.

A tool task asks the agent to record one Triage encounter, with a given note, for the episode's
patient through MockMed's tools (``rewardseal_kit.tools.mockmed``: drafts are opened with
``create_encounter`` and stored only by ``submit_encounter``). The row carries the dataset patient
(``info["identity"]``); each episode acts on its own sandbox patient derived from it and the
episode id (``rewardseal.trainers.actors.sandbox_identity``).

:func:`scripted_turn` plays one family as a multi-turn tool-calling policy: given the
conversation so far it returns the next assistant message (one tool call, or the final text).
The families are ExtraDup's, acted out with tools; their scripts are the kit's one table
(:func:`rewardseal_kit.tools.families.family_script`, re-exported here), shared with the verl
agent-loop test. A submit step names the draft the latest ``create_encounter`` answer opened
(``{"draft": {"id": ...}}`` in the conversation's tool messages).

No verifiers here: the scripted server and the CPU tests use this module alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rewardseal.core.errors import ValidationError
from rewardseal_kit.tools.families import (
    DONE_TEXT,
    LATEST_DRAFT,
    REQUEST_KEYS,
    ToolStep,
    family_script,
)
from rewardseal_mockmed.contract import IDENTITY_KEY

__all__ = [
    "DONE_TEXT",
    "LATEST_DRAFT",
    "TOOL_TASK_STATUS",
    "TOOL_TASK_TYPE",
    "ToolStep",
    "family_script",
    "latest_draft",
    "request_from_prompt",
    "scripted_turn",
    "tool_prompt",
    "tool_rows",
]

TOOL_TASK_TYPE: Final = "Triage"
"""The encounter type every tool task asks for (the seeded contract's required effect)."""
TOOL_TASK_STATUS: Final = "open"
"""The status every tool task asks for (the contract requires every encounter field)."""
_NOTES: Final = (
    "Follow-up in 2 weeks.",
    "Mild fever; fluids and rest.",
    "Sprained ankle; ice and elevation.",
    "Routine check; no findings.",
)
_PATIENT_PREFIX: Final = "P-tools-"
_FENCE: Final = re.compile(r"```json\s*\n(.*?)\n```", re.DOTALL)
_MAX_TASKS: Final = 1000


def tool_prompt(note: str) -> str:
    """The instruction: record one Triage encounter with ``note``, through the tools."""
    block = json.dumps(
        {"type": TOOL_TASK_TYPE, "note": note, "status": TOOL_TASK_STATUS}, sort_keys=True
    )
    return (
        "You are working in a synthetic EMR for this episode's patient. Record exactly one "
        "encounter with exactly the fields below, using the tools. The work is checked "
        "by reading the system of record afterwards; what the screen shows or what you say is "
        f"not.\n\n```json\n{block}\n```\n\nWhen you are finished, answer in one sentence."
    )


def request_from_prompt(prompt: str) -> dict[str, str]:
    """The ``{"type", "note", "status"}`` the last fenced ``json`` block of ``prompt`` asks for."""
    blocks = _FENCE.findall(prompt)
    if not blocks:
        raise ValidationError("the prompt carries no fenced json block with the encounter")
    try:
        data = json.loads(blocks[-1])
    except ValueError as exc:
        raise ValidationError(f"the encounter block is not JSON: {exc}") from None
    if not isinstance(data, Mapping) or set(data) != set(REQUEST_KEYS):
        raise ValidationError(f"the encounter block needs exactly the keys {list(REQUEST_KEYS)}")
    return {key: str(data[key]) for key in REQUEST_KEYS}


def tool_rows(num_tasks: int, seed: int = 0) -> list[dict[str, Any]]:
    """``num_tasks`` rows: a prompt and ``info`` with the dataset patient's identity."""
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int):
        raise ValidationError("num_tasks must be an integer")
    if not 1 <= num_tasks <= _MAX_TASKS:
        raise ValidationError(f"num_tasks must be in 1..{_MAX_TASKS}, got {num_tasks}")
    rows = []
    for index in range(num_tasks):
        number = seed * _MAX_TASKS + index
        note = _NOTES[number % len(_NOTES)]
        identity = {IDENTITY_KEY: f"{_PATIENT_PREFIX}{number:04d}"}
        rows.append({"prompt": tool_prompt(note), "info": {"identity": identity}})
    return rows


def _text(content: Any) -> str:
    """A message's text (a string or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def latest_draft(messages: Sequence[Mapping[str, Any]]) -> str:
    """The id of the latest draft a tool answer in ``messages`` opened (``""`` if none)."""
    for message in reversed(messages):
        if message.get("role") != "tool":
            continue
        try:
            answer = json.loads(_text(message.get("content")))
        except ValueError:
            continue
        draft = answer.get("draft") if isinstance(answer, Mapping) else None
        if isinstance(draft, Mapping) and isinstance(draft.get("id"), str):
            return str(draft["id"])
    return ""


def scripted_turn(family: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The next assistant message of ``family`` for the conversation ``messages``.

    The turn is the number of assistant messages so far; the request is read from the first
    user message. Past the script's end the family repeats its final text.
    """
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    if not users:
        raise ValidationError("the request carries no user message")
    script = family_script(family, request_from_prompt(users[0]))
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    step = script[min(turn, len(script) - 1)]
    if isinstance(step, str):
        return {"role": "assistant", "content": step}
    name, arguments = step
    if arguments.get("draft_id") == LATEST_DRAFT:
        arguments = {**arguments, "draft_id": latest_draft(messages)}
    call = {
        "id": f"call_{turn}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, sort_keys=True)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}
