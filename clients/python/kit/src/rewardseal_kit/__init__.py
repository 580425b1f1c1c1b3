"""The rewardseal test world: everything synthetic, nothing a trainer or a service needs.

* :mod:`rewardseal_kit.mockmed`: the MockMed reward contract (a synthetic EMR task);
* :mod:`rewardseal_kit.extradup`: the ExtraDup scripted hacking families and their replay;
* :mod:`rewardseal_kit.calibration`: those families as the worker's calibration data;
* :mod:`rewardseal_kit.actors`: ``MockMedActor``, acting through MockMed's REST API;
* :mod:`rewardseal_kit.demo` and :mod:`rewardseal_kit.proof` (``rewardseal-kit proof``);
* :mod:`rewardseal_kit.proof.integrity`: the integrity proof (``--integrity``) and ``make demo``'s
  integrity step; its :mod:`~rewardseal_kit.proof.integrity.case` scores the ExtraDup episodes by
  the screen reward and several workers, as signal rows for a reward-integrity audit.

The tests, the demo, the calibration of the seeded MockMed bundles and the verifiers environment
import it. It imports the core rules (:mod:`rewardseal`), the server plumbing and MockMed; nothing
in production imports it (the import contracts in the root ``pyproject.toml`` hold that; the one
exception is the worker's ``--seed-mockmed`` path, imported only when asked to seed).
"""
