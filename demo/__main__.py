"""``python -m demo``: see the package's docstring."""

import sys

from .main import main

sys.exit(main())
