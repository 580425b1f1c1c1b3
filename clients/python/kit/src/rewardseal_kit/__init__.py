"""The rewardseal test world: everything synthetic, nothing a trainer or a service needs.

The MockMed contract and the ExtraDup hacking families it plays are MockMed's
(:mod:`rewardseal_mockmed.contract`, :mod:`rewardseal_mockmed.extradup`), shared with the
worker's ``--seed-mockmed``; the kit builds on them:

* :mod:`rewardseal_kit.actors`: ``MockMedActor``, acting through MockMed's REST API;
* :mod:`rewardseal_kit.demo` and :mod:`rewardseal_kit.proof` (``rewardseal-kit proof``);
* :mod:`rewardseal_kit.proof.integrity`: the integrity proof (``--integrity``) and ``make demo``'s
  integrity step; its :mod:`~rewardseal_kit.proof.integrity.case` scores the ExtraDup episodes by
  the screen reward and several workers, as signal rows for a reward-integrity audit.

The tests, the demo, the bench and the examples
import it. It imports the core rules (:mod:`rewardseal`), the server plumbing and MockMed; nothing
in production imports it (the import contract ``kit-outside-production`` in the root
``pyproject.toml`` holds that, with no exception; ``kit-acyclic`` holds that it has no import
circle).
"""
