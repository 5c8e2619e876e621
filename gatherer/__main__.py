"""``python -m gatherer`` is ``harvest-gather``."""

from __future__ import annotations

import sys

from gatherer.cli import main

sys.exit(main())
