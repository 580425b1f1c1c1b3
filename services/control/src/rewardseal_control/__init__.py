"""rewardseal-control: contract registry, certificates, revocation, receipt index (SPEC §9)."""
