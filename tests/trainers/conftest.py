"""Fixtures of the trainer tests: a control plane with the integrity service on a SQLite file."""

from __future__ import annotations

from support.integrity_trainer import integrity_control

__all__ = ["integrity_control"]
