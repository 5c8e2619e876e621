"""Reading one configuration value: the kinds a value can have, and how gatherer.cf text or a
TOML value is read as each.

gatherer.cf values are text ("8500", "yes", "HTTP|FTP"); TOML values already have a type,
which must be the kind's (no strings for numbers). Either way the result is the same Python
value, which ``build`` then checks.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Kind(Enum):
    """How a value is read: from gatherer.cf text, or which TOML type it must have."""

    INT = "a whole number"
    NUMBER = "a number"
    FLAG = "yes or no"
    TEXT = "a non-empty string"
    NAMES = "names joined by '|' (TOML: a list of strings)"
    COMMAND = "a command"
    LOGIN = "'host user password'"


@dataclass(frozen=True, slots=True)
class Given:
    """One value as a file gave it.

    ``value``: the text from gatherer.cf, or a typed value (from TOML, or tokens the parser
    split). ``where``: the location put before its problems (``file:line: Name`` or
    ``file: key.path``). ``text``: True when ``value`` is text to be read according to its
    kind, False when it must already have the kind's type.
    """

    value: object
    where: str
    text: bool


_WHOLE = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def split_command(text: str) -> list[str]:
    """A command line split into its argv as a POSIX shell would; ValueError if unbalanced."""
    try:
        return shlex.split(text)
    except ValueError:  # shlex's only failure: an unclosed quote or a trailing backslash
        raise ValueError(f"unbalanced quoting in command {text!r}") from None


def _from_text(kind: Kind, text: str) -> object:
    """A gatherer.cf value read as ``kind``; None when the text does not fit it."""
    if kind is Kind.INT and _WHOLE.fullmatch(text):
        return int(text)
    if kind is Kind.NUMBER and _DECIMAL.fullmatch(text):
        return float(text)
    if kind is Kind.FLAG and text.lower() in ("yes", "no"):
        return text.lower() == "yes"
    if kind is Kind.NAMES:
        return text.split("|")
    if kind is Kind.COMMAND:
        return split_command(text)
    if kind is Kind.LOGIN and len(text.split()) == 3:
        return tuple(text.split())
    return text if kind is Kind.TEXT else None


def _strings(value: object) -> list[str] | None:
    """``value`` if it is a TOML array of strings."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _from_toml(kind: Kind, value: object) -> object:
    """A TOML value if it has ``kind``'s type (a string is a command too); else None."""
    if isinstance(value, bool):
        return value if kind is Kind.FLAG else None
    if kind is Kind.INT and isinstance(value, int):
        return value
    if kind is Kind.NUMBER and isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    if kind is Kind.TEXT and isinstance(value, str):
        return value
    if kind is Kind.COMMAND and isinstance(value, str):
        return split_command(value)
    strings = _strings(value)
    if kind in (Kind.NAMES, Kind.COMMAND) and strings is not None:
        return strings
    if kind is Kind.LOGIN and strings is not None and len(strings) == 3:
        return tuple(strings)
    return None


def read(kind: Kind, given: Given) -> Any:
    """``given``'s value as ``kind``; ValueError saying what was expected otherwise."""
    if given.text and given.value == "":
        raise ValueError("missing value")
    value = _from_text(kind, str(given.value)) if given.text else _from_toml(kind, given.value)
    if value is None or value in ("", []):
        # A login line is never echoed: it holds a password.
        got = f"{len(str(given.value).split())} words" if kind is Kind.LOGIN else given.value
        raise ValueError(f"expected {kind.value}, got {got!r}")
    return value
