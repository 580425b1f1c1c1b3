"""The learning proof (``rewardseal-kit proof-learning``, ``make proof-learning``, docs/proof.md):
TRL's GRPOTrainer on a tiny policy, trained twice from one warm start, once paid by a tier-0
screen reward and once by a certified tier-2 receipt, both measured by the tier-2 worker, and
the integrity gate run on the screen-paid run."""
