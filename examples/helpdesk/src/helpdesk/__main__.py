"""``python -m helpdesk``: see :mod:`helpdesk.cli`."""

import sys

from helpdesk.cli import main

sys.exit(main())
