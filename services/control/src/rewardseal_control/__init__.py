"""rewardseal-control: contract registry, certificates, revocation and receipt index (SPEC section 9)."""
