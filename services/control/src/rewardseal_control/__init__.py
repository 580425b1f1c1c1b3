"""rewardseal-control: contract registry, certificates, revocation, receipt index.

Its behaviour is docs/spec.md §9.
"""
