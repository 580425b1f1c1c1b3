"""transformers' ``TrainerCallback``, imported on first use by the TRL callbacks.

The integrity gate and the reward attestation callback are built lazily
(:mod:`rewardseal.trainers.lazy`) so that the client imports without transformers; both get
their base class here, with one error when transformers is absent.
"""

from __future__ import annotations

from typing import Any

from rewardseal.core.errors import RewardSealError

__all__ = ["trainer_callback_base"]


def trainer_callback_base(purpose: str) -> type[Any]:
    """``transformers.TrainerCallback``.

    Args:
        purpose: what needs it, for the error (e.g. ``"the integrity gate"``).

    Raises:
        RewardSealError: (reason ``transformers_missing``) transformers is not installed.
    """
    try:
        from transformers import TrainerCallback
    except ImportError as exc:
        raise RewardSealError(
            f"transformers is not installed or cannot be imported ({exc}); install trl to use "
            f"{purpose}",
            reason="transformers_missing",
        ) from None
    base: type[Any] = TrainerCallback
    return base
