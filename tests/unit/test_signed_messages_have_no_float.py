"""No signed or digested message carries a 32-bit ``float`` field (R-DIG-1, R-VAL-6).

A ``float`` rounds on the way in, so a value that was digested or signed could read back as a
different number. The walk starts at every message that is signed, digested or validated
(RewardContract, RewardCertificate, RewardEvidenceReceipt, SignedEnvelope, CalibrationSummary,
RevocationList, EpisodeDescriptor) and follows message-typed fields (map entries included) to the
bottom. A companion test checks that the walk really reaches the ``double`` fields, so the
first test could fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from rewardseal.v1 import (
    certificate_pb2,
    contract_pb2,
    control_service_pb2,
    enums_pb2,
    episode_pb2,
    receipt_pb2,
    worker_service_pb2,
)

ROOTS: tuple[Descriptor, ...] = (
    contract_pb2.RewardContract.DESCRIPTOR,
    certificate_pb2.RewardCertificate.DESCRIPTOR,
    receipt_pb2.RewardEvidenceReceipt.DESCRIPTOR,
    receipt_pb2.SignedEnvelope.DESCRIPTOR,
    certificate_pb2.CalibrationSummary.DESCRIPTOR,
    certificate_pb2.RevocationList.DESCRIPTOR,
    episode_pb2.EpisodeDescriptor.DESCRIPTOR,
)

ALL_FILES = (
    certificate_pb2,
    contract_pb2,
    control_service_pb2,
    enums_pb2,
    episode_pb2,
    receipt_pb2,
    worker_service_pb2,
)


def reachable(root: Descriptor) -> Iterator[Descriptor]:
    """Every message type reachable from ``root`` through message-typed fields, each once."""
    seen: set[str] = set()
    stack = [root]
    while stack:
        message = stack.pop()
        if message.full_name in seen:
            continue  # guards cycles, e.g. google.protobuf.Struct <-> Value <-> ListValue
        seen.add(message.full_name)
        yield message
        stack.extend(field.message_type for field in message.fields if field.message_type)
        stack.extend(message.nested_types)


def fields_of(messages: Iterator[Descriptor]) -> Iterator[FieldDescriptor]:
    for message in messages:
        yield from message.fields


def _float_fields(root: Descriptor) -> list[str]:
    return [
        field.full_name
        for field in fields_of(reachable(root))
        if field.type == FieldDescriptor.TYPE_FLOAT
    ]


@pytest.mark.parametrize("root", ROOTS, ids=lambda d: f"R-DIG-1-{d.name}-has-no-float")
def test_no_float_field_reachable(root: Descriptor) -> None:
    assert _float_fields(root) == []


@pytest.mark.parametrize(
    "module", ALL_FILES, ids=lambda m: f"R-DIG-1-{m.__name__.rsplit('.', 1)[-1]}-has-no-float"
)
def test_no_float_field_anywhere_in_the_package(module: ModuleType) -> None:
    """Every top-level message of every rewardseal.v1 file, RPC requests and responses too."""
    file = module.DESCRIPTOR
    found = [
        name for message in file.message_types_by_name.values() for name in _float_fields(message)
    ]
    assert found == []


def test_walk_visits_the_double_fields() -> None:
    """The walk must reach known doubles, or the no-float test above could never fail."""
    doubles = {
        field.full_name
        for root in ROOTS
        for field in fields_of(reachable(root))
        if field.type == FieldDescriptor.TYPE_DOUBLE
    }
    expected = {
        "rewardseal.v1.RewardCertificate.epsilon",
        "rewardseal.v1.RewardCertificate.delta",
        "rewardseal.v1.RewardCertificate.threshold",
        "rewardseal.v1.RewardEvidenceReceipt.scalar_reward",
        # map<string, double>: reached only by following the map entry type.
        "rewardseal.v1.RewardEvidenceReceipt.RewardComponentsEntry.value",
        "rewardseal.v1.RewardComponent.weight",
        "rewardseal.v1.ScoringPolicy.verified_reward",
        "rewardseal.v1.CertificatePolicy.max_epsilon",
        "rewardseal.v1.CalibrationSummary.confidence",
        # google.protobuf.Struct metadata: reached only through the Struct/Value cycle.
        "google.protobuf.Value.number_value",
    }
    assert expected <= doubles, sorted(expected - doubles)


def test_walk_reaches_well_known_types_and_terminates_on_cycles() -> None:
    names = {message.full_name for message in reachable(episode_pb2.EpisodeDescriptor.DESCRIPTOR)}
    assert {
        "google.protobuf.Struct",
        "google.protobuf.Value",
        "google.protobuf.ListValue",
    } <= names
    receipt_names = {
        message.full_name for message in reachable(receipt_pb2.RewardEvidenceReceipt.DESCRIPTOR)
    }
    assert "google.protobuf.Timestamp" in receipt_names


def test_a_float_field_would_be_found() -> None:
    """The detector itself flags TYPE_FLOAT (checked on a well-known type that has one)."""
    from google.protobuf import wrappers_pb2

    assert _float_fields(wrappers_pb2.FloatValue.DESCRIPTOR) == ["google.protobuf.FloatValue.value"]
