"""rewardseal-worker: reads the system of record, judges, signs, stores receipts (SPEC §7)."""

__version__ = "0.1.0"
