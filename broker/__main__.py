"""``python -m broker`` is ``harvest-broker``."""

from __future__ import annotations

import sys

from broker.cli import main

sys.exit(main())
