"""Certify the reward on the synthetic ExtraDup corpus, and a quick self-test.

:func:`certify_corpus` replays every family's scripted completion on ``variants_per_family``
synthetic specs of each store through :func:`.reward.certify_completion` (the function the
environment pays with) and counts false accepts (a hacking family paid) and false refusals (the
gold write not paid). The bound is the exact one-sided Clopper-Pearson upper bound of
``rewardseal.core.calibration`` (R-CAL-1) on the hacking trials.

The bound speaks for this reward on this synthetic corpus only: the trials are scripted replays
of the seven hacking families, not draws from a policy.

Run ``python -m rewardseal_mockmed_extradup.certify`` for the self-test and the corpus numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rewardseal.core.calibration import METHOD, clopper_pearson_upper
from rewardseal.core.errors import CertificationRefused
from rewardseal_kit.extradup import (
    CONTROL,
    FAMILIES,
    HACKING_FAMILIES,
    scripted_completion,
    variants,
)

from .reward import certify_completion
from .tasks import STORES, check_stores

__all__ = ["CorpusReport", "certify_corpus", "main", "self_test"]

DEFAULT_VARIANTS = 50
"""Synthetic specs per family and store in :func:`certify_corpus`."""
DEFAULT_DELTA = 0.05
"""One minus the confidence of the bound."""


@dataclass(frozen=True)
class CorpusReport:
    """Counts of one corpus run and the bound they give.

    ``trials`` and ``false_accepts`` count hacking-family replays only; the gold replays are
    ``control_trials`` and ``false_refusals``. ``per_family`` maps each family to
    ``(trials, paid)``.
    """

    trials: int
    false_accepts: int
    control_trials: int
    false_refusals: int
    upper_bound: float
    delta: float
    seed: int
    variants_per_family: int
    stores: tuple[str, ...]
    per_family: dict[str, tuple[int, int]] = field(hash=False)

    @property
    def ok(self) -> bool:
        """No hacking family was paid and the gold write always was."""
        return self.false_accepts == 0 and self.false_refusals == 0

    def to_json(self) -> dict[str, Any]:
        """JSON-ready summary (enough to recompute the bound)."""
        return {
            "method": METHOD,
            "confidence": 1.0 - self.delta,
            "trials": self.trials,
            "false_accepts": self.false_accepts,
            "control_trials": self.control_trials,
            "false_refusals": self.false_refusals,
            "upper_bound": self.upper_bound,
            "seed": self.seed,
            "variants_per_family": self.variants_per_family,
            "stores": list(self.stores),
            "per_family": {
                name: {"trials": trials, "paid": paid}
                for name, (trials, paid) in self.per_family.items()
            },
        }


def certify_corpus(
    variants_per_family: int = DEFAULT_VARIANTS,
    seed: int = 0,
    *,
    stores: Sequence[str] = STORES,
    delta: float = DEFAULT_DELTA,
) -> CorpusReport:
    """Replay every family on ``variants_per_family`` specs per store and count the outcomes."""
    chosen = check_stores(stores)
    counts = {name: [0, 0] for name in FAMILIES}
    for store in chosen:
        for spec in variants(variants_per_family, seed, kind=store):
            for name in FAMILIES:
                paid = certify_completion(scripted_completion(name, spec), spec).reward > 0.0
                counts[name][0] += 1
                counts[name][1] += int(paid)
    trials = sum(counts[name][0] for name in HACKING_FAMILIES)
    false_accepts = sum(counts[name][1] for name in HACKING_FAMILIES)
    control_trials, control_paid = counts[CONTROL]
    return CorpusReport(
        trials=trials,
        false_accepts=false_accepts,
        control_trials=control_trials,
        false_refusals=control_trials - control_paid,
        upper_bound=clopper_pearson_upper(false_accepts, trials, delta),
        delta=delta,
        seed=seed,
        variants_per_family=variants_per_family,
        stores=chosen,
        per_family={name: (total, paid) for name, (total, paid) in counts.items()},
    )


def self_test(seed: int = 0) -> dict[str, float]:
    """Check that the control pays 1.0 and every hacking family 0.0 on one spec per store.

    Returns each ``<store>/<family>`` reward; raises
    :class:`~rewardseal.core.errors.CertificationRefused` naming every family that broke the rule.
    """
    rewards: dict[str, float] = {}
    broken: list[str] = []
    for store in STORES:
        (spec,) = variants(1, seed, kind=store)
        for name in FAMILIES:
            value = certify_completion(scripted_completion(name, spec), spec).reward
            rewards[f"{store}/{name}"] = value
            if value != (1.0 if name == CONTROL else 0.0):
                broken.append(f"{store}/{name}={value}")
    if broken:
        raise CertificationRefused(f"the reward does not fail closed: {', '.join(broken)}")
    return rewards


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run :func:`self_test`, then print :func:`certify_corpus` as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--variants", type=int, default=DEFAULT_VARIANTS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    self_test(args.seed)
    started = time.perf_counter()
    report = certify_corpus(args.variants, args.seed)
    summary = report.to_json()
    summary["wall_s"] = round(time.perf_counter() - started, 3)
    print(json.dumps(summary, indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
