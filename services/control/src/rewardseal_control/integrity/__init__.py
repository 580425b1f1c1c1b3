"""Reward integrity in the control plane (docs/spec.md §12, R-I-1..10; docs/integrity.md).

The rules are core's (:mod:`rewardseal.core.integrity`) and the audit computation is the server
plumbing's (:mod:`rewardseal_server.integrity_audit`); this package keeps and serves them:

* :mod:`.service`: the gRPC face, ``RewardIntegrityService``;
* :mod:`.runner`: the audit runner, which runs audits off the RPC path;
* :mod:`.views`: read-only views of decided audits (samples, metrics, comparisons);
* :mod:`.convert`: between the integrity protos and core's integrity types;
* :mod:`.store`: the aggregates :class:`~rewardseal_control.store.ControlStore` composes for
  reward integrity (revisions, signal shards, audits, bundles and decision histories);
* :mod:`.cli`: ``rewardseal-control integrity …``.

The tables are in :mod:`rewardseal_control.models` and the migration in
``migrations/versions/0002_integrity.py``: control has one schema and one migration chain.

Nothing is imported here, so that importing one part (the store's aggregates, which the
control store composes) does not load the others.
"""
