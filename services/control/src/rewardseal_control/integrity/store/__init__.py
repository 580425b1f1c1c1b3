"""Reward integrity's aggregates of the control store (docs/spec.md §12).

* :mod:`.revisions`: reward-system, retention-protocol and integrity-profile revisions (R-I-1,
  R-I-4, R-I-7);
* :mod:`.shards`: signal shards, open and sealed (R-I-3);
* :mod:`.audits`: audits of sealed shards, a state machine a runner claims (R-I-6..8);
* :mod:`.decisions`: audit bundles and decision histories (R-I-8).

They build on what every aggregate of :mod:`rewardseal_control.store` shares (its tables,
inputs, pagination and audit log) and are composed by its
:class:`~rewardseal_control.store.ControlStore` (``store.integrity_revisions``,
``store.integrity_shards``, ``store.integrity_audits``, ``store.integrity_decisions``), which
holds every other rule of the store (one method, one transaction; audit rows in the same
transaction; only :mod:`rewardseal.core.errors` classes leave).
"""
