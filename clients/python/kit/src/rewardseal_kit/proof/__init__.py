"""The proof report: a screen reward and a certified reward scored on the same episodes.

``rewardseal-kit proof`` (:mod:`rewardseal_kit.proof.command`) plays every ExtraDup family and an
oracle outage through MockMed (:mod:`.conditions`), scores each trial with a tier-0 screen reward
and a running tier-2 worker (:mod:`.rewards`, :mod:`.run`), and writes a table, its checks and a
chart (:mod:`.report`, :mod:`.plot`); :mod:`.harness` is what it shares with the integrity proof
(``--integrity``, the :mod:`.integrity` package). This package imports nothing heavy on its own: the
command's modules import gRPC, httpx and (for the chart) matplotlib when they run.
"""
