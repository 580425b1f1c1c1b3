"""verl batch reward manager: one verified receipt per sample, unscored samples filled per uid.

What verl 0.9.1 offers (read from the installed wheel, paths under ``verl/``):

* ``workers/reward_manager/abstract.py``: ``AbstractRewardManager`` with
  ``__init__(tokenizer, num_examine, compute_score, reward_fn_key="data_source", **kwargs)`` and
  ``__call__(data: DataProto, return_dict=False)`` returning the ``reward_tensor`` (shaped like
  ``data.batch["responses"]``) or ``{"reward_tensor", "reward_extra_info"}``.
* ``workers/reward_manager/registry.py``: ``register(name)`` (a class decorator that refuses a
  second, different class under one name) and ``get_reward_manager_cls(name)``.
* ``workers/reward_manager/batch.py`` (``BatchRewardManager``, registered as ``"batch"``): the
  batch hook this module follows. The reward of sample ``i`` goes to its last valid response
  token, ``attention_mask[i, prompt_len:].sum() - 1``; everything else stays 0.0.
* ``non_tensor_batch["uid"]`` names a prompt's group (rows repeated ``rollout.n`` times share it
  and share their ``extra_info`` dict too); ``meta_info["global_steps"]`` is the trainer step.
* The 0.9 trainer (``trainer/ppo/ray_trainer.py``) scores through the newer reward loop
  (``experimental/reward_loop/reward_loop.py``): ``config.reward.reward_manager.{source,name}``
  resolves a class from ``experimental/reward_loop/reward_manager/registry.py`` (a separate
  registry of ``RewardManagerBase``), built by ``trainer/ppo/reward.py:load_reward_manager`` as
  ``cls(config=..., tokenizer=..., compute_score=..., **reward_kwargs)``, and each
  ``RewardLoopWorker`` calls ``run_single`` on ONE sample at a time. This module implements the
  batch interface (``AbstractRewardManager``) and registers it in ``workers/reward_manager``'s
  registry, the one a batch caller looks classes up in (verl <= 0.6 trainers, custom loops,
  offline scoring); :mod:`rewardseal.trainers.verl.loop` serves the reward loop, filling from
  the uid group in its batch-level ``assemble_rm_scores`` hook.

Per call, :class:`CertifiedRewardManager` sends one episode per sample in ONE batched
``ScoreEpisodes`` call (chunked above ``max_batch``), verifies every receipt against the pinned
worker key and checks it answers its own sample's descriptor (R-T-5; a receipt of another
episode, checkpoint, update or contract stops the run: it is never paid nor filled), stops the
run on an uncertified scored receipt when ``require_certified`` (R-T-2), and gives every
unscored sample the mean of its scored uid group-mates (R-T-1).

verl needs a number for every sample, also for a uid group where NO member was scored. Such a
group gets 0.0 for every member and is flagged ``reward_group_unscored`` in
``reward_extra_info``. That is not paying 0.0: every member carries the same value as its
mates, so under a group-relative estimator (GRPO, RLOO: advantage = reward minus the group's
mean) each advantage is exactly zero and the group adds no gradient, whatever constant is used.
With an estimator that does not subtract a per-group baseline (GAE with a critic,
REINFORCE++'s batch baseline) that constant is NOT neutral: use this manager with a
group-relative estimator.

Reward integrity (docs/integrity.md, R-I-3, R-I-5), off by default: set
``manager.capture`` to an :class:`~rewardseal.trainers.integrity.capture.IntegrityCapture` in
the process that scores (it holds open channels, so it is not shipped with the manager) and every
scored batch is handed to it after the rewards are computed; :meth:`CertifiedRewardManager.
__call__` decodes each sample's valid response tokens with the tokenizer for the output digest
(:meth:`~CertifiedRewardManager.score_batch` takes ``texts``). The rollout that opens the
episodes opens them on the sentinel too (``capture.begin_sentinel``) before it acts. With
``manager.gate`` (a :class:`~rewardseal.trainers.integrity.gate.StepGate` over the capture's
monitor) each batch is followed by the gate: the binding is checked on the first batch, a
boundary is audited once its batch is captured, and a pause, stop or fork raises
``IntegrityHalted`` before the rewards reach the trainer.

Task parameters (R-MSG-11, R-W-18): for a parameterized contract each sample's ``extra_info``
carries its values under ``task_parameters`` (a mapping, or its JSON text; verl copies a row's
``extra_info`` to its ``rollout.n`` samples, which share the task). The descriptor repeats them:
the worker refuses values other than those the rollout's begin bound, or binds them for an
episode with no begin, and the client checks the receipt's ``task_parameters_digest`` against
them. A sample without them for a contract that declares some is the worker's
``invalid_task_parameters`` for that sample: unscored (``reward_error``) and filled from its
uid group like every per-sample refusal, never paid.

The module imports without verl and torch: verl is imported by :func:`register_with_verl` and
torch by :meth:`CertifiedRewardManager.__call__` only. :func:`batch_rewards` is the pure part
(no I/O, no torch) and :func:`score_samples` the network part, both usable on their own.
The settings (:class:`ManagerSettings`, read from ``reward_kwargs``) live in
:mod:`rewardseal.trainers.verl.settings`; the package (:mod:`rewardseal.trainers.verl`)
re-exports them with this module's names.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.rpc.worker_client import ReceiptOrError, WorkerClient, make_descriptor
from rewardseal.trainers.groups import (
    SampleResult,
    enforce_certified,
    fill_unscored,
    is_transient,
    metadata_columns,
    sample_results,
    stop_on_setup_errors,
)
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.trainers.integrity.feed import capture_batch, record_id_for
from rewardseal.trainers.integrity.gate import StepGate
from rewardseal.trainers.task_parameters import PARAMETERS_KEY, row_parameters
from rewardseal.trainers.verl.settings import (
    ManagerSettings,
    missing_verl,
)
from rewardseal.trainers.verl.tensors import last_token_rewards, response_texts
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor

logger = logging.getLogger(__name__)

DEFAULT_NAME: Final = "rewardseal_certified"
"""The name :func:`register_with_verl` registers the manager under."""
ALL_UNSCORED_GROUP_REWARD: Final = 0.0
"""The group-constant value of a uid group with no scored member (zero advantage, flagged)."""


@dataclass(frozen=True)
class Sample:
    """One row of a verl batch as the worker sees it: its episode and its uid group."""

    episode_id: str
    group: Hashable
    oracle_identity: Mapping[str, str] | None = None
    runtime_signal: RuntimeSignal.ValueType | None = None
    task_parameters: Mapping[str, ParameterValue] = field(default_factory=dict)


def _runtime_signal(value: Any, index: int) -> RuntimeSignal.ValueType | None:
    """``extra_info["runtime_signal"]``: an enum name (``COMPLETED`` or the full name) or int."""
    if value is None:
        return None
    if isinstance(value, int):
        if value not in RuntimeSignal.values():
            raise ValidationError(f"sample {index}: unknown runtime_signal {value}")
        return RuntimeSignal.ValueType(value)
    name = str(value).upper()
    full = name if name.startswith("RUNTIME_SIGNAL_") else f"RUNTIME_SIGNAL_{name}"
    if full not in RuntimeSignal.keys():  # noqa: SIM118 (an enum wrapper, not a dict)
        raise ValidationError(f"sample {index}: unknown runtime_signal {value!r}")
    return RuntimeSignal.Value(full)


def samples_from_batch(extra_infos: Sequence[Any], uids: Sequence[Any]) -> list[Sample]:
    """The samples of a batch from verl's ``extra_info`` and ``uid`` columns.

    Each ``extra_info`` must carry its own ``episode_id`` (R-T-4): verl repeats a dataset row
    ``rollout.n`` times, so an id copied from the dataset collides; the rollout that acted must
    have minted one per sample (``rewardseal.trainers.groups.mint_episode_id``). Optional keys:
    ``oracle_identity`` (a mapping), ``runtime_signal`` and ``task_parameters``
    (:func:`rewardseal.trainers.task_parameters.row_parameters`).

    Raises:
        ValidationError: a column is misaligned, an ``extra_info`` lacks ``episode_id``, or two
            samples share one (nothing has been sent to the worker then).
    """
    if len(extra_infos) != len(uids):
        raise ValidationError(f"{len(extra_infos)} extra_info entries for {len(uids)} uids")
    samples: list[Sample] = []
    for index, (info, uid) in enumerate(zip(extra_infos, uids, strict=True)):
        if not isinstance(info, Mapping) or not info.get("episode_id"):
            raise ValidationError(
                f"sample {index}: extra_info must carry a per-sample 'episode_id' (R-T-4)"
            )
        identity = info.get("oracle_identity")
        if identity is not None and not isinstance(identity, Mapping):
            raise ValidationError(f"sample {index}: oracle_identity must be a mapping")
        samples.append(
            Sample(
                episode_id=str(info["episode_id"]),
                group=uid if isinstance(uid, Hashable) else str(uid),
                oracle_identity=(
                    None if identity is None else {str(k): str(v) for k, v in identity.items()}
                ),
                runtime_signal=_runtime_signal(info.get("runtime_signal"), index),
                task_parameters=row_parameters(info.get(PARAMETERS_KEY), index),
            )
        )
    repeated = sorted(eid for eid, n in Counter(s.episode_id for s in samples).items() if n > 1)
    if repeated:
        raise ValidationError(
            f"episode ids repeat within the batch ({', '.join(repeated[:5])}"
            f"{', ...' if len(repeated) > 5 else ''}): verl copies a dataset row's extra_info "
            "to each of its rollout.n samples, so ids must be minted per sample by the rollout "
            "that acted (R-T-4); refusing to score",
            reason="duplicate_episode_id",
        )
    return samples


def policy_update_from(meta_info: Mapping[str, Any], settings: ManagerSettings) -> int:
    """``meta_info["global_steps"]`` when verl sets it, else the configured ``policy_update``.

    Raises:
        ValidationError: neither is there (the worker needs the policy update of every episode).
    """
    step = meta_info.get("global_steps")
    if step is None:
        step = settings.policy_update
    if step is None:
        raise ValidationError(
            "no policy update: verl set no meta_info['global_steps'] and reward_kwargs "
            "give no policy_update"
        )
    return int(step)


def descriptor_for(
    sample: Sample, settings: ManagerSettings, policy_update: int
) -> EpisodeDescriptor:
    """The descriptor of one sample: the run's checkpoint and contract, the sample's episode."""
    return make_descriptor(
        episode_id=sample.episode_id,
        policy_checkpoint_id=settings.policy_checkpoint_id,
        policy_update=policy_update,
        reward_contract_digest=settings.reward_contract_digest,
        oracle_identity=sample.oracle_identity,
        runtime_signal=sample.runtime_signal,
        task_parameters=sample.task_parameters,
    )


def score_samples(
    client: WorkerClient,
    samples: Sequence[Sample],
    settings: ManagerSettings,
    *,
    policy_update: int,
) -> list[SampleResult]:
    """Score every sample in batched ``ScoreEpisodes`` calls; one row per sample, in order.

    A worker that stays unreachable (after the client's retries) or misses the deadline turns
    its chunk into error rows (reason ``unavailable`` / ``deadline_exceeded``): nothing is paid
    for them and the columns stay aligned (R-T-3). Any other failure of a whole call (bad token,
    wrong contract) is a configuration error and is raised.
    """
    answers: list[ReceiptOrError | None] = []
    for start in range(0, len(samples), settings.max_batch):
        chunk = samples[start : start + settings.max_batch]
        descriptors = [descriptor_for(sample, settings, policy_update) for sample in chunk]
        try:
            got: list[ReceiptOrError] = client.score_many(descriptors)
        except RewardSealError as exc:
            if not is_transient(exc):
                raise
            logger.warning("reward worker unavailable; %d samples unscored: %s", len(chunk), exc)
            got = [exc] * len(chunk)
        if len(got) != len(chunk):
            raise ValidationError(f"the worker answered {len(got)} of {len(chunk)} descriptors")
        answers.extend(got)
    return sample_results([sample.episode_id for sample in samples], answers)


@dataclass(frozen=True)
class BatchRewards:
    """What verl gets for one batch: a reward per sample and aligned per-sample columns."""

    rows: list[SampleResult]
    rewards: list[float]
    extra_info: dict[str, list[Any]]


def fill_group_rewards(
    scalars: Sequence[float | None], groups: Sequence[Hashable]
) -> tuple[list[float], list[bool]]:
    """A number for every sample, never 0.0 for an unscored one on its own (R-T-1).

    An unscored sample (None) takes the mean of its scored group-mates
    (:func:`rewardseal.trainers.groups.fill_unscored`); a group with no scored member gets
    :data:`ALL_UNSCORED_GROUP_REWARD` for every member (group-constant: zero advantage under a
    group-relative estimator, see the module docstring). Returns the rewards and, per sample,
    whether its whole group was unscored.
    """
    filled = fill_unscored(scalars, groups)
    rewards = [ALL_UNSCORED_GROUP_REWARD if value is None else value for value in filled]
    return rewards, [value is None for value in filled]


def batch_rewards(
    rows: Sequence[SampleResult], groups: Sequence[Hashable], *, require_certified: bool
) -> BatchRewards:
    """The pure part: enforce certification, fill unscored samples, build the columns.

    An unscored sample takes the mean of its scored uid group-mates (R-T-1, zero advantage). A
    group with no scored member gets :data:`ALL_UNSCORED_GROUP_REWARD` for every member (zero
    advantage under a group-relative estimator; see the module docstring). The columns are
    :func:`rewardseal.trainers.groups.metadata_columns` plus ``reward_value`` (what verl got),
    ``reward_filled`` (the value is a group fill, not the sample's own) and
    ``reward_group_unscored`` (no member of the group was scored).

    Raises:
        ReceiptMismatch: a receipt answers another sample's request (or another setup error of
            :func:`rewardseal.trainers.groups.is_setup_error`): the run stops, nothing is paid.
        CertificationRefused: with ``require_certified``, a scored receipt is not certified.
    """
    stop_on_setup_errors(rows)
    enforce_certified(rows, require_certified=require_certified)
    rewards, group_unscored = fill_group_rewards([row.scalar for row in rows], groups)
    extra_info = metadata_columns(rows, require_certified=require_certified)
    extra_info["reward_value"] = list(rewards)
    extra_info["reward_filled"] = [row.unscored for row in rows]
    extra_info["reward_group_unscored"] = group_unscored
    return BatchRewards(rows=list(rows), rewards=rewards, extra_info=extra_info)


class CertifiedRewardManager:
    """A verl batch reward manager paying verified, certified rewards from a rewardseal worker.

    Built by verl as ``cls(tokenizer, num_examine, compute_score, reward_fn_key, **reward_kwargs)``;
    ``compute_score`` is unused (the worker is the scorer) and ``reward_kwargs`` are read by
    :meth:`ManagerSettings.from_reward_kwargs`. The gRPC client is made on first use and not
    pickled, so the manager can be shipped to a Ray actor.
    """

    def __init__(
        self,
        tokenizer: Any = None,
        num_examine: int = 0,
        compute_score: Any = None,
        reward_fn_key: str = "data_source",
        **reward_kwargs: Any,
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score
        self.reward_fn_key = reward_fn_key
        self.settings = ManagerSettings.from_reward_kwargs(reward_kwargs)
        self._client: WorkerClient | None = None
        self.capture: IntegrityCapture | None = None
        """Reward integrity capture (None: off; see the module docstring)."""
        self.gate: StepGate | None = None
        """Reward integrity gate over the capture's monitor (None: off): audits a boundary once
        its batch is captured and raises ``IntegrityHalted`` on a pause, stop or fork."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self) -> WorkerClient:
        """The pinned worker client (made on first use)."""
        if self._client is None:
            self._client = WorkerClient(
                self.settings.target,
                token=self.settings.token,
                trust=self.settings.trust,
                timeout=self.settings.timeout,
                tls=self.settings.tls,
            )
        return self._client

    def close(self) -> None:
        """Close the worker channel (a later call opens a new one)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def policy_update(self, meta_info: Mapping[str, Any]) -> int:
        """``meta_info["global_steps"]`` when verl sets it, else the configured policy_update."""
        return policy_update_from(meta_info, self.settings)

    def score_batch(
        self,
        extra_infos: Sequence[Any],
        uids: Sequence[Any],
        meta_info: Mapping[str, Any],
        *,
        texts: Sequence[str] | None = None,
    ) -> BatchRewards:
        """Score a batch given as verl's columns; no torch needed (see :meth:`__call__`).
        ``texts`` (each sample's response) is read only by a capture."""
        samples = samples_from_batch(extra_infos, uids)
        step = self.policy_update(meta_info)
        rows = score_samples(self.client, samples, self.settings, policy_update=step)
        result = batch_rewards(
            rows,
            [sample.group for sample in samples],
            require_certified=self.settings.require_certified,
        )
        for row, reward in list(zip(rows, result.rewards, strict=True))[: self.num_examine]:
            logger.info(
                "[rewardseal] episode %s: %s reward %s%s",
                row.episode_id,
                row.outcome,
                reward,
                f" ({row.error_reason})" if row.error is not None else "",
            )
        capture_batch(
            self.capture,
            policy_update=step,
            episode_ids=[sample.episode_id for sample in samples],
            texts=texts,
            scalars=[row.scalar for row in rows],
            record_ids=[
                record_id_for(info.get("record_id"), sample.oracle_identity, sample.episode_id)
                for info, sample in zip(extra_infos, samples, strict=True)
            ],
            identities=[sample.oracle_identity for sample in samples],
            group_ids=[str(sample.group) for sample in samples],
            signals=[sample.runtime_signal for sample in samples],
        )
        if self.gate is not None:
            self.gate.after_batch(step)
        return result

    def __call__(self, data: Any, return_dict: bool = False) -> Any:
        """verl's batch hook: the reward tensor, or ``{"reward_tensor", "reward_extra_info"}``.

        ``data`` is a ``verl.DataProto`` with ``prompts``, ``responses`` and ``attention_mask``
        (or ``response_mask``) tensors and ``uid`` and ``extra_info`` columns.

        Raises:
            ValidationError: a column is missing or misaligned, or episode ids repeat (R-T-4).
            CertificationRefused: ``require_certified`` and a scored receipt is not certified.
            ReceiptMismatch: a receipt answers another request than its sample's (R-T-5).
            RewardSealError: the worker refused the whole call (other than being unreachable).
        """
        columns = data.non_tensor_batch
        count = len(data)
        for name in ("uid", "extra_info"):
            if name not in columns:
                raise ValidationError(
                    f"the batch has no {name!r} column: the manager needs one per sample"
                )
        texts = None if self.capture is None else response_texts(data, self.tokenizer)
        result = self.score_batch(
            list(columns["extra_info"]), list(columns["uid"]), data.meta_info, texts=texts
        )
        if len(result.rewards) != count:
            raise ValidationError(f"{len(result.rewards)} rewards for {count} samples")
        reward_tensor = last_token_rewards(data, result.rewards)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": result.extra_info}
        return reward_tensor


def register_with_verl(name: str = DEFAULT_NAME) -> type[CertifiedRewardManager]:
    """Register :class:`CertifiedRewardManager` in verl's batch reward-manager registry.

    Idempotent: registering the same class under the same name again is a no-op. Call it in
    every process that looks the class up (``get_reward_manager_cls(name)``).

    Raises:
        RewardSealError: verl is not installed, or ``name`` already holds another class.
    """
    try:
        from verl.workers.reward_manager import get_reward_manager_cls, register
    except ImportError as exc:
        raise missing_verl(exc, f"register_with_verl({name!r})") from None
    try:
        existing = get_reward_manager_cls(name)
    except ValueError:
        existing = None
    if existing is CertifiedRewardManager:
        return CertifiedRewardManager
    if existing is not None:
        raise RewardSealError(f"verl already has another reward manager named {name!r}")
    register(name)(CertifiedRewardManager)
    return CertifiedRewardManager
