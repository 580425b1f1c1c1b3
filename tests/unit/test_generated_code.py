"""The committed stubs in clients/python/src/rewardseal/v1 equal a fresh `tools/genproto.py` run.

The proto files are the source of truth (docs/spec.md §2). These tests load tools/genproto.py by
path (tools/ is not a package), check that ``stale_files()`` finds nothing, that ``generate()``
writes every stub for every .proto, and that ``stale_files()`` does report a committed tree that
was changed, lost a file or gained one.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import pytest
from support.tools import load_tool

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path("rewardseal") / "v1"
COMMITTED = REPO_ROOT / "clients" / "python" / "src"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


@pytest.fixture(scope="module")
def genproto() -> ModuleType:
    return load_tool("genproto")


@pytest.fixture
def committed_copy(tmp_path: Path) -> Path:
    """A copy of the committed generated tree, laid out as genproto expects an output dir."""
    shutil.copytree(COMMITTED / PACKAGE, tmp_path / PACKAGE)
    return tmp_path


def _stems() -> list[str]:
    return sorted(p.stem for p in (REPO_ROOT / "proto" / PACKAGE).glob("*.proto"))


def test_there_are_protos_to_check(genproto: ModuleType) -> None:
    assert _stems(), "no .proto files found"
    assert [Path(p).stem for p in genproto.proto_files()] == _stems()
    assert genproto.ROOT == REPO_ROOT


def test_committed_stubs_are_not_stale(genproto: ModuleType) -> None:
    assert genproto.stale_files() == [], "run `make proto` (python tools/genproto.py) and commit"


def test_generate_writes_every_stub_for_every_proto(genproto: ModuleType, tmp_path: Path) -> None:
    genproto.generate(tmp_path)
    out = tmp_path / PACKAGE
    expected = {f"{stem}{suffix}" for stem in _stems() for suffix in SUFFIXES} | {"__init__.py"}
    produced = {p.name for p in out.iterdir() if p.is_file()}
    assert expected <= produced, sorted(expected - produced)
    assert produced - expected == set()
    for name in expected:
        assert (out / name).stat().st_size > 0, name


def test_generate_is_deterministic(genproto: ModuleType, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    genproto.generate(first)
    genproto.generate(second)
    for path in sorted((first / PACKAGE).iterdir()):
        assert path.read_bytes() == (second / PACKAGE / path.name).read_bytes(), path.name


def test_unchanged_copy_is_not_stale(genproto: ModuleType, committed_copy: Path) -> None:
    assert genproto.stale_files(committed_copy) == []


def test_one_changed_byte_is_reported(genproto: ModuleType, committed_copy: Path) -> None:
    target = committed_copy / PACKAGE / "receipt_pb2.py"
    data = bytearray(target.read_bytes())
    middle = len(data) // 2
    data[middle] = data[middle] ^ 0x01
    target.write_bytes(bytes(data))
    assert genproto.stale_files(committed_copy) == ["receipt_pb2.py"]


def test_a_missing_stub_is_reported(genproto: ModuleType, committed_copy: Path) -> None:
    (committed_copy / PACKAGE / "contract_pb2_grpc.pyi").unlink()
    assert genproto.stale_files(committed_copy) == ["contract_pb2_grpc.pyi"]


def test_an_extra_stub_is_reported(genproto: ModuleType, committed_copy: Path) -> None:
    (committed_copy / PACKAGE / "removed_pb2.py").write_text("# left over from a deleted proto\n")
    assert genproto.stale_files(committed_copy) == ["removed_pb2.py"]
