"""Private directories: the one way rewardseal makes a directory for keys, tokens and data.

Core, not server plumbing, because a trainer saving a signing key (:mod:`rewardseal.core.signing`)
needs it as much as a service making its data directory; the services' settings re-export it
(:mod:`rewardseal_server.service_settings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["PRIVATE_DIR_MODE", "make_private_dir"]

PRIVATE_DIR_MODE: Final = 0o700
"""Mode of a data or key directory a service creates: its files are for the service alone."""


def make_private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents 0700 (whatever the umask); return ``path``.

    Directories that already exist keep their mode: a data directory may be one an operator
    made on purpose (a mount point, a shared volume), and changing it is theirs to decide.
    """
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # Another starter made it at the same moment: theirs is used as it is.
        # mkdir's mode passes through the umask; chmod does not.
        directory.chmod(PRIVATE_DIR_MODE)
    return path
