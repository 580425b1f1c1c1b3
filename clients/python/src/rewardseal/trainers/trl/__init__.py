"""The TRL adapter (docs/spec.md §11): certified reward functions for ``GRPOTrainer``
(:mod:`rewardseal.trainers.trl.rewards`), multi-turn tool episodes for its
``environment_factory`` (:mod:`rewardseal.trainers.trl.environment`), the integrity gate
callback (:mod:`rewardseal.trainers.trl.gate`) and the reward attestation callback, which writes
a signed attestation into every checkpoint (:mod:`rewardseal.trainers.trl.attestation`).

``IntegrityGate`` and ``RewardAttestationCallback`` subclass ``transformers.TrainerCallback``, so
each is built on first access of this package's attribute (:mod:`rewardseal.trainers.lazy`); the
package imports neither ``trl``, ``transformers`` nor ``torch``.
"""

from __future__ import annotations

from typing import Any

from rewardseal.trainers.lazy import LazyClasses
from rewardseal.trainers.trl.attestation import CLASS_NAME as ATTESTATION_CLASS_NAME
from rewardseal.trainers.trl.attestation import reward_attestation_class
from rewardseal.trainers.trl.environment import (
    CertifiedToolEnvironment,
    CertifiedToolEpisodes,
    EnvironmentReward,
)
from rewardseal.trainers.trl.gate import CLASS_NAME, integrity_gate_class
from rewardseal.trainers.trl.rewards import (
    DEFAULT_MAX_BATCH,
    PAID_SHARE_METRIC,
    SCORED_SHARE_METRIC,
    UNSCORED_SHARE_METRIC,
    AsyncCertifiedRewardFunction,
    CertifiedRewardFunction,
    completion_text,
)

__all__ = [
    "DEFAULT_MAX_BATCH",
    "AsyncCertifiedRewardFunction",
    "CertifiedRewardFunction",
    "CertifiedToolEnvironment",
    "CertifiedToolEpisodes",
    "EnvironmentReward",
    "IntegrityGate",
    "PAID_SHARE_METRIC",
    "RewardAttestationCallback",
    "SCORED_SHARE_METRIC",
    "UNSCORED_SHARE_METRIC",
    "completion_text",
]

_lazy = LazyClasses(__name__)
_lazy.serves(CLASS_NAME, integrity_gate_class)
_lazy.serves(ATTESTATION_CLASS_NAME, reward_attestation_class)


def __getattr__(name: str) -> Any:
    """``IntegrityGate`` (:mod:`rewardseal.trainers.trl.gate`) and
    ``RewardAttestationCallback`` (:mod:`rewardseal.trainers.trl.attestation`), built on first
    access."""
    return _lazy.attribute(name)
