"""rewardseal-worker: reads the system of record, judges, signs and stores receipts (SPEC section 7)."""
