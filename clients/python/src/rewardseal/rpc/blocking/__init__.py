"""The blocking clients, generated from :mod:`rewardseal.rpc.aio` by ``tools/unasync.py``: edit
the asyncio modules, not these (``make lint`` fails when the two disagree). Import the clients
from :mod:`rewardseal.rpc.worker_client`, :mod:`rewardseal.rpc.control_client` and
:mod:`rewardseal.rpc.integrity_client`.
"""
