"""A certified reward function for TRL's ``GRPOTrainer`` (docs/spec.md §11).

Usage::

    reward = CertifiedRewardFunction(
        WorkerClient(target, token=token, trust=trust),
        reward_contract_digest=digest,
        policy_checkpoint_id="policy.checkpoint.0001",
        num_generations=8,
        actor=MockMedActor(mockmed_url, mockmed_token),  # rewardseal_kit.actors
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset)

TRL (1.16) calls a reward function as ``f(prompts=..., completions=..., completion_ids=...,
trainer_state=..., log_extra=..., log_metric=..., **dataset_columns)``, every dataset column a
list with one entry per completion (the row is copied to each of its ``num_generations``
completions, which sit next to each other in the batch).

How TRL 1.16 treats ``None`` (``GRPOTrainer._calculate_rewards`` and
``_generate_and_score_completions``): a ``None`` reward becomes NaN. A row where *every* reward
function returned None is "unscorable": it is left out of the nan-aware group mean and std, and
its advantage is forced to 0. With several reward functions, a None from one of them is
``nansum``-ed as 0.0 into the weighted sum, i.e. it silently becomes a zero reward. That is why
this function never hands TRL a None for a sample whose group-mates were scored: an unscored
sample (RECONCILIATION_REQUIRED, FAILED_PLATFORM, or no receipt at all) gets the mean of its
scored group-mates, so its advantage is zero whatever other reward functions are combined with
it (R-T-1). Only a group with no scored member returns None throughout.

Two ways to run an episode:

* with an ``actor`` (:mod:`rewardseal.trainers.actors`), this function runs the rollout: it
  mints one episode id per completion (R-T-4), opens every episode under the actor's
  per-completion identity in one ``BeginEpisodes`` call, lets the actor execute each completion,
  then scores the batch in one ``ScoreEpisodes`` call (chunked only above ``max_batch``);
* without one, the rollout already began and acted; the dataset must carry an ``episode_id``
  column with a distinct value per completion, and the batch is only scored.

Task parameters (R-MSG-11, R-W-18): for a parameterized contract each dataset row carries its
values in the ``task_parameters`` column (``parameters_column=``; a mapping such as
``{"encounter_type": "Consult", "note": "..."}``, or its JSON text). With an actor they are
bound at begin and handed to the actor; every descriptor repeats them, so the worker refuses
other values and the client checks the receipt's ``task_parameters_digest`` against the row's.
A row without them for a contract that declares some is refused by the worker for that sample
(``invalid_task_parameters``): like every refused begin or descriptor (``invalid_episode``,
``identity_busy``) the sample is unscored (``reward_error`` names the reason), filled from its
group, never paid 0.0.

Every receipt is verified against the pinned worker key by the client before use (R-T-5),
and bound to the descriptor it answers: a receipt naming another episode, checkpoint, policy
update or contract (``ReceiptMismatch``) stops the run rather than being paid or filled
(:func:`rewardseal.trainers.groups.stop_on_setup_errors`).
:meth:`CertifiedRewardFunction.metadata_columns` gives the last batch's per-sample columns
(R-T-3); they are also pushed to TRL's completions table through ``log_extra``.

Reward integrity (docs/integrity.md, R-I-3, R-I-5): with ``capture=`` (an
:class:`~rewardseal.trainers.integrity.capture.IntegrityCapture`, off by default) the function
opens each episode on the sentinel worker before the actor acts (without an actor, the rollout
calls :meth:`~rewardseal.trainers.integrity.capture.IntegrityCapture.begin_sentinel` itself) and
hands every scored sample to the capture once the rewards are computed. The rewards, metadata
columns and logged metrics are computed before the capture and never read it; only a full
signal buffer (:class:`~rewardseal.core.errors.IntegrityBufferFull`) is raised from it.

The integrity gate, ``IntegrityGate`` (a ``transformers.TrainerCallback`` that audits the run at
its boundaries and pauses it on a failing audit), is :mod:`rewardseal.trainers.trl.gate`'s, built
on first access of the package's attribute (``rewardseal.trainers.trl.IntegrityGate``).

This module imports neither ``trl`` nor ``torch``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.signing import TrustSet
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.core.validation import validate_id
from rewardseal.rpc.tls import ClientTls
from rewardseal.rpc.worker_client import (
    AsyncWorkerClient,
    BeginOrError,
    ReceiptOrError,
    WorkerClient,
    make_begin,
    make_descriptor,
)
from rewardseal.trainers.actors import EpisodeActor
from rewardseal.trainers.groups import (
    BatchTally,
    column,
    contiguous_groups,
    enforce_certified,
    fill_unscored,
    is_setup_error,
    is_transient,
    metadata_columns,
    mint_episode_id,
    sample_results,
    stop_on_setup_errors,
    tally,
)
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.trainers.integrity.feed import capture_batch, record_id_for
from rewardseal.trainers.task_parameters import PARAMETERS_KEY, row_parameters
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor

__all__ = [
    "DEFAULT_MAX_BATCH",
    "AsyncCertifiedRewardFunction",
    "CertifiedRewardFunction",
    "PAID_SHARE_METRIC",
    "SCORED_SHARE_METRIC",
    "UNSCORED_SHARE_METRIC",
    "completion_text",
]

PAID_SHARE_METRIC: Final = "rewardseal/paid_share"
"""The share of a batch whose receipt pays a positive scalar (logged through TRL's
``log_metric``): the completions that were paid, as the examples count them. A receipt of 0.0
(a wrong effect) is scored but not paid; a fill for an unscored sample is never paid."""
SCORED_SHARE_METRIC: Final = "rewardseal/scored_share"
"""The share of a batch with a receipt's own scalar, 0.0 included (1 - the unscored share)."""
UNSCORED_SHARE_METRIC: Final = "rewardseal/unscored_share"
"""The share of a batch without a scalar: unscored outcomes and errors."""
DEFAULT_MAX_BATCH: Final = 256
_DEFAULT_PREFIX: Final = "trl-episode"
_SIGNAL_PREFIX: Final = "RUNTIME_SIGNAL_"


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or the content of the last chat message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion:
        content = completion[-1].get("content") if isinstance(completion[-1], Mapping) else None
        if isinstance(content, str):
            return content
        if isinstance(content, Sequence):
            # Content blocks ({"type": "text", "text": ...}) as multimodal chat templates use.
            return "".join(
                str(block.get("text", "")) for block in content if isinstance(block, Mapping)
            )
    raise ValidationError(f"cannot read a completion of type {type(completion).__name__}")


