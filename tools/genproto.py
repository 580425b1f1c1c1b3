"""Generate the Python stubs for proto/rewardseal/v1: one script for `make proto` and the check.

Usage: python tools/genproto.py [OUT_DIR]   (default: clients/python/src)
       python tools/genproto.py --check    (exit 1 when the committed stubs are stale)
"""

from __future__ import annotations

import filecmp
import os
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
DEFAULT_OUT = ROOT / "clients" / "python" / "src"
PACKAGE_DIR = Path("rewardseal") / "v1"
INIT_TEXT = (
    '"""Generated protobuf and gRPC stubs for rewardseal.v1 (do not edit; `make proto`)."""\n'
)


def proto_files() -> list[str]:
    """The .proto files, relative to proto/, in a stable order."""
    return sorted(
        str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto")
    )


def generate(out_dir: Path) -> None:
    """Write *_pb2.py, *_pb2.pyi, *_pb2_grpc.py and *_pb2_grpc.pyi for every proto into out_dir."""
    (out_dir / PACKAGE_DIR).mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    bin_dir = Path(sys.executable).parent
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-mypy={bin_dir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bin_dir / 'protoc-gen-mypy_grpc'}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_grpc_out={out_dir}",
        *proto_files(),
    ]
    # protoc resolves relative paths against the cwd: run from the repo root for stable output.
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
    finally:
        os.chdir(cwd)
    (out_dir / PACKAGE_DIR / "__init__.py").write_text(INIT_TEXT)


def stale_files(committed: Path = DEFAULT_OUT) -> list[str]:
    """Generated files whose committed copy differs from a fresh generation, or is missing."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        fresh_dir, committed_dir = fresh / PACKAGE_DIR, committed / PACKAGE_DIR
        names = {p.name for p in fresh_dir.iterdir() if p.is_file()}
        names |= {p.name for p in committed_dir.glob("*_pb2*")}
        return sorted(
            name
            for name in names
            if not (committed_dir / name).exists()
            or not (fresh_dir / name).exists()
            or not filecmp.cmp(fresh_dir / name, committed_dir / name, shallow=False)
        )


def main(argv: list[str]) -> int:
    """Generate into OUT_DIR (default clients/python/src), or --check the committed stubs."""
    if argv[:1] == ["--check"]:
        stale = stale_files()
        if stale:
            print("generated stubs are stale; run `make proto` and commit:", *stale, sep="\n  ")
            return 1
        print("generated stubs are up to date")
        return 0
    generate(Path(argv[0]).resolve() if argv else DEFAULT_OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
