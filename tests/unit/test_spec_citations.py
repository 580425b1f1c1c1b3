"""docs/spec.md is the rule book the code cites: every cited rule must exist there, and what its
index points at (modules, tests) must exist in the tree. A rename that forgets the spec, or a
citation of a rule nobody wrote down, fails here rather than misleading a reader."""

from __future__ import annotations

import os
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "docs" / "spec.md"
RULE = re.compile(r"\bR-(?:MSG|DIG|SIG|SCORE|VAL|CAL|W|C|MM|T|I|H|A)-\d+\b")
# A range is written ``R-I-1..9``, ``R-I-1 … R-I-9`` or with an en dash; ``R-MSG-10-128`` (a test
# case id) is not one.
RANGE = re.compile(r"\b(R-[A-Z]+-)(\d+)\s*(?:…|\.\.\.?|\u2013)\s*(?:R-[A-Z]+-)?(\d+)\b")
DEFINITION = re.compile(r"^(R-[A-Z]+-\d+)\s", re.MULTILINE)
MODULE = re.compile(r"`(rewardseal(?:_[a-z]+)?(?:\.[a-z_0-9]+)*)")
SKIPPED_SUFFIXES = (".lock", ".png", ".json", ".sqlite")


@cache
def defined_rules() -> frozenset[str]:
    return frozenset(DEFINITION.findall(SPEC.read_text()))


@cache
def index_rows() -> list[str]:
    text = SPEC.read_text()
    start = text.index("## Index")
    return [line for line in text[start:].splitlines() if line.startswith("| R-")]


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [
        REPO / name
        for name in listed.split("\0")
        if name and not name.endswith(SKIPPED_SUFFIXES) and name != "docs/spec.md"
    ]


def cited_rules() -> dict[str, set[str]]:
    """Rule id -> files citing it (ranges such as ``R-I-1..9`` expanded)."""
    cited: dict[str, set[str]] = {}
    for path in tracked_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        found = set(RULE.findall(text))
        for prefix, low, high in RANGE.findall(text):
            found.update(f"{prefix}{n}" for n in range(int(low), int(high) + 1))
        for rule in found:
            cited.setdefault(rule, set()).add(str(path.relative_to(REPO)))
    return cited


def test_the_spec_defines_rules() -> None:
    assert len(defined_rules()) >= 60
    assert {"R-W-3", "R-T-1", "R-W-9", "R-C-4"} <= defined_rules()


def test_every_cited_rule_is_defined_in_the_spec() -> None:
    undefined = {
        rule: sorted(files)[:3]
        for rule, files in cited_rules().items()
        if rule not in defined_rules()
    }
    assert not undefined, f"cited but not defined in docs/spec.md: {undefined}"


def test_every_defined_rule_has_an_index_row() -> None:
    indexed: set[str] = set()
    for row in index_rows():
        first_cell = row.split("|")[1]
        indexed.update(RULE.findall(first_cell))
        for prefix, low, high in RANGE.findall(first_cell):
            indexed.update(f"{prefix}{n}" for n in range(int(low), int(high) + 1))
    assert defined_rules() - indexed == set()


def index_tests() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for row in index_rows():
        last_file = None
        for match in re.finditer(r"`(tests/[\w/]+\.py)::(test_\w+)`|`::(test_\w+)`", row):
            if match.group(1):
                last_file = match.group(1)
                found.append((last_file, match.group(2)))
            elif last_file is not None:
                found.append((last_file, match.group(3)))
    return found


@pytest.mark.parametrize(("path", "name"), index_tests())
def test_every_test_the_index_names_exists(path: str, name: str) -> None:
    source = REPO / path
    assert source.is_file(), f"{path} is gone: update the index of docs/spec.md"
    assert re.search(rf"^\s*(async )?def {name}\b", source.read_text(), re.MULTILINE), (
        f"{path} has no {name}: update the index of docs/spec.md"
    )


def index_modules() -> set[str]:
    modules: set[str] = set()
    for row in index_rows():
        cells = row.split("|")
        modules.update(MODULE.findall(cells[2]))
    return modules


@cache
def source_packages() -> dict[str, tuple[Path, ...]]:
    """Every ``src/<package>`` directory of the checkout, by package name, found in one walk.

    Hidden directories (the virtual environments, ``.run``, ``.git``) are never entered: a glob
    per module through ``.venv`` made this test take minutes.
    """
    found: dict[str, list[Path]] = {}
    for dirpath, dirnames, _ in os.walk(REPO):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
        base = Path(dirpath)
        if base.name == "src":
            for name in dirnames:
                found.setdefault(name, []).append(base / name)
    return {name: tuple(paths) for name, paths in found.items()}


def module_exists(dotted: str) -> bool:
    """True when ``dotted`` names a package, a module, or an attribute path inside one."""
    top = dotted.split(".")[0]
    roots = list(source_packages().get(top, ()))
    roots += [p for p in REPO.glob(f"clients/python/*/{top}") if p.is_dir()]
    parts = dotted.split(".")[1:]
    for root in roots:
        here = root
        for index, part in enumerate(parts):
            if (here / part).is_dir():
                here = here / part
                continue
            if (here / f"{part}.py").is_file():
                return True
            # An attribute of the package: the remaining names live in its __init__.
            return index > 0 or (here / "__init__.py").is_file()
        return True
    return False


def test_every_module_the_index_names_exists() -> None:
    missing = sorted(m for m in index_modules() if not module_exists(m))
    assert not missing, f"docs/spec.md's index names modules that do not exist: {missing}"
