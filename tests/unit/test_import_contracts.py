"""The package layering holds: `lint-imports` keeps every contract in the root pyproject.toml.

stubs <- core rules <- clients <- trainers; core <- server plumbing <- worker / control / MockMed;
the kit imports core and MockMed, and nothing in production imports the kit. A forbidden import
(a trainer module reaching for SQLAlchemy plumbing, the worker importing the kit, control importing
the worker, an import circle inside the kit) fails here, not in a review.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(*, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_every_import_contract_is_kept() -> None:
    done = lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_forbidden_import_breaks_a_contract(tmp_path: Path) -> None:
    """The contracts bite: a core module that imports the kit is reported.

    A copy of the ``rewardseal`` package earlier on the path stands in for the tree (so the tree
    is not touched): in it, ``rewardseal.canary`` imports the kit, as a careless core change would.
    """
    shutil.copytree(
        REPO / "clients/python/src/rewardseal",
        tmp_path / "rewardseal",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    canary = tmp_path / "rewardseal" / "canary.py"
    canary.write_text("import rewardseal_kit.actors\n")
    done = lint_imports(extra_path=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "rewardseal.canary -> rewardseal_kit.actors" in done.stdout
    assert "Nothing in production imports the kit BROKEN" in done.stdout


def test_no_module_of_the_kit_imports_itself_back() -> None:
    """No import circle inside the kit, modules taken one by one (the ``kit-acyclic`` contract
    takes sibling packages whole; this also catches a package's ``__init__`` and its own module,
    which that contract never compares). Function-level and TYPE_CHECKING imports count."""
    import grimp

    graph = grimp.build_graph("rewardseal_kit", cache_dir=None)
    circles = [
        (importer, imported)
        for importer in sorted(graph.modules)
        for imported in sorted(graph.find_modules_directly_imported_by(importer))
        if graph.find_shortest_chain(imported, importer) is not None
    ]
    assert circles == []
