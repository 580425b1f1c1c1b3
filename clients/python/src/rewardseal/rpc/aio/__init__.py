"""The clients as written: asyncio, by hand, one module a service on one transport.

:mod:`rewardseal.rpc.blocking` is generated from these modules by ``tools/unasync.py`` (``make
lint`` fails when the committed twin differs from what it generates now), so each client is
written once. Import the clients from :mod:`rewardseal.rpc.worker_client`,
:mod:`rewardseal.rpc.control_client` and :mod:`rewardseal.rpc.integrity_client`, which name
both.
"""
