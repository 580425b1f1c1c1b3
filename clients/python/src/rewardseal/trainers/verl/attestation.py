"""Reward attestations for verl checkpoints (R-A-6; docs/provenance.md).

verl 0.9's ``RayPPOTrainer._save_checkpoint`` writes ``<default_local_dir>/global_step_<N>``
(``actor/``, ``critic/`` when there is one, the dataloader state) after the update of step
``N``, and records ``N`` in ``latest_checkpointed_iteration.txt`` beside it. verl counts steps
from 1 and scores step ``N``'s rollouts with ``meta_info["global_steps"] == N`` (the receipts'
policy update, :func:`rewardseal.trainers.verl.manager.policy_update_from`), so the receipts
that trained ``global_step_N`` are those of policy updates ``first_update .. N``.

verl has no save callback: call :func:`attest_verl_checkpoint` after each save (a driver-side
hook around ``_save_checkpoint``, or a script over the saved directories)::

    attester = CheckpointAttester(ControlClient(target, token=...), contracts=[digest],
                                  checkpoint_ids=["policy.checkpoint.0001"])
    attest_verl_checkpoint(attester, "checkpoints/run/global_step_40")

It writes ``reward-attestation.dsse.json`` into ``global_step_N/`` (the file is left out of
the subjects, so the attestation covers every other file of the checkpoint).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from rewardseal.core.errors import ValidationError
from rewardseal.trainers.attestation import AttestedCheckpoint, CheckpointAttester

__all__ = ["STEP_DIR_PATTERN", "attest_verl_checkpoint", "verl_checkpoint_step"]

STEP_DIR_PATTERN: Final = re.compile(r"^global_step_(\d+)\Z")
"""verl's checkpoint directory name: ``global_step_<N>``."""


def verl_checkpoint_step(directory: str | Path) -> int:
    """The step ``N`` of a verl checkpoint directory ``.../global_step_<N>``.

    Raises:
        ValidationError: the directory is not named ``global_step_<N>``.
    """
    found = STEP_DIR_PATTERN.match(Path(directory).name)
    if found is None:
        raise ValidationError(f"{directory} is not a verl checkpoint directory (global_step_<N>)")
    return int(found.group(1))


def attest_verl_checkpoint(
    attester: CheckpointAttester, directory: str | Path
) -> AttestedCheckpoint | None:
    """Attest the verl checkpoint ``directory`` (``global_step_<N>``) over the receipts of
    policy updates ``attester.first_update .. N``; None when it could not be attested (see
    :meth:`CheckpointAttester.attest`).

    Raises:
        ValidationError: ``directory`` is not a ``global_step_<N>`` directory.
    """
    path = Path(directory)
    step = verl_checkpoint_step(path)
    if not path.is_dir():
        raise ValidationError(f"verl checkpoint {path} is not a directory")
    return attester.attest(path, step)
