"""Entry point of ``python -m simulator``."""

from simulator.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
