"""What a Harvest server reports as the software it runs: the installed distribution's version
(in its pages, its status, its metrics and its HSR registration)."""

from __future__ import annotations

import functools
import importlib.metadata


@functools.cache
def software_version() -> str:
    """The installed harvest distribution's version. Reads package metadata from disk the
    first time: call it once off the event loop (start-up does), then it is cached."""
    try:
        return importlib.metadata.version("harvest")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
