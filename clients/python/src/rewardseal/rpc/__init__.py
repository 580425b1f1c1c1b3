"""rewardseal over gRPC: the only package of the client distribution that imports ``grpc``.

:mod:`~rewardseal.rpc.call_rules` (deadlines, message sizes, which failures are resent and how
long to wait, the paging rule), :mod:`~rewardseal.rpc.aio.transport` (the one call, listing and
stream loop; its blocking twin is generated), :mod:`~rewardseal.rpc.status` (rewardseal errors to
and from ``google.rpc.Status``), :mod:`~rewardseal.rpc.tls` (client TLS),
:mod:`~rewardseal.rpc.connection` (where a worker is and how to trust it), and the clients of the
worker (:mod:`~rewardseal.rpc.worker_client`), the control plane
(:mod:`~rewardseal.rpc.control_client`) and reward integrity
(:mod:`~rewardseal.rpc.integrity_client`). Each client is written once, for asyncio, in
:mod:`~rewardseal.rpc.aio`; :mod:`~rewardseal.rpc.blocking` is generated from it by
``tools/unasync.py`` (checked by ``make lint``). A client's request building and answer checking
live in its ``*_protocol`` module, apart from the I/O.
"""
