"""The wire rules of :mod:`rewardseal.integrity_messages`: spec documents through ``Struct``
(whole numbers come back as ints, what is not JSON is refused)."""

from __future__ import annotations

import math

import pytest

from rewardseal.errors import ValidationError
from rewardseal.integrity_messages import spec_struct, struct_document


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
