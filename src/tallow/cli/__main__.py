"""``python -m tallow.cli``: the ``tallow`` command."""

import sys

from .main import main

sys.exit(main())
