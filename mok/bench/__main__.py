"""``python -m mok.bench``: the benchmark CLI (the same as ``python -m mok bench``)."""

import sys

from .cli import main

sys.exit(main())
