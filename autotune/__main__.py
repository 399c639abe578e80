"""``python -m autotune`` is ``cast-autotune``."""

import sys

from .cli import main

sys.exit(main())