def _identity(value: Any, row: int) -> dict[str, str]:
    """A per-row oracle identity from a mapping or its JSON text.

    ``datasets`` unifies struct columns across rows and fills a key a row lacks with None, so a
    None value means "absent" here.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"oracle identity of sample {row} is not JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise ValidationError(f"oracle identity of sample {row} is not a mapping")
    identity = {str(key): item for key, item in value.items() if item is not None}
    if not all(isinstance(item, str) for item in identity.values()):
        raise ValidationError(f"oracle identity of sample {row} must map names to strings")
    return identity


def _signal(value: Any, row: int) -> RuntimeSignal.ValueType | None:
    """A runtime signal from its name (with or without the enum prefix) or number."""
    if value is None:
        return None
    try:
        if isinstance(value, str):
            name = value if value.startswith(_SIGNAL_PREFIX) else _SIGNAL_PREFIX + value.upper()
            return RuntimeSignal.Value(name)
        if isinstance(value, int) and not isinstance(value, bool):
            signal = RuntimeSignal.ValueType(value)
            RuntimeSignal.Name(signal)  # refuses a number that names no signal
            return signal
    except ValueError:
        pass
    raise ValidationError(f"runtime signal {value!r} of sample {row} is not a RuntimeSignal")


@dataclass
class _Batch:
    """One call's samples: what to open, act and score, and what each got so far.

    ``answers[i]`` stays None until sample ``i`` has a receipt or an error; an error set before
    scoring (a refused BeginEpisode) keeps the sample out of the scoring call.
    """

    episode_ids: list[str]
    texts: list[str]
    row_identities: list[dict[str, str] | None]
    identities: list[dict[str, str] | None]
    signals: list[RuntimeSignal.ValueType | None]
    policy_update: int
    parameters: list[dict[str, ParameterValue]]
    answers: list[ReceiptOrError | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.answers = [None] * len(self.episode_ids)

    def pending(self) -> list[int]:
        """The samples still waiting for an answer, in batch order."""
        return [index for index, answer in enumerate(self.answers) if answer is None]


class CertifiedRewardFunction:
    """A TRL reward function paying verified receipts; see the module docstring.

    Raises CertificationRefused (R-T-2) when ``require_certified`` and a scored receipt is not
    certified (e.g. the certificate expired at the trainer's step); with
    ``require_certified=False`` every receipt is logged as development only.
    """

    def __init__(
        self,
        client: WorkerClient,
        *,
        reward_contract_digest: str,
        policy_checkpoint_id: str,
        num_generations: int,
        require_certified: bool = True,
        actor: EpisodeActor | None = None,
        identity_column: str = "oracle_identity",
        episode_column: str = "episode_id",
        signal_column: str = "runtime_signal",
        policy_update: int | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        name: str = "certified_reward",
        capture: IntegrityCapture | None = None,
        record_column: str = "record_id",
        parameters_column: str = PARAMETERS_KEY,
    ) -> None:
        if num_generations < 1:
            raise ValidationError(f"num_generations must be at least 1, got {num_generations}")
        if max_batch < 1:
            raise ValidationError(f"max_batch must be at least 1, got {max_batch}")
        if policy_update is not None and policy_update < 0:
            raise ValidationError(f"policy_update must not be negative, got {policy_update}")
        validate_id(policy_checkpoint_id, "policy_checkpoint_id")
        self.client = client
        self.reward_contract_digest = reward_contract_digest
        self.policy_checkpoint_id = policy_checkpoint_id
        self.num_generations = num_generations
        self.require_certified = require_certified
        self.actor = actor
        self.identity_column = identity_column
        self.episode_column = episode_column
        self.signal_column = signal_column
        self.policy_update = policy_update
        self.max_batch = max_batch
        self.capture = capture
        self.record_column = record_column
        self.parameters_column = parameters_column
        # TRL names a reward function by its __name__ in its metrics and completions table.
        self.__name__ = name
        self._last: dict[str, list[Any]] = {}
        self._tally = BatchTally(0, 0, 0, 0, 0)

    # ---------------------------------------------------------------------------------------
    # The per-batch rules, shared by the sync and the asyncio paths
    # ---------------------------------------------------------------------------------------

    def metadata_columns(self) -> dict[str, list[Any]]:
        """The last batch's per-sample columns (R-T-3), one entry per sample (a copy)."""
        return {name: list(values) for name, values in self._last.items()}

    def last_tally(self) -> BatchTally:
        """The last batch counted: paid, scored, unscored, certified (what the metrics log)."""
        return self._tally

    def _step(self, kwargs: Mapping[str, Any]) -> int:
        """The policy update: the explicit override, else TRL's ``trainer_state.global_step``."""
        if self.policy_update is not None:
            return self.policy_update
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        if not isinstance(step, int) or step < 0:
            raise ValidationError(
                "no policy update: pass policy_update= or call with TRL's trainer_state"
            )
        return step

    def _plan(
        self, prompts: Sequence[Any], completions: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> _Batch:
        """Mint or read the episode ids and identities of a batch (no I/O)."""
        count = len(completions)
        if len(prompts) != count:
            raise ValidationError(f"{len(prompts)} prompts for {count} completions")
        contiguous_groups(count, self.num_generations)  # refuses a batch of partial groups
        step = self._step(kwargs)
        texts = [completion_text(completion) for completion in completions]
        raw_ids = column(kwargs, self.episode_column, count)
        raw_identities = column(kwargs, self.identity_column, count)
        raw_parameters = column(kwargs, self.parameters_column, count) or [None] * count
        parameters = [row_parameters(value, row) for row, value in enumerate(raw_parameters)]
        row_identities: list[dict[str, str] | None] = (
            [None] * count
            if raw_identities is None
            else [_identity(value, row) for row, value in enumerate(raw_identities)]
        )
        if self.actor is None:
            episode_ids = self._given_ids(raw_ids)
            raw_signals = column(kwargs, self.signal_column, count)
            signals: list[RuntimeSignal.ValueType | None] = (
                [None] * count
                if raw_signals is None
                else [_signal(value, row) for row, value in enumerate(raw_signals)]
            )
            return _Batch(
                episode_ids, texts, row_identities, row_identities, signals, step, parameters
            )
        if raw_identities is None:
            raise ValidationError(
                f"an actor needs the dataset's {self.identity_column!r} column (the row identity)"
            )
        episode_ids = []
        for index in range(count):
            prefix = str(raw_ids[index]) if raw_ids is not None else _DEFAULT_PREFIX
            episode_ids.append(validate_id(mint_episode_id(prefix, step, index), "episode_id"))
        identities: list[dict[str, str] | None] = [
            self.actor.identity_for(row or {}, episode_id)
            for row, episode_id in zip(row_identities, episode_ids, strict=True)
        ]
        return _Batch(
            episode_ids, texts, row_identities, identities, [None] * count, step, parameters
        )

    def _given_ids(self, raw_ids: list[Any] | None) -> list[str]:
        """The rollout's own episode ids: present and distinct within the batch (R-T-4)."""
        if raw_ids is None:
            raise ValidationError(
                f"without an actor the dataset must carry an {self.episode_column!r} column"
            )
        ids = [str(value) for value in raw_ids]
        seen: set[str] = set()
        for episode_id in ids:
            if episode_id in seen:
                raise ValidationError(
                    f"episode id {episode_id!r} appears more than once in one batch: TRL copies "
                    "a dataset row to every completion of its group, so a dataset column alone "
                    "collides (R-T-4); give each completion its own id, or pass an actor and let "
                    "this function mint them"
                )
            seen.add(episode_id)
        return ids

    def _descriptor(self, batch: _Batch, index: int) -> EpisodeDescriptor:
        return make_descriptor(
            episode_id=batch.episode_ids[index],
            policy_checkpoint_id=self.policy_checkpoint_id,
            policy_update=batch.policy_update,
            reward_contract_digest=self.reward_contract_digest,
            oracle_identity=batch.identities[index],
            runtime_signal=batch.signals[index],
            task_parameters=batch.parameters[index],
        )

    def _chunks(self, batch: _Batch) -> list[list[int]]:
        """The samples to score, in calls of at most ``max_batch``."""
        pending = batch.pending()
        return [pending[i : i + self.max_batch] for i in range(0, len(pending), self.max_batch)]

    def _act(self, batch: _Batch, index: int) -> None:
        """Run the actor on one opened sample (blocking: the asyncio path runs it in a thread)."""
        assert self.actor is not None
        identity = batch.identities[index] or {}
        row = batch.row_identities[index] or {}
        text, episode_id = batch.texts[index], batch.episode_ids[index]
        parameters = batch.parameters[index]
        # Only when the row has some: an actor written before parameters has no such keyword.
        if parameters:
            signal = self.actor.act(text, identity, row, episode_id, task_parameters=parameters)
        else:
            signal = self.actor.act(text, identity, row, episode_id)
        batch.signals[index] = signal

    @staticmethod
    def _record(batch: _Batch, chunk: Sequence[int], answers: Sequence[ReceiptOrError]) -> None:
        if len(answers) != len(chunk):
            raise ValidationError(f"{len(answers)} answers for {len(chunk)} descriptors")
        for index, answer in zip(chunk, answers, strict=True):
            batch.answers[index] = answer

    def _begin(self, batch: _Batch, index: int) -> pb.BeginEpisodeRequest:
        return make_begin(
            batch.episode_ids[index],
            self.reward_contract_digest,
            batch.identities[index] or {},
            task_parameters=batch.parameters[index],
        )

    @staticmethod
    def _record_begins(
        batch: _Batch, pending: Sequence[int], begun: Sequence[BeginOrError]
    ) -> list[int]:
        """Record the refused begins (a setup error is raised); return the samples to act on.

        A BeginEpisodes call that failed as a whole counts as every sample's refusal.
        """
        if len(begun) != len(pending):
            raise ValidationError(f"{len(begun)} answers for {len(pending)} begins")
        opened: list[int] = []
        for index, answer in zip(pending, begun, strict=True):
            if isinstance(answer, RewardSealError):
                if is_setup_error(answer):
                    raise answer
                batch.answers[index] = answer
            else:
                opened.append(index)
        return opened

    def _capture_begin(self, batch: _Batch) -> None:
        """Open the batch's episodes on the sentinel (blocking; before the actor acts)."""
        if self.capture is not None:
            self.capture.begin_sentinel(
                zip(batch.episode_ids, batch.identities, strict=True),
                policy_update=batch.policy_update,
            )

    def _capture_rows(self, batch: _Batch, kwargs: Mapping[str, Any]) -> None:
        """Hand the scored batch to the capture (blocking; after the rewards are computed)."""
        if self.capture is None:
            return
        count = len(batch.episode_ids)
        step = batch.policy_update
        explicit = column(kwargs, self.record_column, count) or [None] * count
        capture_batch(
            self.capture,
            policy_update=step,
            episode_ids=batch.episode_ids,
            texts=batch.texts,
            scalars=[result.scalar for result in sample_results(batch.episode_ids, batch.answers)],
            record_ids=[
                record_id_for(explicit[i], batch.row_identities[i], batch.episode_ids[i])
                for i in range(count)
            ],
            identities=batch.identities,
            group_ids=[f"{step}:{i // self.num_generations}" for i in range(count)],
            signals=batch.signals,
        )

    @staticmethod
    def _record_outage(batch: _Batch, chunk: Sequence[int], error: RewardSealError) -> None:
        # A whole call refused for anything but an outage (wrong token, wrong contract) is a
        # setup bug that would turn every reward into a fill: raised.
        if not is_transient(error):
            raise error
        for index in chunk:
            batch.answers[index] = error

    def _finish(self, batch: _Batch, kwargs: Mapping[str, Any]) -> list[float | None]:
        """Receipts -> rows -> certified check -> group fill, and the metadata columns."""
        rows = sample_results(batch.episode_ids, batch.answers)
        # Kept before the certified check so a stopped run can still show the batch that did it.
        self._last = metadata_columns(rows, require_certified=self.require_certified)
        self._tally = tally(rows)
        stop_on_setup_errors(rows)
        enforce_certified(rows, require_certified=self.require_certified)
        groups = contiguous_groups(len(rows), self.num_generations)
        rewards = fill_unscored([row.scalar for row in rows], groups)
        log_extra: Callable[[str, list[Any]], None] | None = kwargs.get("log_extra")
        if log_extra is not None:
            for name, values in self._last.items():
                log_extra(name, list(values))
        log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
        if log_metric is not None and rows:
            log_metric(PAID_SHARE_METRIC, self._tally.paid_share)
            log_metric(SCORED_SHARE_METRIC, self._tally.scored_share)
            log_metric(UNSCORED_SHARE_METRIC, self._tally.unscored_share)
        return rewards

    # ---------------------------------------------------------------------------------------
    # The blocking path
    # ---------------------------------------------------------------------------------------

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        """Score one TRL batch; one reward (or None for an all-unscored group) per completion."""
        batch = self._plan(prompts, completions, kwargs)
        if self.actor is not None:
            self._capture_begin(batch)
            pending = batch.pending()
            try:
                begun = self.client.begin_many(self._begin(batch, i) for i in pending)
            except RewardSealError as exc:
                begun = [exc] * len(pending)
            for index in self._record_begins(batch, pending, begun):
                self._act(batch, index)
        for chunk in self._chunks(batch):
            try:
                answers = self.client.score_many(self._descriptor(batch, i) for i in chunk)
            except RewardSealError as exc:
                self._record_outage(batch, chunk, exc)
                continue
            self._record(batch, chunk, answers)
        rewards = self._finish(batch, kwargs)
        self._capture_rows(batch, kwargs)
        return rewards

    def as_async(
        self,
        client: AsyncWorkerClient | None = None,
        *,
        target: str | None = None,
        token: str | None = None,
        trust: TrustSet | None = None,
        timeout: float | None = None,
        tls: ClientTls | None = None,
    ) -> AsyncCertifiedRewardFunction:
        """The same reward function for TRL's concurrent path (an ``async`` ``__call__``).

        Give a ready ``client``, or ``target``/``token``/``trust`` (and ``tls`` for a TLS
        channel) and the client is built on first call, inside the event loop TRL runs async
        reward functions on (a ``grpc.aio`` channel belongs to the loop that first uses it).
        """
        if client is not None:
            if tls is not None:
                raise ValidationError("tls configures a client as_async builds, not a given one")
            ready = client
            return AsyncCertifiedRewardFunction(self, lambda: ready)
        if target is None or token is None or trust is None:
            raise ValidationError("as_async needs a client, or target, token and trust")
        options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        address, secret, pinned = target, token, trust
        return AsyncCertifiedRewardFunction(
            self,
            lambda: AsyncWorkerClient(address, token=secret, trust=pinned, tls=tls, **options),
        )


class AsyncCertifiedRewardFunction:
    """:class:`CertifiedRewardFunction` over an :class:`AsyncWorkerClient`.

    Made by :meth:`CertifiedRewardFunction.as_async`; the rules, the configuration and the last
    batch's metadata columns are the sync function's own.
    """

    def __init__(
        self, rules: CertifiedRewardFunction, build: Callable[[], AsyncWorkerClient]
    ) -> None:
        self.rules = rules
        self._build = build
        self._client: AsyncWorkerClient | None = None
        self.__name__ = rules.__name__

    @property
    def client(self) -> AsyncWorkerClient:
        """The asyncio client (built on first use)."""
        if self._client is None:
            self._client = self._build()
        return self._client

    def metadata_columns(self) -> dict[str, list[Any]]:
        """The last batch's per-sample columns (R-T-3)."""
        return self.rules.metadata_columns()

    def last_tally(self) -> BatchTally:
        """The last batch counted (:meth:`CertifiedRewardFunction.last_tally`)."""
        return self.rules.last_tally()

    async def _begin_and_act(self, batch: _Batch) -> None:
        rules = self.rules
        await asyncio.to_thread(rules._capture_begin, batch)
        pending = batch.pending()
        begun: list[BeginOrError]
        try:
            begun = await self.client.begin_many(rules._begin(batch, i) for i in pending)
        except RewardSealError as exc:
            begun = [exc] * len(pending)
        opened = rules._record_begins(batch, pending, begun)
        # The actor blocks (it talks HTTP with urllib); keep it off the event loop.
        await asyncio.gather(*(asyncio.to_thread(rules._act, batch, i) for i in opened))

    async def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        """Score one TRL batch; one reward (or None for an all-unscored group) per completion."""
        rules = self.rules
        batch = rules._plan(prompts, completions, kwargs)
        if rules.actor is not None:
            await self._begin_and_act(batch)
        for chunk in rules._chunks(batch):
            try:
                answers = await self.client.score_many(rules._descriptor(batch, i) for i in chunk)
            except RewardSealError as exc:
                rules._record_outage(batch, chunk, exc)
                continue
            rules._record(batch, chunk, answers)
        rewards = rules._finish(batch, kwargs)
        # The capture's clients block: off the event loop TRL scores on.
        await asyncio.to_thread(rules._capture_rows, batch, kwargs)
        return rewards
