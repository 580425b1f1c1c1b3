"""In-process micro-benchmark of the worker client's CPU per episode (R-T-5 work included).

No server and no network: the seeded MockMed worker's ``Scorer`` (as in ``hot_path_micro.py``)
makes real answers up front (begin registrations and receipt envelopes signed by a real key),
and a loopback channel hands them to a real :class:`rewardseal.rpc.worker_client.AsyncWorkerClient`
the way gRPC would: each request goes through the generated stub's serializer, each answer through
its deserializer. What is timed is everything the client library does between the two (request
building, ``_call``, signature verification against the pinned key, strict parse, validation, the
binding of every answer to its request, the result objects), per episode, in thread CPU:

- ``unary``: ``begin`` then ``score`` of one episode (the descriptor built by ``make_descriptor``);
- ``batched``: ``begin_many`` of 64 (``make_begin``) then ``score_many`` of 64.

``ed25519`` is libsodium's verification of one receipt's signature alone, the part no code
change removes; each figure is also given as a multiple of it, taken within the same repeat
(steadier than milliseconds on a shared machine). ``floor`` is the same traffic with only the
serializer and deserializer calls (what any gRPC caller pays, verification or not), so
``unary - floor`` is what the library adds. Run by hand (``make test`` does not):
``.venv/bin/python bench/client_micro.py``; ``--profile tottime``
prints a cProfile (thread CPU) of one shape instead. Seeding and signing the answers takes a few
seconds.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nacl.bindings

from rewardseal.core.signing import SigningKey, TrustSet, pae
from rewardseal.rpc.worker_client import AsyncWorkerClient, make_begin, make_descriptor
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_worker.bundle import load_bundle
from rewardseal_worker.engine import ScoreJob, Scorer
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.seed import seed_mockmed
from rewardseal_worker.store import WorkerStore

BATCH = 64
CHECKPOINT = "ckpt.client-micro"
POLICY_UPDATE = 1


@dataclass
class Answers:
    """The worker's real answers for a pool of episodes, by episode id."""

    digest: str
    trust: TrustSet
    ids: list[str]
    patients: dict[str, str]
    begun: dict[str, pb.BeginEpisodeResponse]
    envelopes: dict[str, SignedEnvelope]


def make_answers(workdir: Path, episodes: int) -> Answers:
    """Begin and score ``episodes`` fresh episodes on a seeded in-process worker."""
    key = SigningKey.load_or_create(workdir / "worker.key")
    seeded = seed_mockmed(workdir / "data", key=key)
    trust = TrustSet([key.public_key])
    bundle = load_bundle(seeded.tier2_bundle_dir, trust=trust)
    store = WorkerStore(f"sqlite:///{workdir / 'store.db'}")
    try:
        scorer = Scorer(
            bundle=bundle, store=store, reader=make_reader(bundle.recipe, bundle.path), key=key
        )
        answers = Answers(bundle.contract_digest, trust, [], {}, {}, {})
        for start in range(0, episodes, BATCH):
            ids = [f"episode.client-micro-{n:09d}" for n in range(start, start + BATCH)]
            patients = {e: f"patient-cm-{i:03d}" for i, e in enumerate(ids)}
            jobs = [
                scorer.begin_job(make_begin(e, answers.digest, {"patient_id": p}))
                for e, p in patients.items()
            ]
            scored = (
                scorer.score_jobs_sync([ScoreJob(descriptor(e, answers.digest)) for e in ids])
                if _all_begun(scorer._begin_batch(jobs), ids, answers)
                else []
            )
            for episode_id, envelope in zip(ids, scored, strict=True):
                if not isinstance(envelope, SignedEnvelope):
                    raise SystemExit(f"scoring {episode_id} failed: {envelope}")
                answers.envelopes[episode_id] = envelope
            answers.ids.extend(ids)
            answers.patients.update(patients)
        return answers
    finally:
        store.close()


def _all_begun(begun: list[Any], ids: list[str], answers: Answers) -> bool:
    for episode_id, outcome in zip(ids, begun, strict=True):
        if not isinstance(outcome, pb.BeginEpisodeResponse):
            raise SystemExit(f"beginning {episode_id} failed: {outcome}")
        answers.begun[episode_id] = outcome
    return True


def descriptor(episode_id: str, digest: str) -> Any:
    return make_descriptor(
        episode_id=episode_id,
        policy_checkpoint_id=CHECKPOINT,
        policy_update=POLICY_UPDATE,
        reward_contract_digest=digest,
    )


