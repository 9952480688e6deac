"""Run the smoke test: ``python -m demo.smoke --help``."""

import sys

from .run import main

sys.exit(main())
