"""MockMed: a synthetic EMR system of record for rewardseal (docs/spec.md R-MM-1).

A FastAPI service over SQLite or PostgreSQL with one collection, ``encounters``:

* a REST write API the policy acts through, answering with the UI-style banner "Saved";
* a REST read API and a FHIR R4 ``Encounter`` search for the worker's oracles;
* a screen dump (what the UI showed, including rows it claimed but never stored) for tier 0;
* a fault switch (slow, down, 500s, malformed JSON) for tests.

Beside the service, the MockMed world that the worker's ``--seed-mockmed`` and the kit
(``rewardseal_kit``) both build on, so that no production code imports the kit:
:mod:`rewardseal_mockmed.contract` (the MockMed reward contract, its effect documents and recipes)
and :mod:`rewardseal_mockmed.extradup` (the ExtraDup scripted hacking families, and in
:mod:`~rewardseal_mockmed.extradup.calibration` their replay as calibration data). Neither
imports the service's web stack.

Everything is synthetic: no real patient data is involved anywhere.
"""

__version__ = "0.1.0"
