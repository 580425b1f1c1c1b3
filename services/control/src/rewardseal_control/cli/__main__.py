"""``python -m rewardseal_control.cli``: the same as ``rewardseal-control``."""

from rewardseal_control.cli import main

raise SystemExit(main())
