"""MockMed: a synthetic EMR system of record for rewardseal (docs/spec.md R-MM-1).

A FastAPI service over SQLite or PostgreSQL with one collection, ``encounters``:

* a REST write API the policy acts through, answering with the UI-style banner "Saved";
* a REST read API and a FHIR R4 ``Encounter`` search for the worker's oracles;
* a screen dump (what the UI showed, including rows it claimed but never stored) for tier 0;
* a fault switch (slow, down, 500s, malformed JSON) for tests.

Everything is synthetic: no real patient data is involved anywhere.
"""

__version__ = "0.1.0"