class LoopbackChannel:
    """Stands in for a ``grpc.aio.Channel`` under the generated stub: a call serializes its
    request with the stub's serializer and deserializes the worker's prepared answer with the
    stub's deserializer, as gRPC does, and nothing else (no event loop round trip)."""

    def __init__(self, answers: Answers, *, floor: bool = False) -> None:
        self.answers = answers
        begun, envelopes = answers.begun, answers.envelopes
        # The answer bytes, prepared once: the worker's serializing is not the client's cost.
        self.wire: dict[str, Callable[[bytes], bytes]] = {
            "/rewardseal.v1.RewardWorkerService/BeginEpisode": lambda data: begun[
                pb.BeginEpisodeRequest.FromString(data).episode_id
            ].SerializeToString(),
            "/rewardseal.v1.RewardWorkerService/ScoreEpisode": lambda data: pb.ScoreEpisodeResponse(
                envelope=envelopes[pb.ScoreEpisodeRequest.FromString(data).descriptor.episode_id]
            ).SerializeToString(),
            "/rewardseal.v1.RewardWorkerService/BeginEpisodes": lambda data: (
                pb.BeginEpisodesResponse(
                    results=[
                        pb.BeginResult(episode_id=item.episode_id, begun=begun[item.episode_id])
                        for item in pb.BeginEpisodesRequest.FromString(data).items
                    ]
                ).SerializeToString()
            ),
            "/rewardseal.v1.RewardWorkerService/ScoreEpisodes": lambda data: (
                pb.ScoreEpisodesResponse(
                    results=[
                        pb.EpisodeResult(episode_id=d.episode_id, envelope=envelopes[d.episode_id])
                        for d in pb.ScoreEpisodesRequest.FromString(data).descriptors
                    ]
                ).SerializeToString()
            ),
        }
        self.prepared: dict[bytes, bytes] = {}
        self.floor = floor

    def prepare(self, path: str, request: Any) -> None:
        """Make the answer to ``request`` on ``path`` now, outside the timed region."""
        data = request.SerializeToString()
        self.prepared[data] = self.wire[path](data)

    def unary_unary(
        self,
        path: str,
        request_serializer: Callable[[Any], bytes],
        response_deserializer: Callable[[bytes], Any],
        **_: Any,
    ) -> Callable[..., Coroutine[Any, Any, Any]]:
        prepared = self.prepared

        async def call(request: Any, **_: Any) -> Any:
            return response_deserializer(prepared[request_serializer(request)])

        return call

    def stream_stream(self, *_: Any, **__: Any) -> None:
        return None

    async def close(self) -> None:
        return None


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Drive a coroutine that never suspends (the loopback never waits) to its result."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the client awaited something the loopback does not provide")


