"""``python -m riskopt``: the ``riskopt`` command line (:mod:`riskopt.cli`)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
