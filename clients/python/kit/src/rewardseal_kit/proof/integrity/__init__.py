"""The integrity proof: a policy drifting toward the banner lie, audited at every boundary.

``rewardseal-kit proof --integrity`` (:mod:`.command`) starts control, MockMed and three workers
(:mod:`.run`), plays the ExtraDup episodes once, each judged by the screen reward and several
workers (:mod:`.case`), audits three optimizer/sentinel cases through control and writes their
checks, JSON, Markdown (:mod:`.report`) and chart (:mod:`.plot`). ``make demo``'s integrity step
(:mod:`.demo`) runs one boundary of it and a reviewed continue. It shares the proof's conditions,
screen reward and harness (:mod:`rewardseal_kit.proof.harness`); nothing in the proof outside
this package imports it but the ``--integrity`` dispatch of :mod:`rewardseal_kit.proof.command`.
"""