class Shapes:
    """The client's work for one unary or one batched round, on fresh episodes each time."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.channel = LoopbackChannel(answers)
        self.client = AsyncWorkerClient(
            "loopback:0",
            token="client-micro-token",
            trust=answers.trust,
            channel=self.channel,  # type: ignore[arg-type]
        )
        self.cursor: Iterator[str] = itertools.cycle(answers.ids)
        self.batches: Iterator[list[str]] = itertools.cycle(
            [answers.ids[i : i + BATCH] for i in range(0, len(answers.ids), BATCH)]
        )
        self.public_key = answers.trust.public_key(next(iter(answers.trust)))
        self._prepare()

    def _prepare(self) -> None:
        a, ch = self.answers, self.channel
        for e in a.ids:
            ch.prepare("/rewardseal.v1.RewardWorkerService/BeginEpisode", self._begin(e))
            ch.prepare(
                "/rewardseal.v1.RewardWorkerService/ScoreEpisode",
                pb.ScoreEpisodeRequest(descriptor=descriptor(e, a.digest)),
            )
        for start in range(0, len(a.ids), BATCH):
            ids = a.ids[start : start + BATCH]
            ch.prepare(
                "/rewardseal.v1.RewardWorkerService/BeginEpisodes",
                pb.BeginEpisodesRequest(items=[self._begin(e) for e in ids]),
            )
            ch.prepare(
                "/rewardseal.v1.RewardWorkerService/ScoreEpisodes",
                pb.ScoreEpisodesRequest(descriptors=[descriptor(e, a.digest) for e in ids]),
            )

    def _begin(self, episode_id: str) -> pb.BeginEpisodeRequest:
        return make_begin(
            episode_id, self.answers.digest, {"patient_id": self.answers.patients[episode_id]}
        )

    def unary(self) -> float:
        """Thread CPU of one ``begin`` + ``score``."""
        episode_id = next(self.cursor)
        digest, patient = self.answers.digest, self.answers.patients[episode_id]
        client = self.client
        started = time.thread_time()
        run(client.begin(episode_id, digest, {"patient_id": patient}))
        receipt = run(client.score(descriptor(episode_id, digest)))
        spent = time.thread_time() - started
        assert receipt.receipt.episode_id == episode_id
        return spent

    def batched(self) -> float:
        """Thread CPU per episode of one ``begin_many`` of 64 + ``score_many`` of 64."""
        ids = next(self.batches)
        digest, patients = self.answers.digest, self.answers.patients
        client = self.client
        started = time.thread_time()
        begun = run(
            client.begin_many(make_begin(e, digest, {"patient_id": patients[e]}) for e in ids)
        )
        results = run(client.score_many(descriptor(e, digest) for e in ids))
        spent = time.thread_time() - started
        failed = [r for r in (*begun, *results) if isinstance(r, Exception)]
        if failed:
            raise SystemExit(f"an entry failed: {failed[:2]}")
        return spent / BATCH

    def floor(self) -> float:
        """Thread CPU of the serializer/deserializer calls alone of one unary episode."""
        episode_id = next(self.cursor)
        digest, patient = self.answers.digest, self.answers.patients[episode_id]
        begin = self.channel.unary_unary(
            "", pb.BeginEpisodeRequest.SerializeToString, pb.BeginEpisodeResponse.FromString
        )
        score = self.channel.unary_unary(
            "", pb.ScoreEpisodeRequest.SerializeToString, pb.ScoreEpisodeResponse.FromString
        )
        started = time.thread_time()
        run(begin(make_begin(episode_id, digest, {"patient_id": patient})))
        run(score(pb.ScoreEpisodeRequest(descriptor=descriptor(episode_id, digest))))
        return time.thread_time() - started

    def ed25519(self) -> float:
        """Thread CPU of libsodium's verification of one receipt's signature alone (the part
        of the client's work no code change removes)."""
        envelope = self.answers.envelopes[next(self.cursor)]
        signed = pae(envelope.payload_type, envelope.payload)
        signature, public_key = envelope.signatures[0].sig, self.public_key
        started = time.thread_time()
        nacl.bindings.crypto_sign_open(signature + signed, public_key)
        return time.thread_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=BATCH * 16, help="answers made up front")
    parser.add_argument("--unary", type=int, default=3000, help="unary episodes timed")
    parser.add_argument("--batches", type=int, default=60, help="batches timed")
    parser.add_argument("--repeats", type=int, default=5, help="medians taken over")
    parser.add_argument("--profile", default="", help="cProfile sort key (tottime, cumtime)")
    parser.add_argument("--shape", default="batched", choices=("unary", "batched"))
    parser.add_argument("--callers", default="", help="with --profile: who calls these")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rewardseal-client-micro-") as scratch:
        answers = make_answers(Path(scratch), options.episodes - options.episodes % BATCH)
    shapes = Shapes(answers)
    for _ in range(200):  # warm-up
        shapes.unary()
    if options.profile:
        shape = shapes.unary if options.shape == "unary" else shapes.batched
        count = options.unary if options.shape == "unary" else options.batches
        profile = cProfile.Profile(time.thread_time)
        for _ in range(count):
            profile.runcall(shape)
        stats = pstats.Stats(profile).sort_stats(options.profile)
        stats.print_stats(40)
        if options.callers:
            stats.print_callers(options.callers)
        return
    shapes_timed = (
        ("floor", shapes.floor, options.unary),
        ("unary", shapes.unary, options.unary),
        ("batched", shapes.batched, options.batches),
        ("ed25519", shapes.ed25519, options.unary),
    )
    # The shapes take turns within each repeat, so each repeat's figures share one machine
    # state (a shared machine's speed swings by tens of percent between seconds); the ratio to
    # the libsodium verification of the same repeat is the steadiest figure.
    medians: dict[str, list[float]] = {name: [] for name, _, _ in shapes_timed}
    for _ in range(options.repeats):
        for name, shape, count in shapes_timed:
            medians[name].append(statistics.median(shape() for _ in range(count)) * 1000)
    for name, _, count in shapes_timed:
        runs = medians[name]
        ratio = statistics.median(
            run / verify for run, verify in zip(runs, medians["ed25519"], strict=True)
        )
        print(
            f"{name:8s} median {statistics.median(runs):.4f}  min {min(runs):.4f} ms thread "
            f"CPU per episode, {ratio:.2f}x one Ed25519 verification "
            f"(medians of {options.repeats} runs of {count}: "
            f"{' '.join(f'{m:.4f}' for m in runs)})",
            flush=True,
        )


if __name__ == "__main__":
    main()
