"""rewardseal-mockmed-extradup: a tier-2 certified reward for one synthetic EMR CREATE.

The policy is told to create exactly one record and answers with a JSON action report. The
reward replays the report on a fresh in-memory store and pays 1.0 only when a read of the store
verifies the spec's effect (``extradup.sor_check`` + ``seal_verdict``). Nothing the policy says
about its effect (a banner, a claim, screen evidence) is ever scored.

Modules that need no verifiers: :mod:`.tasks` (rows and prompts), :mod:`.reward` (the reward),
:mod:`.certify` (``certify_corpus``/``self_test``), :mod:`.scripted_policy` (the scripted
OpenAI-compatible server). The verifiers plugin (:mod:`.environment`) and the eval helpers
(:mod:`.evaluation`, :mod:`.check_fails_closed`) import verifiers; their names below are
resolved lazily so that importing this package never does.
"""

from __future__ import annotations

import importlib
from typing import Any

from .certify import CorpusReport, certify_corpus, self_test
from .reward import Certification, certified_reward, certify_completion, certify_row

__all__ = [
    "ENV_ID",
    "Certification",
    "CorpusReport",
    "ExtraDupTaskset",
    "SingleTurnHarness",
    "certified_reward",
    "certify_completion",
    "certify_corpus",
    "certify_row",
    "load_environment",
    "self_test",
]

_LAZY = {
    "ENV_ID": "environment",
    "ExtraDupTaskset": "environment",
    "SingleTurnHarness": "environment",
    "load_environment": "environment",
}


def __getattr__(name: str) -> Any:
    """Import the verifiers plugin on first use of one of its names."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
