"""The ``rewardseal`` wheel, as a trainer installs it into its own environment (issue 28;
docs/trainers.md, "Install the client").

``make wheels`` builds it; a fresh virtual environment (no system site-packages, nothing of the
repository on its path) gets the wheel by ``pip install --no-deps --no-index`` and, beside it, the
distributions its own ``Requires-Dist`` names and what those require in turn, read from the
wheel's METADATA and linked from this test's environment. Nothing is downloaded, so it runs
offline and in CI alike, and it proves what a networked ``pip install dist/rewardseal-*.whl``
relies on: the wheel's declared dependencies are enough. ``pip check`` in the fresh venv must
pass, the trainer adapters must import, and no server, kit or MockMed package, and no trainer
framework, may be there.
"""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = (
    "rewardseal_server",
    "rewardseal_worker",
    "rewardseal_control",
    "rewardseal_mockmed",
    "rewardseal_kit",
)
FRAMEWORKS = ("trl", "verl", "verifiers", "torch", "transformers")
ADAPTERS = (
    "rewardseal",
    "rewardseal.rpc.worker_client",
    "rewardseal.rpc.control_client",
    "rewardseal.trainers.trl",
    "rewardseal.trainers.verl",
    "rewardseal.trainers.grader",
    "rewardseal.trainers.actors",
    "rewardseal.trainers.groups",
    "rewardseal.cli",
)
PROBE = """
import importlib, importlib.util, json, sys
adapters, absent = json.loads(sys.argv[1])
for name in adapters:
    importlib.import_module(name)
import rewardseal
from rewardseal.trainers.trl import CertifiedRewardFunction
from rewardseal.trainers.verl import CertifiedRewardManager
from rewardseal.trainers.grader import OpenAIGrader
print(json.dumps({
    "rewardseal": rewardseal.__file__,
    "present": [name for name in absent if importlib.util.find_spec(name) is not None],
    "loaded": sorted(name for name in absent if name in sys.modules),
}))
"""

pytestmark = pytest.mark.slow


def run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "PYTHONHOME"} and not k.startswith("MAKE")
    }
    return subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env=env,
        cwd=cwd,
    )


def requirements_of(wheel: Path) -> list[Requirement]:
    """The wheel's own ``Requires-Dist`` (no extras)."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        message = email.message_from_bytes(archive.read(name))
    return [Requirement(text) for text in message.get_all("Requires-Dist") or []]


def closure(requirements: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` need, transitively (markers evaluated)."""
    seen: dict[str, metadata.Distribution] = {}
    pending = [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]
    while pending:
        requirement = pending.pop()
        key = canonicalize_name(requirement.name)
        if key in seen:
            continue
        dist = metadata.distribution(requirement.name)
        assert dist.version in requirement.specifier or not requirement.specifier, requirement
        seen[key] = dist
        for text in dist.requires or []:
            needed = Requirement(text)
            if needed.marker is None or needed.marker.evaluate({"extra": ""}):
                pending.append(needed)
    return list(seen.values())


def link_distributions(dists: list[metadata.Distribution], into: Path) -> list[str]:
    """Symlink each distribution's top-level files (packages, modules, .dist-info) into
    ``into``; the distributions' names."""
    into.mkdir()
    for dist in dists:
        root = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            source = root / top
            if top in {"..", "__pycache__"} or not source.exists():
                continue  # console scripts live outside site-packages
            target = into / top
            if not target.exists():
                target.symlink_to(source)
    return sorted(canonicalize_name(dist.metadata["Name"]) for dist in dists)


def test_the_wheel_installs_alone_and_imports_the_trainer_adapters(tmp_path: Path) -> None:
    dist_dir = tmp_path / "dist"
    built = run("make", "--no-print-directory", "-s", "-C", REPO, "wheels", f"DIST={dist_dir}")
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist_dir.glob("rewardseal-*.whl")
    assert list(dist_dir.glob("rewardseal_kit-*.whl"))

    requirements = requirements_of(wheel)
    names = {canonicalize_name(r.name) for r in requirements}
    # Light: no server plumbing, no trainer framework, no torch among the client's own needs.
    assert not names & {canonicalize_name(n) for n in (*SERVER_PACKAGES, *FRAMEWORKS)}
    assert not any(r.name.startswith("rewardseal") for r in requirements)

    venv = tmp_path / "trainer-venv"
    made = run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    site = Path(
        run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
    )
    deps = link_distributions(closure(requirements), tmp_path / "deps")
    assert not set(deps) & {canonicalize_name(n) for n in SERVER_PACKAGES}
    (site / "trainer-deps.pth").write_text(f"{tmp_path / 'deps'}\n")

    # This environment's pip installs into the fresh one (no ensurepip, no index, no deps).
    installed = run(
        sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
        "--disable-pip-version-check", "--no-deps", "--no-index", wheel,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    checked = run(sys.executable, "-m", "pip", "--python", python, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    absent = [*SERVER_PACKAGES, *FRAMEWORKS]
    probed = run(python, "-I", "-c", PROBE, json.dumps([list(ADAPTERS), absent]), cwd=tmp_path)
    assert probed.returncode == 0, probed.stdout + probed.stderr
    answer = json.loads(probed.stdout)
    assert Path(answer["rewardseal"]).is_relative_to(site), answer  # the wheel, not the repo
    assert answer["present"] == [], answer
    assert answer["loaded"] == []
    assert shutil.which("rewardseal", path=str(venv / "bin"))  # the console script came along
