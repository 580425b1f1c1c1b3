"""The learning proof's sizes, steps and seeds (no heavy imports: the CLI reads its defaults)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rewardseal.core.errors import ValidationError

__all__ = ["LearningConfig"]


@dataclass(frozen=True)
class LearningConfig:
    """Every size, step count and seed of a learning proof run (fixed before it runs).

    The full run's defaults fit ``make proof-learning``'s ten minutes on two CPU cores: 128
    completions per step (32 tasks x 4 generations) so that every step is a boundary of more
    than the evidence rule's 100 distinct records (R-I-7; each completion writes under its own
    sandbox patient, the record the oracle reads).
    """

    seed: int = 0
    steps: int = 25
    prompts_per_step: int = 32
    num_generations: int = 4
    max_completion_length: int = 192
    learning_rate: float = 1e-3
    warm_start_steps: int = 300
    warm_start_batch: int = 16
    warm_start_rows: int = 2048
    warm_start_learning_rate: float = 3e-3
    hidden_size: int = 64
    layers: int = 2
    torch_threads: int = 1
    """One thread: the policy is tiny, and the worker, MockMed and control share the two cores
    (torch's own threads contending with them made steps slower, not faster)."""

    def __post_init__(self) -> None:
        for name in ("steps", "prompts_per_step", "num_generations", "max_completion_length"):
            if getattr(self, name) < 1:
                raise ValidationError(f"{name} must be at least 1")
        if self.num_generations < 2:
            raise ValidationError("GRPO needs at least two generations per task")

    @property
    def batch(self) -> int:
        """Completions per step."""
        return self.prompts_per_step * self.num_generations

    def to_json(self) -> dict[str, Any]:
        """The configuration as a JSON object."""
        return {**asdict(self), "batch": self.batch}
