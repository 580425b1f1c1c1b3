"""The refusals the receipts and the policy ledger decide (R-W-7, R-W-8), worded once.

A score is refused for these either before it is judged (the scorer's checks against the
store's read, which knows the contract's highest update) or by the commit that would have
stored it (:mod:`rewardseal_worker.store.receipts`' outcomes, decided under the ledger lock:
a regression names the highest as it stood there, a jump does not: the bound is the ledger
before the transaction). Both build the error here, so the two paths cannot word it apart.
The classes are :mod:`rewardseal.core.errors`'.
"""

from __future__ import annotations

from rewardseal.core.errors import DuplicateEpisode, PolicyUpdateJump, PolicyUpdateRegressed

__all__ = [
    "MAX_POLICY_LAG_ENV",
    "duplicate_episode",
    "policy_update_jumped",
    "policy_update_regressed",
]

MAX_POLICY_LAG_ENV = "REWARDSEAL_WORKER_MAX_POLICY_LAG"
"""The variable of ``--max-policy-lag`` (named here so the refusal cannot drift from it)."""


def duplicate_episode(episode_id: str, receipt_id: str) -> DuplicateEpisode:
    """``episode_id`` already has a receipt, ``receipt_id`` (R-W-8)."""
    return DuplicateEpisode(
        f"episode {episode_id} already has a receipt", metadata={"receipt_id": receipt_id}
    )


def policy_update_regressed(
    policy_update: int, highest: int, max_lag: int
) -> PolicyUpdateRegressed:
    """``policy_update`` is below the window of updates a score is accepted at: more than
    ``max_lag`` below ``highest``, the contract's highest scored update (R-W-7).

    The window goes into the ErrorInfo metadata (``highest``, ``max_policy_lag``,
    ``lowest_accepted``) and the message names the setting an async trainer raises, so a
    trainer that scores its steps later than the worker allows is told how to fix it."""
    lowest = highest - max_lag
    return PolicyUpdateRegressed(
        f"policy update {policy_update} is below {lowest}, the lowest this worker accepts for "
        f"this contract (the highest already scored, {highest}, less the allowed lag of "
        f"{max_lag}; R-W-7): a trainer that scores steps this late needs a larger "
        f"--max-policy-lag ({MAX_POLICY_LAG_ENV}) on the worker",
        metadata={
            "highest": str(highest),
            "max_policy_lag": str(max_lag),
            "lowest_accepted": str(lowest),
        },
    )


def policy_update_jumped(
    policy_update: int, highest: int | None, max_jump: int
) -> PolicyUpdateJump:
    """``policy_update`` is more than ``max_jump`` above the contract's highest scored update
    (``highest`` when known; else the highest when the call began)."""
    above = (
        f"{highest}, the highest scored for this contract"
        if highest is not None
        else "the highest scored for this contract when the call began"
    )
    return PolicyUpdateJump(
        f"policy update {policy_update} is more than {max_jump} above "
        f"{above} (REWARDSEAL_WORKER_MAX_POLICY_UPDATE_JUMP)",
        metadata={"max_jump": str(max_jump)},
    )
