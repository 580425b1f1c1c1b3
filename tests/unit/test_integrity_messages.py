"""The wire rules of :mod:`rewardseal.core.integrity.messages`: spec documents through ``Struct``
(whole numbers come back as ints, what is not JSON is refused) and signal rows through their
message (every field back, a missing enum refused with the row named)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
from support.integrity_builders import CONTRACT_B, row, varied_rows

from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity import AuditorObservation, SignalRow
from rewardseal.core.integrity.messages import (
    enum_value,
    enum_word,
    signal_row,
    signal_row_message,
    spec_struct,
    struct_document,
)
from rewardseal.v1 import integrity_pb2 as pb


def test_a_spec_reads_back_as_the_json_the_operator_wrote() -> None:
    doc = {
        "seed": 42,
        "threshold": 0.5,
        "negative": -3,
        "nested": {"sizes": [1, 2.5, {"deep": 7}], "flag": True, "none": None},
        "name": "broad",
    }
    back = struct_document(spec_struct(doc))
    assert back == doc
    assert type(back["seed"]) is int
    assert type(back["nested"]["sizes"][2]["deep"]) is int
    assert type(back["threshold"]) is float


def test_numbers_a_double_cannot_hold_exactly_stay_floats_and_nan_is_kept() -> None:
    back = struct_document(spec_struct({"big": 2**53, "nan": math.nan, "inf": math.inf}))
    assert type(back["big"]) is float
    assert math.isnan(back["nan"])
    assert back["inf"] == math.inf


@pytest.mark.parametrize("bad", [{"x": {1, 2}}, {"x": b"bytes"}, {"x": {1: "int key"}}])
def test_what_json_cannot_hold_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="not a JSON object"):
        spec_struct(bad)


@pytest.mark.parametrize("built", varied_rows(), ids=["full", "sentinel-error", "no-sentinel"])
def test_a_signal_row_reads_back_from_its_message(built: SignalRow) -> None:
    back = signal_row(signal_row_message(built))
    assert back == built
    assert back.digest == built.digest


def test_a_zero_optimizer_reward_travels_as_set_not_as_absent() -> None:
    message = signal_row_message(row(8, optimizer=0.0, sentinel="refused"))
    assert message.HasField("optimizer_raw")
    assert message.optimizer_raw == 0.0


@pytest.mark.parametrize(
    ("clear", "named"),
    [
        (lambda m: m.ClearField("selection"), "rows[3]: selection is required"),
        (lambda m: setattr(m.sentinel, "outcome", 0), "rows[3]: sentinel.outcome is required"),
        (lambda m: setattr(m.auditors[0], "outcome", 0), "rows[3]: auditors[].outcome"),
    ],
    ids=["selection", "sentinel-outcome", "auditor-outcome"],
)
def test_an_unspecified_enum_is_refused_with_the_row_named(
    clear: Callable[[pb.SignalRow], object], named: str
) -> None:
    auditor = AuditorObservation(CONTRACT_B, "accepted", 1.0, None)
    message = signal_row_message(row(3, optimizer=1.0, sentinel="accepted", auditors=[auditor]))
    clear(message)
    with pytest.raises(ValidationError, match=re.escape(named)):
        signal_row(message, "rows[3]")


def test_enum_words_are_the_suffix_and_unspecified_is_none() -> None:
    accepted = pb.SignalOutcome.SIGNAL_OUTCOME_ACCEPTED
    assert enum_word(pb.SignalOutcome, accepted, "SIGNAL_OUTCOME_") == "accepted"
    assert enum_value(pb.SignalOutcome, "accepted", "SIGNAL_OUTCOME_") == accepted
    assert enum_word(pb.SignalOutcome, 0, "SIGNAL_OUTCOME_") is None
    assert enum_word(pb.SignalOutcome, 999, "SIGNAL_OUTCOME_") is None
    assert enum_value(pb.SignalOutcome, None, "SIGNAL_OUTCOME_") == 0
