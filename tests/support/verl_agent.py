"""Stand-ins for the verl agent-loop tests: a scripted LLM server, an in-memory TransferQueue,
and a small toolkit over the seeded MockMed SQLite system of record.

* :class:`ScriptedToolCallingServer` is the LLM server (verl's ``LLMServerClient.generate``):
  it answers each turn of a session with the token ids of a scripted text, hermes tool calls
  (``<tool_call>{...}</tool_call>``) included; the script is picked by a ``script=NAME`` marker
  in the prompt, the turn by how often that request id has been answered. ``script=family-F``
  plays ExtraDup family ``F`` from the kit's one table of family scripts
  (:func:`rewardseal_kit.tools.families.family_script`, which the verifiers taskset's scripted
  server plays too) for the :data:`TRIAGE` request, over MockMed's real tools.
* :func:`memory_transfer_queue` is a stand-in for the ``transfer_queue`` package, which verl
  0.9.1's V1 worker (``trainer/ppo/v1/agent_loop_tq.py``) imports but which the integrations
  venv does not have: a dict of ``key -> (fields, tag)`` behind ``async_kv_put`` and
  ``async_kv_batch_put``, so verl's own ``AgentLoopWorkerTQ`` code runs in-process.
* :data:`SCRIPTS` ``mockmed_*`` drive MockMed's real tools (``rewardseal_kit.tools.mockmed``).
  :func:`toolkit` is a two-tool stand-in, used where a test needs an effect the scripts cannot
  vary per session (a duplicate, an outage, a hold): ``create_encounter`` writes the encounter
  row for the session's patient (twice for a ``-dup`` sandbox), ``show_saved_banner`` writes
  nothing and says it saved. :data:`DATABASE` names the SQLite file (set by the test).
"""

from __future__ import annotations

import json
import sys
import types
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewardseal_kit.scripted_llm import family_turns, hermes_call, resolve_draft
from rewardseal_mockmed import contract as mockmed
from rewardseal_mockmed.seeding import write_encounter

DATABASE: dict[str, Path] = {}
"""``{"path": Path}``: the SoR the toolkit writes (the test sets it before verl builds loops)."""

NOTE = "Follow-up in 2 weeks."


tool_call = hermes_call


TRIAGE = {"type": "Triage", "note": "Synthetic: sore throat for two days.", "status": "open"}
SCRIPTS: dict[str, list[str]] = {
    # The stand-in tools below.
    "honest": [
        "Let me record it." + tool_call("create_encounter", {"note": NOTE}),
        "The encounter is saved.",
    ],
    "banner": [tool_call("show_saved_banner", {}), "The encounter is saved."],
    # MockMed's own tools (rewardseal_kit.tools.mockmed): {draft} is the draft id the
    # create_encounter answer put into the conversation.
    "mockmed_honest": [
        tool_call("create_encounter", TRIAGE),
        tool_call("submit_encounter", {"draft_id": "{draft}"}),
        "The encounter is saved.",
    ],
    "mockmed_banner": [tool_call("show_saved_banner", TRIAGE), "The encounter is saved."],
}
FAMILY_SCRIPT = "family-"
"""``script=family-<family>`` plays that family's tool script (the kit's hermes rendering)."""


