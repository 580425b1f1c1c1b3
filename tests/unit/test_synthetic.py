"""Shared synthetic vocabularies: encounter notes and the generic fault classes."""

from __future__ import annotations

import random

from rewardseal.core.digest import digest_json
from rewardseal.core.faults import GENERIC_FAULT_CLASSES
from rewardseal_kit import extradup, mockmed
from rewardseal_mockmed.synthetic import COMPLAINTS, PLANS, synthetic_note
from rewardseal_worker import calibration


def test_a_note_draws_a_complaint_then_a_plan() -> None:
    rng, mirror = random.Random(11), random.Random(11)
    for _ in range(50):
        expected = f"Synthetic: {mirror.choice(COMPLAINTS)}; {mirror.choice(PLANS)}."
        assert synthetic_note(rng) == expected
    # Same draws, same state: what a caller draws next is unchanged.
    assert rng.random() == mirror.random()


def test_notes_are_a_pure_function_of_the_seed() -> None:
    first = [synthetic_note(random.Random(5)) for _ in range(3)]
    assert first == [synthetic_note(random.Random(5)) for _ in range(3)]
    notes = {synthetic_note(random.Random(seed)) for seed in range(200)}
    assert len(notes) > 10
    assert all(note.startswith("Synthetic: ") and note.endswith(".") for note in notes)


def test_extradup_variants_write_synthetic_notes() -> None:
    for spec in extradup.variants(20, 3):
        complaint, _, plan = spec.fields["note"].removeprefix("Synthetic: ").partition("; ")
        assert complaint in COMPLAINTS
        assert plan.removesuffix(".") in PLANS


def test_one_list_of_generic_fault_classes() -> None:
    assert calibration.GENERIC_FAULT_CLASSES is GENERIC_FAULT_CLASSES
    assert mockmed.CALIBRATION_CORPUS["fault_classes"] == list(GENERIC_FAULT_CLASSES)
    assert len(set(GENERIC_FAULT_CLASSES)) == len(GENERIC_FAULT_CLASSES) == 6


def test_the_mockmed_corpus_digest_is_unchanged() -> None:
    # Pinned: the corpus digest is bound into every MockMed contract and certificate.
    digest = digest_json(mockmed.CALIBRATION_CORPUS)
    assert digest == mockmed.CORPUS_DIGEST
    assert digest == "sha256:c1cd6199050ce487dee0ac14aa4c495a4c8f5e316c677d07568a1a96249f29d9"
