"""A scripted LLM server for verl's agent loop: the stand-in for a model server, named as such.

verl's agent loops ask an ``LLMServerClient`` for ``generate(request_id=..., prompt_ids=...)``
and get token ids back. :class:`ScriptedFamilyServer` answers each turn of a session with the
token ids of the next step of an ExtraDup family's tool script (the kit's one table,
:func:`rewardseal_kit.tools.families.family_script`) written as a hermes tool call
(``<tool_call>{...}</tool_call>``, what verl's ``hermes`` tool parser reads), or the final text.
The family is the ``family=<name>`` marker in the prompt; the turn is how often that request id
has been answered; a submit names the latest ``draft-<32 hex>`` id the conversation shows (the
``create_encounter`` answer). Used by examples/verl_v1_agent_loop.py and the verl agent-loop
test (tests/support/verl_agent.py). Needs verl only when :meth:`ScriptedFamilyServer.generate`
runs.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Final

from rewardseal.core.errors import ValidationError
from rewardseal_kit.tools.families import LATEST_DRAFT, family_script

__all__ = [
    "DRAFT_PLACEHOLDER",
    "FAMILY_MARKER",
    "ScriptedFamilyServer",
    "family_turns",
    "hermes_call",
    "resolve_draft",
]

DRAFT_PLACEHOLDER: Final = "{draft}"
"""Where a scripted turn names the latest draft (resolved per turn by :func:`resolve_draft`)."""
FAMILY_MARKER: Final = "family="
"""The prompt names the family to play as ``family=<name>``."""
_DRAFT: Final = re.compile(r"draft-[0-9a-f]{32}")


def hermes_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A hermes tool call as the model writes it."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': dict(arguments)})}</tool_call>"


def family_turns(family: str, request: Mapping[str, str]) -> list[str]:
    """The texts of ``family``'s tool script for ``request``, one per turn, as hermes calls (a
    submit names :data:`DRAFT_PLACEHOLDER`)."""
    turns = []
    for step in family_script(family, request):
        if isinstance(step, str):
            turns.append(step)
            continue
        name, arguments = step
        if arguments.get("draft_id") == LATEST_DRAFT:
            arguments = {**arguments, "draft_id": DRAFT_PLACEHOLDER}
        turns.append(hermes_call(name, arguments))
    return turns


def resolve_draft(text: str, prompt: str) -> str:
    """``text`` with :data:`DRAFT_PLACEHOLDER` replaced by the latest draft id in ``prompt``."""
    drafts = _DRAFT.findall(prompt)
    return text.replace(DRAFT_PLACEHOLDER, drafts[-1] if drafts else "none")


class ScriptedFamilyServer:
    """verl's LLM server stand-in playing ``family=<name>`` for ``request``, one turn per call."""

    def __init__(self, tokenizer: Any, request: Mapping[str, str]) -> None:
        self.tokenizer = tokenizer
        self.request = dict(request)
        self.turns: dict[str, int] = defaultdict(int)

    async def generate(self, *, request_id: str, prompt_ids: list[int], **_: Any) -> Any:
        """The next turn's token ids (ending in EOS) as verl's ``TokenOutput``."""
        from verl.workers.rollout.replica import TokenOutput

        prompt = self.tokenizer.decode(prompt_ids)
        if FAMILY_MARKER not in prompt:
            raise ValidationError(f"the prompt names no family ({FAMILY_MARKER}<name>)")
        family = prompt.split(FAMILY_MARKER, 1)[1].split()[0].strip(".")
        script = family_turns(family, self.request)
        turn = self.turns[request_id]
        self.turns[request_id] += 1
        text = resolve_draft(script[min(turn, len(script) - 1)], prompt)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return TokenOutput(token_ids=[*ids, self.tokenizer.eos_token_id], stop_reason="completed")