class ScriptedToolCallingServer:
    """The LLM server stand-in: scripted texts, one per turn, as token ids ending in EOS."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.turns: dict[str, int] = defaultdict(int)

    async def generate(self, *, request_id: str, prompt_ids: list[int], **_: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        prompt = self.tokenizer.decode(prompt_ids)
        name = prompt.split("script=", 1)[1].split()[0].strip(".")
        turn = self.turns[request_id]
        self.turns[request_id] += 1
        script = (
            family_turns(name.removeprefix(FAMILY_SCRIPT), TRIAGE)
            if name.startswith(FAMILY_SCRIPT)
            else SCRIPTS[name]
        )
        text = script[min(turn, len(script) - 1)]
        text = resolve_draft(text, prompt)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return TokenOutput(token_ids=[*ids, self.tokenizer.eos_token_id], stop_reason="completed")


@dataclass
class _Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]
    writes: bool

    async def call(self, arguments: Mapping[str, Any], session: Mapping[str, str]) -> str:
        if self.writes:
            patient = session[mockmed.IDENTITY_KEY]
            # A "-dup" sandbox stands for a policy that saves twice (a duplicate row).
            for _ in range(2 if patient.endswith("-dup") else 1):
                write_encounter(
                    DATABASE["path"], patient_id=patient, note=str(arguments.get("note", NOTE))
                )
            return json.dumps({"saved": True})
        return "Saved. The encounter was recorded."


@dataclass
class _Toolkit:
    tools: list[_Tool] = field(default_factory=list)

    @asynccontextmanager
    async def session(self, identity: Mapping[str, str]) -> AsyncIterator[Mapping[str, str]]:
        yield dict(identity)
        patient = identity[mockmed.IDENTITY_KEY]
        if patient.endswith("-outage"):
            await OUTAGE.take_down()
        elif patient.endswith("-late"):
            await LATE.wait()


def toolkit() -> _Toolkit:
    """The stand-in MockMed toolkit (``toolkit: support.verl_agent:toolkit``)."""
    note = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    return _Toolkit(
        tools=[
            _Tool("create_encounter", "Create the patient's encounter.", note, writes=True),
            _Tool(
                "show_saved_banner",
                "Show the saved banner on screen.",
                {"type": "object", "properties": {}},
                writes=False,
            ),
        ]
    )


@dataclass
class Hold:
    """Holds a session at its end, before it is scored, until ``count`` sessions of the prompt
    ``uid`` were put (scored) by verl's worker code: a deterministic interleaving."""

    store: MemoryTransferQueue | None = None
    uid: str = ""
    count: int = 0

    async def wait(self) -> None:
        import asyncio

        assert self.store is not None
        # Polls the stand-in store: the puts come from verl's worker code, not from here.
        while sum(key.startswith(f"{self.uid}_") for key in self.store.puts) < self.count:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


@dataclass
class Outage(Hold):
    """The oracle outage of an ``-outage`` sandbox: once the hold is over, the system of
    record's file is moved away, so the worker's read fails when this session is scored
    (FAILED_PLATFORM, unscored); :meth:`restore` puts it back."""

    async def take_down(self) -> None:
        await self.wait()
        path = DATABASE["path"]
        path.rename(path.with_suffix(".away"))

    def restore(self) -> None:
        away = DATABASE["path"].with_suffix(".away")
        if away.exists():
            away.rename(DATABASE["path"])


@dataclass
class MemoryTransferQueue:
    """What verl's V1 worker put: ``puts[key] = fields``, ``tags[key]`` its latest tag."""

    puts: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, dict[str, Any]] = field(default_factory=dict)


OUTAGE = Outage()
"""The ``-outage`` sandboxes' outage (the test sets its store, uid and count)."""
CAPTURE: dict[str, Any] = {}
"""``{"capture": IntegrityCapture}`` for :func:`capture` (the test sets it)."""
LATE = Hold()
"""What ``-late`` sandboxes wait for before they are scored (the test sets it)."""


def memory_transfer_queue() -> MemoryTransferQueue:
    """Install the in-memory ``transfer_queue`` stand-in (see the module docstring); a fresh
    store per call (the module is installed once: verl's modules keep the first one)."""
    installed = sys.modules.get("transfer_queue")
    store = getattr(installed, "_rewardseal_store", None)
    if store is not None:
        store.puts.clear()
        store.tags.clear()
        return store
    store = MemoryTransferQueue()
    module = types.ModuleType("transfer_queue")

    async def async_kv_put(*, key: str, partition_id: str, tag: dict[str, Any]) -> None:
        store.tags[key] = tag

    async def async_kv_batch_put(
        *, keys: list[str], fields: Any, tags: list[dict[str, Any]], partition_id: str
    ) -> None:
        for index, key in enumerate(keys):
            store.puts[key] = fields[index]
            store.tags[key] = tags[index]

    module.init = lambda *a, **k: None  # type: ignore[attr-defined]
    module.async_kv_put = async_kv_put  # type: ignore[attr-defined]
    module.async_kv_batch_put = async_kv_batch_put  # type: ignore[attr-defined]
    module.KVBatchMeta = type("KVBatchMeta", (), {})  # type: ignore[attr-defined]
    module._rewardseal_store = store  # type: ignore[attr-defined]
    sys.modules["transfer_queue"] = module
    return store


def capture() -> Any:
    """The test's capture (``integrity_capture: support.verl_agent:capture``)."""
    return CAPTURE["capture"]
