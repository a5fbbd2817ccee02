"""``python -m tallow``: the ``tallow`` command, for environments without its script."""

import sys

from .cli import main

sys.exit(main())
