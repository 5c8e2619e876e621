"""The gatherer's configuration: :func:`load` reads gatherer.cf (Harvest's form) or, for a
name ending in ``.toml``, the TOML form, into a :class:`GathererConfig`.

The values are defined in ``config_model``, the two forms in ``config_harvest`` and
``config_toml``, the checks shared by both in ``config_build``; this module is the entry
point and names what the rest of the gatherer uses.
"""

from __future__ import annotations

from pathlib import Path

from gatherer.config_harvest import parse_enumeration_line, parse_harvest
from gatherer.config_model import (
    GATHERER_VERSION,
    GathererConfig,
    LeafNode,
    LeafProgram,
    RootNode,
    RootProgram,
    check_url,
)
from gatherer.config_toml import parse_toml
from gatherer.filters import read_text_file

__all__ = [
    "GATHERER_VERSION",
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


def load(path: Path) -> GathererConfig:
    """The configuration in the file at ``path``, and the filter and stoplist files it names.

    Synchronous file reads: call it before the event loop starts, or in a thread. Raises one
    ConfigError listing every problem (an unreadable file included).
    """
    text = read_text_file(path, "configuration")
    parse = parse_toml if path.suffix.lower() == ".toml" else parse_harvest
    return parse(text, path)
