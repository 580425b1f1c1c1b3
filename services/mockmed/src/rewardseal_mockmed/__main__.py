"""``python -m rewardseal_mockmed`` runs the ``rewardseal-mockmed`` command."""

from rewardseal_mockmed.cli import main

raise SystemExit(main())
