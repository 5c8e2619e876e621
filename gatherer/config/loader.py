"""Reading a configuration file: gatherer.cf (Harvest's form) or, for a name ending in
``.toml``, the TOML form."""

from __future__ import annotations

from pathlib import Path

from gatherer.config.harvest_format import parse_harvest
from gatherer.config.model import GathererConfig
from gatherer.config.toml_format import parse_toml
from gatherer.filters import read_text_file


def load(path: Path) -> GathererConfig:
    """The configuration in the file at ``path``, and the filter and stoplist files it names.

    Synchronous file reads: call it before the event loop starts, or in a thread. Raises one
    ConfigError listing every problem (an unreadable file included).
    """
    text = read_text_file(path, "configuration")
    parse = parse_toml if path.suffix.lower() == ".toml" else parse_harvest
    return parse(text, path)
