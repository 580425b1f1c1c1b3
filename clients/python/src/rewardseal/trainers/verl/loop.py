"""verl 0.9 reward loop: a per-sample ``RewardManagerBase`` whose batch assembly fills per uid.

What verl 0.9.1 does (read from the installed wheel, paths under ``verl/``):

* ``trainer/ppo/ray_trainer.py`` builds a ``RewardLoopManager``
  (``experimental/reward_loop/reward_loop.py``). Its ``compute_rm_score(data)`` pads the batch,
  chunks it over ``RewardLoopWorker`` Ray actors, each of which awaits
  ``reward_manager.run_single(data[i:i+1])`` for every sample of its chunk (``asyncio.gather``),
  and then the DRIVER calls ``reward_manager_cls.assemble_rm_scores(data, scores)``, a
  classmethod, with the whole unpadded batch (``non_tensor_batch["uid"]`` present).
* The class comes from ``config.reward.reward_manager.{source,name}``
  (``trainer/ppo/reward.py:resolve_reward_manager_cls``): ``source=register`` looks ``name`` up in
  ``experimental/reward_loop/reward_manager/registry.py`` (per process: a Ray actor does not
  see a registration made in the driver); ``source=importlib`` loads ``name`` from
  ``reward_manager.module.path`` (``pkg://dotted.module`` or a file; works in every process).
  ``load_reward_manager`` builds it as ``cls(config=config, tokenizer=..., compute_score=...,
  reward_router_address=..., reward_model_tokenizer=...)``; user settings travel in the config,
  as ``config.reward.reward_kwargs`` (DAPO reads it there; ``migrate_legacy_reward_impl`` moves
  a legacy ``reward_model.reward_kwargs`` there).
* ``RewardManagerBase.assemble_rm_scores`` (``experimental/reward_loop/reward_manager/base.py``)
  puts each score at the sample's last valid response token.
* With no reward model (``reward.reward_model.enable=False``, the usual rule-based case) the
  trainer streams: the agent loop (``experimental/agent_loop/agent_loop.py``
  ``_compute_score``) sends each finished sample to a reward-loop worker's ``compute_score``
  and places the ``reward_score`` itself, and only when EVERY score of its chunk is a number
  (``_postprocess``); ``assemble_rm_scores`` is then never called. The trainer recomputes a
  batch without ``rm_scores`` through ``compute_rm_score`` only when ``use_rm``
  (``reward.reward_model.enable``), ``ray_trainer.py`` ``fit`` (``_compute_reward_colocate``).
  So in streaming mode an unscored sample (``reward_score`` None) is never filled: its chunk
  has no ``rm_scores`` and the step fails rather than pay a made-up number. The fill of R-T-1
  happens on the ``compute_rm_score`` path (a colocated reward model, custom loops calling it).
* ``ray_trainer.py`` sets ``meta_info["global_steps"]`` on the generation batch only, so
  neither reward path carries it: the receipts state the configured ``policy_update``.

This manager scores one sample per :meth:`CertifiedRewardLoopManager.run_single` with the
asyncio client, verifies the receipt against the pinned key and checks it answers the sample's
descriptor (R-T-5; a ``ReceiptMismatch`` stops the run), stops the run on an
uncertified scored receipt when ``require_certified`` (R-T-2), returns None for an unscored
sample, and its ``assemble_rm_scores`` gives each None the mean of its scored uid group-mates
(R-T-1; an all-unscored group gets the batch manager's group constant, see
:mod:`rewardseal.trainers.verl`). Re-scoring an episode is idempotent (the streaming path may
score first and ``compute_rm_score`` again): the worker's ALREADY_EXISTS names the stored
receipt, which the client fetches (bound to that receipt id and episode) and uses when it
states the same checkpoint, step and contract (:meth:`AsyncWorkerClient.recover`).

Reward integrity runs on the driver, where the batch is complete: ``assemble_rm_scores`` runs
the :class:`~rewardseal.trainers.verl.loop_gate.LoopGate` installed there (one capture, then the
gate; ``IntegrityHalted`` on a pause).

The module imports without verl and torch: :func:`reward_loop_manager_class` imports verl and
builds the subclass once; ``CertifiedRewardLoopManager`` is also a lazy module attribute, so
``source=importlib`` with ``module.path=pkg://rewardseal.trainers.verl.loop`` finds it.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final

from rewardseal.core.errors import DuplicateEpisode, RewardSealError, ValidationError
from rewardseal.rpc.worker_client import AsyncWorkerClient
from rewardseal.trainers.groups import (
    SampleResult,
    enforce_certified,
    is_setup_error,
    is_transient,
    metadata_columns,
)
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.trainers.integrity.feed import capture_batch, record_id_for
from rewardseal.trainers.lazy import LazyClasses
from rewardseal.trainers.verl.loop_gate import installed_loop_gate
from rewardseal.trainers.verl.manager import (
    DEFAULT_NAME,
    Sample,
    descriptor_for,
    fill_group_rewards,
    policy_update_from,
    samples_from_batch,
)
from rewardseal.trainers.verl.settings import ManagerSettings, config_get, missing_verl
from rewardseal.trainers.verl.tensors import response_texts
from rewardseal.v1.episode_pb2 import EpisodeDescriptor

__all__ = [
    "CLASS_NAME",
    "DEFAULT_NAME",
    "LOOP_EXTRA_COLUMNS",
    "LoopScorer",
    "check_episode_ids",
    "fill_loop_scores",
    "register_with_verl_reward_loop",
    "reward_loop_manager_class",
    "settings_from_config",
]

logger = logging.getLogger(__name__)

LOOP_EXTRA_COLUMNS: Final = ("reward_receipt_id",)
"""Columns ``run_single`` adds to :data:`rewardseal.trainers.groups.METADATA_COLUMNS`."""
CLASS_NAME: Final = "CertifiedRewardLoopManager"
"""The class name (``reward.reward_manager.name`` with ``source=importlib``)."""


def fill_loop_scores(scores: Sequence[float | None], uids: Sequence[Hashable]) -> list[float]:
    """R-T-1 for the reward loop's per-sample scores: a number for every sample.

    A None or NaN score is unscored: it takes the mean of its uid group's scored scores, and a
    group with no scored member gets the group constant of
    :func:`rewardseal.trainers.verl.fill_group_rewards`. Pure (no torch).

    Raises:
        ValidationError: the scores and uids are not aligned.
    """
    if len(scores) != len(uids):
        raise ValidationError(f"{len(scores)} reward scores for {len(uids)} uids")
    scalars: list[float | None] = []
    for score in scores:
        value = None if score is None else float(score)
        scalars.append(None if value is None or math.isnan(value) else value)
    rewards, _ = fill_group_rewards(scalars, [_hashable(uid) for uid in uids])
    return rewards


def _hashable(uid: Any) -> Hashable:
    return uid if isinstance(uid, Hashable) else str(uid)


def check_episode_ids(extra_infos: Sequence[Any]) -> None:
    """R-T-4 over a whole batch: no two samples may name one episode.

    ``run_single`` sees one sample only and treats a repeat as a re-score, so a dataset column
    copied to ``rollout.n`` samples would hand each the first one's receipt; the driver's batch
    is where a repeat shows. A row without an ``episode_id`` was already refused by run_single.

    Raises:
        ValidationError: (reason ``duplicate_episode_id``) an episode id repeats.
    """
    ids = [
        str(info["episode_id"])
        for info in extra_infos
        if isinstance(info, Mapping) and info.get("episode_id")
    ]
    repeated = sorted(eid for eid, n in Counter(ids).items() if n > 1)
    if repeated:
        raise ValidationError(
            f"episode ids repeat within the batch ({', '.join(repeated[:5])}): ids must be "
            "minted per sample by the rollout that acted (R-T-4)",
            reason="duplicate_episode_id",
        )


def settings_from_config(config: Any, overrides: Mapping[str, Any]) -> ManagerSettings:
    """The settings from ``config.reward.reward_kwargs`` (verl 0.9.1), then ``overrides``.

    ``overrides`` are the keyword arguments the manager was built with: verl's own two
    (``reward_router_address``, ``reward_model_tokenizer``: accepted and ignored) or, when built
    by hand, any setting of :meth:`ManagerSettings.from_reward_kwargs`.
    """
    from_config: Mapping[str, Any] = {}
    reward = None if config is None else config_get(config, "reward")
    if reward is not None:
        from_config = config_get(reward, "reward_kwargs") or {}
    merged = {str(key): _plain(value) for key, value in dict(from_config).items()}
    merged.update({key: value for key, value in overrides.items() if value is not None})
    return ManagerSettings.from_reward_kwargs(merged)


def _plain(value: Any) -> Any:
    """A config node (an OmegaConf ``DictConfig`` is a Mapping) as a plain dict, else as is."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


