"""The system of record's probe: one read-only, parameterized read that no episode depends on
(R-W-16).

The worker probes its SoR once at start (a failure refuses to start, in one line) and then
every health interval (:mod:`rewardseal_worker.health_watch`: a failure turns health
NOT_SERVING until a probe succeeds again). The probe is the reader's own batched read
(``read_many``, the path every episode takes) of one made-up identity, :data:`PROBE_VALUE` under
every identity key of the contract, so it checks exactly what scoring needs and nothing more:

* ``sql``: one parameterized ``SELECT`` of the recipe's table and columns, through the reader's
  own engine. SQLite is opened read-only (``mode=ro``): a missing file is refused, never
  created. PostgreSQL: the same statement on a pooled connection.
* ``json_file`` / ``screen_dump``: the file is read and its collection found.
* ``rest`` / ``fhir``: one ``GET`` of the recipe's path with the probe identity as its query
  parameters, with the recipe's token and timeout.

What the read finds is ignored (a SoR may hold a record for the probe identity; nothing is
judged), and nothing is ever written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from rewardseal_worker.oracles.base import OracleReader, OracleUnavailable

__all__ = ["PROBE_VALUE", "probe_reader"]

PROBE_VALUE: Final = "rewardseal-probe"
"""The identity value the probe reads (an id FHIR, SQL and JSON all accept)."""


def probe_reader(reader: OracleReader, identity_keys: Iterable[str]) -> None:
    """Read the probe identity once through ``reader``. Blocking (run it in a thread).

    Raises:
        OracleUnavailable: the SoR did not answer, or answered what the reader cannot use.
    """
    (result,) = reader.read_many([dict.fromkeys(identity_keys, PROBE_VALUE)])
    if isinstance(result, OracleUnavailable):
        raise result
