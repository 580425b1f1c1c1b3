"""The runtime signal a descriptor states (R-MSG-9, R-W-4): the field, else
``metadata.runtime_signal`` (how HTTP reward clients send it), else COMPLETED. A signal in
metadata used to be ignored, so a halted episode was judged as completed."""

from __future__ import annotations

from typing import Any

import pytest

from rewardseal.core.errors import InvalidEpisode
from rewardseal.core.validation import runtime_signal_named, runtime_signal_of
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal.v1.episode_pb2 import EpisodeDescriptor

HALTED = RuntimeSignal.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT


def _descriptor(field: int | None = None, metadata: Any = None) -> EpisodeDescriptor:
    descriptor = EpisodeDescriptor()
    if field is not None:
        descriptor.runtime_signal = field  # type: ignore[assignment]
    if metadata is not None:
        descriptor.metadata.update({"runtime_signal": metadata})
    return descriptor


def test_absent_everywhere_is_completed() -> None:
    assert runtime_signal_of(_descriptor()) == RuntimeSignal.RUNTIME_SIGNAL_COMPLETED


@pytest.mark.parametrize(
    "word", ["halted_before_effect", "HALTED_BEFORE_EFFECT", "RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT"]
)
def test_metadata_signal_is_honoured(word: str) -> None:
    assert runtime_signal_of(_descriptor(metadata=word)) == HALTED


def test_field_alone_and_field_agreeing_with_metadata() -> None:
    assert runtime_signal_of(_descriptor(field=HALTED)) == HALTED
    assert runtime_signal_of(_descriptor(field=HALTED, metadata="halted_before_effect")) == HALTED


def test_field_and_metadata_naming_different_signals_is_refused() -> None:
    with pytest.raises(InvalidEpisode, match="another signal"):
        runtime_signal_of(_descriptor(field=HALTED, metadata="completed"))


@pytest.mark.parametrize(
    "value", ["exploded", "unspecified", "", 2, ["halted_before_effect"], {"a": "b"}]
)
def test_unknown_metadata_signal_is_refused_naming_the_field(value: Any) -> None:
    with pytest.raises(InvalidEpisode, match=r"metadata\.runtime_signal must be one of"):
        runtime_signal_of(_descriptor(metadata=value))


def test_a_hostile_word_is_quoted_short() -> None:
    with pytest.raises(InvalidEpisode) as refused:
        runtime_signal_named("x" * 5000, "runtime_signal")
    assert len(refused.value.message) < 300
