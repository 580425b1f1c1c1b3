"""The refusals the receipts and the policy ledger decide (R-W-7, R-W-8), worded once.

A score is refused for these either before it is judged (the scorer's checks against the
store's read, which knows the contract's highest update) or by the commit that would have
stored it (:mod:`rewardseal_worker.store.receipts`' outcomes, decided under the ledger lock,
which name no highest update: it moved while the batch was judged). Both build the error here,
so the two paths cannot word it apart. The classes are :mod:`rewardseal.core.errors`'.
"""

from __future__ import annotations

from rewardseal.core.errors import DuplicateEpisode, PolicyUpdateJump, PolicyUpdateRegressed

__all__ = ["duplicate_episode", "policy_update_jumped", "policy_update_regressed"]


def duplicate_episode(episode_id: str, receipt_id: str) -> DuplicateEpisode:
    """``episode_id`` already has a receipt, ``receipt_id`` (R-W-8)."""
    return DuplicateEpisode(
        f"episode {episode_id} already has a receipt", metadata={"receipt_id": receipt_id}
    )


def policy_update_regressed(policy_update: int, highest: int | None) -> PolicyUpdateRegressed:
    """``policy_update`` is below the contract's highest scored update (``highest`` when
    known, R-W-7)."""
    below = f"below {highest}, " if highest is not None else "below "
    return PolicyUpdateRegressed(
        f"policy update {policy_update} is {below}the highest already scored for this "
        "contract (R-W-7)"
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
