"""The verl adapter (docs/spec.md §11): certified rewards for verl's trainers.

:mod:`~rewardseal.trainers.verl.manager` (the batch reward manager, ``CertifiedRewardManager``,
and its pure parts), :mod:`~rewardseal.trainers.verl.settings` (``ManagerSettings``, read from
``reward_kwargs``), :mod:`~rewardseal.trainers.verl.loop` (verl 0.9's per-sample reward loop),
:mod:`~rewardseal.trainers.verl.streaming` (the agent-loop manager for streamed rewards),
:mod:`~rewardseal.trainers.verl.loop_gate` (the integrity gate on the reward loop's driver) and
:mod:`~rewardseal.trainers.verl.tensors`. The classes that subclass verl's are built on first
access of their modules' attributes (:mod:`rewardseal.trainers.lazy`), so verl's configuration
names them by those modules (``pkg://rewardseal.trainers.verl.loop``,
:data:`rewardseal.trainers.verl.streaming.MANAGER_FQN`). This package re-exports the batch
manager's names and imports neither verl nor torch.
"""

from rewardseal.trainers.verl.manager import (
    ALL_UNSCORED_GROUP_REWARD,
    DEFAULT_NAME,
    BatchRewards,
    CertifiedRewardManager,
    Sample,
    batch_rewards,
    descriptor_for,
    fill_group_rewards,
    policy_update_from,
    register_with_verl,
    samples_from_batch,
    score_samples,
)
from rewardseal.trainers.verl.settings import (
    DEFAULT_MAX_BATCH,
    ManagerSettings,
    config_get,
    missing_verl,
)

__all__ = [
    "ALL_UNSCORED_GROUP_REWARD",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_NAME",
    "BatchRewards",
    "CertifiedRewardManager",
    "ManagerSettings",
    "Sample",
    "batch_rewards",
    "config_get",
    "descriptor_for",
    "fill_group_rewards",
    "missing_verl",
    "policy_update_from",
    "register_with_verl",
    "samples_from_batch",
    "score_samples",
]
