"""The corpus a sandbox calibration names: the generic fault classes, written into a sandbox.

A contract's certificate policy pins the corpus its calibration must come from (R-MSG-3,
R-C-3). ``rewardseal-worker calibrate`` draws its trials from the seeded generator of
:mod:`.trials` over the generic fault classes the contract's effects can express, writes each one
into a sandbox copy of the system of record and reads it back through the bundle's own reader;
this document names that corpus, and ``contract init`` pins its digest in the starting contract.

A contract with task parameters (R-MSG-11) runs another corpus: each trial's values drawn from
the declaration, or from task rows whose digest the document holds (R-CAL-6), so the digest it
pins says how they were drawn (:func:`sandbox_corpus_digest`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rewardseal.core.digest import digest_json
from rewardseal.core.faults import GENERIC_FAULT_CLASSES
from rewardseal.core.task_parameters import DECLARATION_DRAWING, ROWS_DRAWING
from rewardseal.v1.contract_pb2 import RewardContract

__all__ = [
    "SANDBOX_CORPUS",
    "SANDBOX_CORPUS_DIGEST",
    "SANDBOX_PARAMETERIZED_CORPUS",
    "SANDBOX_PARAMETERIZED_CORPUS_DIGEST",
    "sandbox_corpus",
    "sandbox_corpus_digest",
]

SANDBOX_CORPUS: Final[dict[str, Any]] = {
    "corpus": "rewardseal.sandbox-faults",
    "version": 1,
    "fault_classes": list(GENERIC_FAULT_CLASSES),
}
"""What a sandbox calibration runs: generic fault classes, each trial written into a sandbox."""
SANDBOX_CORPUS_DIGEST: Final = digest_json(SANDBOX_CORPUS)
"""``digest_json`` of :data:`SANDBOX_CORPUS`: the ``calibration_corpus_digest`` to pin."""
SANDBOX_PARAMETERIZED_CORPUS: Final[dict[str, Any]] = {
    **SANDBOX_CORPUS,
    "task_parameters": DECLARATION_DRAWING,
}
"""The sandbox corpus of a contract with task parameters: values drawn from the declaration."""
SANDBOX_PARAMETERIZED_CORPUS_DIGEST: Final = digest_json(SANDBOX_PARAMETERIZED_CORPUS)


def sandbox_corpus(
    contract: RewardContract, rows: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The corpus document a sandbox calibration of ``contract`` runs: with ``rows`` (task rows,
    checked), the parameterized corpus naming the rows' digest (their JSON list, in order)."""
    if not contract.task_parameters:
        return SANDBOX_CORPUS
    if rows is None:
        return SANDBOX_PARAMETERIZED_CORPUS
    drawn = {"drawing": ROWS_DRAWING, "rows_digest": digest_json([dict(r) for r in rows])}
    return {**SANDBOX_CORPUS, "task_parameters": drawn}


def sandbox_corpus_digest(
    contract: RewardContract, rows: Sequence[Mapping[str, Any]] | None = None
) -> str:
    """The corpus digest a sandbox calibration of ``contract`` (with task ``rows``, if any)
    runs: the one the contract must pin."""
    return digest_json(sandbox_corpus(contract, rows))
