"""The screen dump keeps its newest rows and banners, in memory and in a file alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardseal_mockmed.screen import SAVED_BANNER, ScreenDump


@pytest.fixture(params=["memory", "file"])
def dump(request: pytest.FixtureRequest, tmp_path: Path) -> ScreenDump:
    path = tmp_path / "screen.json" if request.param == "file" else None
    return ScreenDump(path, max_rows=3)


def test_oldest_rows_and_banners_are_dropped_beyond_max_rows(dump: ScreenDump) -> None:
    for n in range(5):
        dump.show({"id": f"enc-{n}", "patient_id": f"patient-{n}"})
    document = dump.document()
    assert [row["id"] for row in document["collections"]["encounters"]] == [
        "enc-2",
        "enc-3",
        "enc-4",
    ]
    assert document["banner"] == {f"patient-{n}": SAVED_BANNER for n in (2, 3, 4)}


def test_a_reader_cannot_change_the_dump_through_its_copy(dump: ScreenDump) -> None:
    dump.show({"id": "enc-1", "patient_id": "patient-1"})
    copy = dump.document()
    copy["collections"]["encounters"].clear()
    copy["banner"].clear()
    assert dump.document("patient-1")["banner"] == {"patient-1": SAVED_BANNER}
    assert len(dump.document()["collections"]["encounters"]) == 1
