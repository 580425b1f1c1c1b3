"""An oracle identity's key is the RFC 8785 canonical JSON of its entries (R-W-2).

The store keys open episodes and credited records by it, so it must be the same string
whichever way it is computed: the short path for ASCII identities, or canonical_json.
"""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardseal.core.errors import ValidationError
from rewardseal_worker.identity import Identity

_names = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=12
)


@given(st.dictionaries(_names | st.text(min_size=1, max_size=6), st.text(max_size=16), max_size=4))
@settings(max_examples=200, deadline=None)
def test_identity_key_equals_rfc8785(values):
    """ASCII and non-ASCII names and values (astral, controls, quotes): the key is RFC 8785's."""
    identity = Identity(values)
    assert identity.key == rfc8785.dumps(values).decode()
    assert identity == values
    assert dict(identity.items()) == values
    assert set(identity.keys()) == set(values)
    assert sorted(identity.values()) == sorted(values.values())


@pytest.mark.parametrize(
    "values",
    [
        {"patient_id": "p-001", "clinic_id": "c-9"},
        {"patient_id": 'quote " backslash \\ tab \t'},
        {"patient_id": "\x00\x1f\x7f"},
        {"patient_id": "é\U0001f600"},
        {"\U0001f600": "a", "\uffff": "b"},  # astral name: UTF-16 order, not code points
    ],
    ids=["ascii", "escapes", "controls", "non-ascii-value", "astral-names"],
)
def test_identity_key_known_cases(values):
    assert Identity(values).key == rfc8785.dumps(values).decode()
    assert Identity(values) == Identity(dict(reversed(values.items())))


def test_identity_with_a_lone_surrogate_has_no_key():
    with pytest.raises(ValidationError, match="canonical"):
        Identity({"patient_id": "p-\ud800"})


def test_identity_mapping_reads():
    identity = Identity({"b": "2", "a": "1"})
    assert "a" in identity
    assert "c" not in identity
    assert identity.get("a") == "1"
    assert identity.get("c") is None
    assert identity.get("c", "x") == "x"
    assert list(identity) == ["a", "b"]
    assert list(identity.keys()) == ["a", "b"]
    assert list(identity.items()) == [("a", "1"), ("b", "2")]
