"""``python -m replicator`` is ``harvest-replicator``."""

from __future__ import annotations

import sys

from replicator.cli import main

sys.exit(main())
