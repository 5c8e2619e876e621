"""The gatherer's configuration: :func:`load` reads gatherer.cf (Harvest's form) or, for a
name ending in ``.toml``, the TOML form, into a :class:`GathererConfig`.

The values are defined in ``model``; ``harvest_format`` and ``toml_format`` parse the two
forms' syntax, ``values`` reads one value by its kind, ``build`` holds the checks shared by
both forms and builds the configuration, and ``loader`` picks the form by the file's name.
This package names what the rest of the gatherer uses.
"""

from __future__ import annotations

from gatherer.config.harvest_format import parse_enumeration_line, parse_harvest
from gatherer.config.loader import load
from gatherer.config.model import (
    GATHER_INTERVAL,
    GATHERER_VERSION,
    GathererConfig,
    LeafNode,
    LeafProgram,
    RootNode,
    RootProgram,
    check_url,
)
from gatherer.config.toml_format import parse_toml

__all__ = [
    "GATHERER_VERSION",
    "GATHER_INTERVAL",
    "GathererConfig",
    "LeafNode",
    "LeafProgram",
    "RootNode",
    "RootProgram",
    "check_url",
    "load",
    "parse_enumeration_line",
    "parse_harvest",
    "parse_toml",
]
