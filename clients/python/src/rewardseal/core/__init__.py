"""The pure rules of rewardseal, shared by the worker, the control plane and every trainer.

Contracts and their digests, canonical JSON, Ed25519 signing and DSSE envelopes, validation,
``score()``, receipts, certificates, calibration arithmetic, issuing and accepting certificates,
revocation lists, judging (:mod:`rewardseal.core.judging`) and the reward-integrity rules a
trainer needs (:mod:`rewardseal.core.integrity`; the audit statistics only the control plane
runs are in ``rewardseal_server.integrity_audit``), and the one error hierarchy
(:mod:`rewardseal.core.errors`). Nothing here imports gRPC or a trainer framework: the messages
are the generated protobuf classes of :mod:`rewardseal.v1`, the transport lives in
:mod:`rewardseal.rpc`.
"""