class LoopScorer:
    """The verl-free part of the manager: scoring one sample into ``run_single``'s answer."""

    settings: ManagerSettings

    def _init_scorer(self, settings: ManagerSettings) -> None:
        self.settings = settings
        self._client: AsyncWorkerClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self.capture: IntegrityCapture | None = None
        """Reward integrity capture of this worker, off by default: set it in the process that
        scores (it holds open channels); each scored sample is handed to it after its score is
        made. Leave it off under a driver-side gate
        (:mod:`rewardseal.trainers.verl.loop_gate`), which captures the whole batch once."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state["_client_loop"] = None
        state.pop("loop", None)
        return state

    def client(self) -> AsyncWorkerClient:
        """The pinned asyncio client, made on the running loop (again if the loop changed)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = AsyncWorkerClient(
                self.settings.target,
                token=self.settings.token,
                trust=self.settings.trust,
                timeout=self.settings.timeout,
                tls=self.settings.tls,
            )
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the worker channel (a later call opens a new one)."""
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.close()

    async def score_one(
        self,
        extra_info: Any,
        uid: Any,
        meta_info: Mapping[str, Any],
        *,
        text: str | None = None,
    ) -> dict[str, Any]:
        """``run_single``'s answer for one sample given as verl's columns (no torch needed).

        Returns ``{"reward_score": float | None, "reward_extra_info": {column: value}}`` with
        the columns of :func:`rewardseal.trainers.groups.metadata_columns` plus
        ``reward_receipt_id`` (``""`` without a receipt): the same keys for every sample (R-T-3).

        Raises:
            ValidationError: the sample has no per-sample ``episode_id`` or no policy update.
            CertificationRefused: ``require_certified`` and the scored receipt is not certified.
            ReceiptMismatch: the receipt answers another request than this sample's (R-T-5).
            RewardSealError: a setup error (bad token, no permission, wrong contract).

        ``text`` (the sample's response) is read only by a capture (R-I-3, R-I-5).
        """
        (sample,) = samples_from_batch([extra_info], [uid])
        step = policy_update_from(meta_info, self.settings)
        descriptor = descriptor_for(sample, self.settings, step)
        row = await self._score(sample, descriptor)
        require = self.settings.require_certified
        enforce_certified([row], require_certified=require)
        columns = metadata_columns([row], require_certified=require)
        extra: dict[str, Any] = {name: values[0] for name, values in columns.items()}
        extra["reward_receipt_id"] = "" if row.receipt is None else row.receipt.receipt.receipt_id
        if self.capture is not None:
            record = extra_info.get("record_id")
            # The capture's clients block: off the reward loop's event loop.
            await asyncio.to_thread(
                capture_batch,
                self.capture,
                policy_update=step,
                episode_ids=[sample.episode_id],
                texts=None if text is None else [text],
                scalars=[row.scalar],
                record_ids=[record_id_for(record, sample.oracle_identity, sample.episode_id)],
                identities=[sample.oracle_identity],
                group_ids=[str(sample.group)],
                signals=[sample.runtime_signal],
            )
        return {"reward_score": row.scalar, "reward_extra_info": extra}

    async def _score(self, sample: Sample, descriptor: EpisodeDescriptor) -> SampleResult:
        client = self.client()
        try:
            receipt = await client.score(descriptor)
        except DuplicateEpisode as exc:
            # A re-score: the stored receipt when it answers this very descriptor; the
            # duplicate when another run or step used this id (R-T-4).
            try:
                receipt = await client.recover(exc, descriptor)
            except RewardSealError as error:
                return self._error_row(sample, error)
        except RewardSealError as error:
            return self._error_row(sample, error)
        return SampleResult(episode_id=sample.episode_id, receipt=receipt, error=None)

    @staticmethod
    def _error_row(sample: Sample, error: RewardSealError) -> SampleResult:
        if is_setup_error(error):
            raise error
        if is_transient(error):
            logger.warning(
                "reward worker unreachable; episode %s unscored: %s", sample.episode_id, error
            )
        else:
            logger.warning("episode %s unscored (%s): %s", sample.episode_id, error.reason, error)
        return SampleResult(episode_id=sample.episode_id, receipt=None, error=error)


_lazy = LazyClasses(__name__)


@_lazy.builds(CLASS_NAME)
def reward_loop_manager_class() -> type[Any]:
    """``CertifiedRewardLoopManager``: a verl ``RewardManagerBase`` subclass, built once.

    Built by verl as ``cls(config=..., tokenizer=..., compute_score=..., **kwargs)``;
    ``compute_score`` is unused (the worker is the scorer), the settings come from
    ``config.reward.reward_kwargs`` (:func:`settings_from_config`).

    Raises:
        RewardSealError: (reason ``verl_missing``) verl is not installed.
    """
    try:
        from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    except ImportError as exc:
        raise missing_verl(exc, "the reward loop manager") from None

    class CertifiedRewardLoopManager(LoopScorer, RewardManagerBase):  # type: ignore[misc]
        """Verified, certified rewards from a rewardseal worker through verl's reward loop."""

        def __init__(
            self, config: Any, tokenizer: Any = None, compute_score: Any = None, **kwargs: Any
        ) -> None:
            RewardManagerBase.__init__(self, config, tokenizer, compute_score)
            self._init_scorer(settings_from_config(config, kwargs))

        async def run_single(self, data: Any) -> dict[str, Any]:
            """Score the one sample of ``data`` (verl's ``data[i:i+1]``); see ``score_one``."""
            if len(data) != 1:
                raise ValidationError(f"run_single takes one sample, got {len(data)}")
            columns = data.non_tensor_batch
            if "extra_info" not in columns:
                raise ValidationError("the sample has no 'extra_info' (episode_id, R-T-4)")
            uid = columns["uid"][0] if "uid" in columns else None
            text = None if self.capture is None else response_texts(data, self.tokenizer)[0]
            return await self.score_one(
                columns["extra_info"][0], uid, data.meta_info or {}, text=text
            )

        @classmethod
        def assemble_rm_scores(cls, data: Any, scores: list[float | None]) -> Any:
            """R-T-1: fill each None/NaN from its uid group, then verl's last-token placement;
            then the integrity gate installed in this process, if any
            (:func:`rewardseal.trainers.verl.loop_gate.install_loop_gate`).

            Raises:
                ValidationError: the batch has no ``uid`` column, the scores are misaligned,
                    or an episode id repeats (R-T-4).
                IntegrityHalted: the installed gate's audit paused, stopped or forked the run.
            """
            columns = data.non_tensor_batch
            if "uid" not in columns:
                raise ValidationError("the batch has no 'uid' column: unscored samples need it")
            if "extra_info" in columns:
                check_episode_ids(list(columns["extra_info"]))
            filled = fill_loop_scores(list(scores), list(columns["uid"]))
            rm_scores = super().assemble_rm_scores(data, filled)
            gate = installed_loop_gate()
            if gate is not None:
                # The driver: the whole batch and each sample's own score (R-I-3, R-I-8).
                gate.after_assembly(data, scores)
            return rm_scores

    return CertifiedRewardLoopManager


def register_with_verl_reward_loop(name: str = DEFAULT_NAME) -> type[Any]:
    """Register the manager in verl's reward-loop registry (``source=register``); idempotent.

    A registry is per process: call it in the driver AND in every Ray worker that builds the
    manager, or use ``source=importlib`` (see the module docstring).

    Raises:
        RewardSealError: verl is not installed (reason ``verl_missing``), or ``name`` already
            holds another class.
    """
    cls = reward_loop_manager_class()
    try:
        from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls, register
    except ImportError as exc:  # pragma: no cover - the class above already imported verl
        raise missing_verl(exc, "the reward loop manager") from None
    try:
        existing = get_reward_manager_cls(name)
    except ValueError:
        existing = None
    if existing is None:
        register(name)(cls)
    elif existing is not cls:
        raise RewardSealError(f"verl's reward loop already has another manager named {name!r}")
    return cls


def __getattr__(name: str) -> Any:
    """``CertifiedRewardLoopManager`` on first access (verl's ``load_extern_object``)."""
    return _lazy.attribute(name)
