"""rewardseal over gRPC: the only package of the client distribution that imports ``grpc``.

:mod:`~rewardseal.rpc.transport` (channels, deadlines, message sizes, the retry loop),
:mod:`~rewardseal.rpc.status` (rewardseal errors to and from ``google.rpc.Status``),
:mod:`~rewardseal.rpc.tls` (client TLS), :mod:`~rewardseal.rpc.connection` (where a worker is and
how to trust it), and the clients of the worker (:mod:`~rewardseal.rpc.worker_client`), the
control plane (:mod:`~rewardseal.rpc.control_client`) and reward integrity
(:mod:`~rewardseal.rpc.integrity_client`).
"""
