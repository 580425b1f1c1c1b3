"""``python -m rewardseal_kit.proof.learning``: see :mod:`rewardseal_kit.proof.learning.command`."""

from rewardseal_kit.proof.learning.command import main

raise SystemExit(main())
