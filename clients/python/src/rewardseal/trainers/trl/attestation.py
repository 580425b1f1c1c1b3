"""Reward attestations for TRL checkpoints: a ``TrainerCallback`` (R-A-5; docs/provenance.md).

Usage::

    reward = CertifiedRewardFunction(worker, reward_contract_digest=digest,
                                     policy_checkpoint_id="policy.checkpoint.0001", ...)
    attest = RewardAttestationCallback.for_rewards(ControlClient(target, token=...), reward)
    trainer = GRPOTrainer(..., reward_funcs=[reward], args=GRPOConfig(save_steps=50, ...),
                          callbacks=[attest])
    trainer.train()   # every checkpoint-N/ now holds reward-attestation.dsse.json

transformers 5's ``Trainer._save_checkpoint`` writes ``<output_dir>/checkpoint-<global_step>``
(``PREFIX_CHECKPOINT_DIR``: the model, optimizer, scheduler, RNG state and
``trainer_state.json``), then ``_maybe_log_save_evaluate`` calls ``on_save``: the callback
hashes the finished directory there. The receipts that trained ``checkpoint-N`` are those TRL
scored at ``trainer_state.global_step`` 0 .. N-1 (the reward function's ``policy_update``:
rows scored at step ``u`` feed update ``u + 1``), so the attestation covers policy updates
``first_update .. N - 1``. Only the main process (``state.is_world_process_zero``) attests.

All the logic is :class:`AttestationCore` (no transformers import);
:func:`reward_attestation_class` builds ``RewardAttestationCallback`` on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.rpc.control_client import ControlClient
from rewardseal.trainers.attestation import CheckpointAttester
from rewardseal.trainers.lazy import LazyClasses
from rewardseal.trainers.trl.callback_base import trainer_callback_base
from rewardseal.trainers.trl.gate import CHECKPOINT_PREFIX

__all__ = ["CLASS_NAME", "AttestationCore", "reward_attestation_class"]

CLASS_NAME: Final = "RewardAttestationCallback"


class AttestationCore(CheckpointAttester):
    """The callback's logic over transformers-shaped ``args``/``state``/``control`` objects;
    the constructor is :class:`~rewardseal.trainers.attestation.CheckpointAttester`'s."""

    @classmethod
    def for_rewards(cls, control: ControlClient, *rewards: Any, **options: Any) -> Any:
        """The callback for the runs of ``rewards`` (certified reward functions or tool
        environments' rewards): their contract digests and policy checkpoint ids.

        Raises:
            ValidationError: no reward, or one without ``reward_contract_digest`` and
                ``policy_checkpoint_id``.
        """
        if not rewards:
            raise ValidationError("for_rewards needs at least one reward function")
        contracts: list[str] = []
        checkpoints: list[str] = []
        for reward in rewards:
            digest = getattr(reward, "reward_contract_digest", None)
            checkpoint = getattr(reward, "policy_checkpoint_id", None)
            if not isinstance(digest, str) or not isinstance(checkpoint, str):
                raise ValidationError(
                    f"{reward!r} has no reward_contract_digest and policy_checkpoint_id"
                )
            contracts.append(digest)
            checkpoints.append(checkpoint)
        return cls(
            control,
            contracts=sorted(set(contracts)),
            checkpoint_ids=sorted(set(checkpoints)),
            **options,
        )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """After ``checkpoint-<global_step>`` is written: attest it (main process only)."""
        if getattr(state, "is_world_process_zero", True):
            step = int(state.global_step)
            directory = Path(str(args.output_dir)) / f"{CHECKPOINT_PREFIX}-{step}"
            if directory.is_dir():
                self.attest(directory, step - 1)
            else:
                why = f"transformers saved no directory {directory}"
                self.unattested.append((directory, why))
                if self.required:
                    raise RewardSealError(why, reason="checkpoint_missing")
        return control


_lazy = LazyClasses(__name__)


@_lazy.builds(CLASS_NAME)
def reward_attestation_class() -> type[Any]:
    """``RewardAttestationCallback``: :class:`AttestationCore` as a
    ``transformers.TrainerCallback``, built once.

    Raises:
        RewardSealError: (reason ``transformers_missing``) transformers is not installed.
    """
    TrainerCallback = trainer_callback_base("the reward attestation callback")  # noqa: N806 (a class)

    class RewardAttestationCallback(AttestationCore, TrainerCallback):  # type: ignore[misc,valid-type]
        """Writes a reward attestation into every checkpoint TRL saves; see the module
        docstring."""

    return RewardAttestationCallback


def __getattr__(name: str) -> Any:
    """``RewardAttestationCallback`` on first access (:mod:`rewardseal.trainers.lazy`)."""
    return _lazy.attribute(name)
