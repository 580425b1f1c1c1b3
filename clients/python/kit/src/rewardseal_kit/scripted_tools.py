"""A scripted tool-calling policy for TRL's ``GRPOTrainer``: the stand-in for sampling, named
as such, so a multi-turn tool run on the tiny model (:mod:`rewardseal_kit.tiny_models`) calls
the MockMed tools the way a trained agent would, honestly or not.

The tiny model's samples are noise and never call a tool. :func:`scripted_policy_trainer`
subclasses a ``GRPOTrainer`` class and replaces only ``_generate_single_turn`` (TRL 1.16: the
token ids of one assistant turn per prompt): the script reads the conversation TRL built so far
and answers with the ids of its next turn, a ``<tool_call>`` JSON or the closing text.
Everything else stays TRL's: the prompt with the tools' schemas, the response parser, the
tool-calling loop, the tool mask, rewards, advantages and the optimizer step. Used by
examples/trl_environment.py and tests/integrations/test_trl_environment.py.

The script is chosen by a marker in the prompt, ``[script: FAMILY]``: the honest ``control``
or a hacking family of the kit's one table (:func:`rewardseal_kit.tools.families.family_script`,
which the verifiers taskset's scripted server and verl's scripted LLM server play too), for the
contract's Triage request (:data:`REQUEST`). Its turns are written as the verl stand-in writes
them (:func:`rewardseal_kit.scripted_llm.family_turns`: ``<tool_call>{json}</tool_call>``,
which TRL's Qwen2.5 response schema parses), a submit naming the latest draft the
conversation shows. The turn is how many tool answers (``<tool_response>``) the conversation
holds. A prompt naming no family closes at once (nothing done). Needs trl (imported by the
caller, who passes the class).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Final

from rewardseal_kit.scripted_llm import family_turns, resolve_draft
from rewardseal_mockmed.extradup import FAMILIES

__all__ = ["NOTE", "REQUEST", "scripted_policy_trainer", "scripted_turn"]

NOTE: Final = "Synthetic: sore throat for two days."
REQUEST: Final = {"type": "Triage", "note": NOTE, "status": "open"}
"""The encounter every script is asked for (the seeded MockMed contract's honest episode)."""
_MARKER: Final = re.compile(r"\[script: ([a-z_]+)\]")
_TOOL_RESPONSE: Final = "<tool_response>"  # how Qwen2.5's template shows a tool's answer
_END: Final = "<|im_end|>"
_CLOSING: Final = "Nothing to do."


def scripted_turn(conversation: str) -> str:
    """The script's next assistant turn, from the rendered conversation so far."""
    named = _MARKER.search(conversation)
    if named is None or named.group(1) not in FAMILIES:
        return f"{_CLOSING}{_END}"
    turns = family_turns(named.group(1), REQUEST)
    turn = conversation.count(_TOOL_RESPONSE)
    return f"{resolve_draft(turns[min(turn, len(turns) - 1)], conversation)}{_END}"


def scripted_policy_trainer(base: type[Any]) -> type[Any]:
    """``base`` (``trl.GRPOTrainer``) whose sampling is :func:`scripted_turn`; the class keeps
    every turn it played in ``turns``."""

    class ScriptedPolicyTrainer(base):  # type: ignore[misc]
        turns: ClassVar[list[str]] = []

        def _generate_single_turn(
            self,
            prompt_ids: list[list[int]],
            images: Any,
            multimodal_fields: Any,
            num_generations: int,
            has_tool_images: bool = False,
        ) -> tuple[list[list[int]], None]:
            tokenizer = self.processing_class
            completions = []
            for ids in prompt_ids:  # one turn per prompt (TRL repeated them per generation)
                text = scripted_turn(tokenizer.decode(ids))
                self.turns.append(text)
                encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
                completions.append([*encoded, tokenizer.eos_token_id])
            return completions, None

    return ScriptedPolicyTrainer
