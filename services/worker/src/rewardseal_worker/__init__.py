"""rewardseal-worker: reads the system of record, judges, signs, stores receipts.

Its behaviour is docs/spec.md §7.
"""

__version__ = "0.1.0"
