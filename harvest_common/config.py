"""The configuration kit: frozen dataclass sections loaded once from TOML, for every Harvest
service.

A section is a frozen dataclass whose fields are declared with :func:`setting`, which carries
the default, the parser that checks a TOML value and the one-line documentation. The parsers
below take a TOML value and return the typed value or raise ValueError. :func:`read_sections`
and :func:`read_array` build ``[section]`` and ``[[array]]`` tables, reporting every unknown
key and bad value with its location in one ConfigError; :func:`read_toml` reads the file;
:func:`reference_document` writes the Markdown reference from the declarations.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field, fields
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from harvest_common.errors import ConfigError

Parser = Callable[[Any], Any]
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Address(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def setting(default: Any, doc: str, parse: Parser) -> Any:
    """Declare one setting: its default, how a TOML value is checked, and its documentation."""
    return field(default=default, metadata={"doc": doc, "parse": parse})


# -- parsers: each takes a TOML value and returns the typed value or raises ValueError --------


def integer(lo: int, hi: int) -> Parser:
    def parse(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected an integer, got {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"must be between {lo} and {hi}, got {v}")
        return v

    return parse


def number(lo: float, hi: float) -> Parser:
    def parse(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ValueError(f"expected a number, got {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"must be between {lo} and {hi}, got {v}")
        return float(v)

    return parse


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {v!r}")
    return v


def text(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected a non-empty string, got {v!r}")
    return v


def choice(*options: str) -> Parser:
    def parse(v: Any) -> str:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}; got {v!r}")
        return str(v)

    return parse


def address(v: Any) -> Address:
    """``HOST:PORT`` or ``[IPv6]:PORT``."""
    if not isinstance(v, str):
        raise ValueError(f"expected 'HOST:PORT', got {v!r}")
    host, sep, port = v.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected 'HOST:PORT' with a port from 0 to 65535, got {v!r}")
    return Address(host, int(port))


def networks(v: Any) -> tuple[IPNetwork, ...]:
    if not isinstance(v, list):
        raise ValueError(f"expected a list of CIDR strings, got {v!r}")
    out = []
    for item in v:
        try:
            out.append(ipaddress.ip_network(str(item), strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or CIDR network") from None
    return tuple(out)


def ports(v: Any) -> tuple[tuple[int, int], ...]:
    """A list of ports and ``"LOW-HIGH"`` ranges, kept as inclusive (low, high) pairs."""
    if not isinstance(v, list):
        raise ValueError(f"expected a list of ports or 'LOW-HIGH' ranges, got {v!r}")
    out = []
    for item in v:
        lo_s, _, hi_s = str(item).partition("-")
        hi_s = hi_s or lo_s
        if not (lo_s.isdigit() and hi_s.isdigit()) or isinstance(item, bool | float):
            raise ValueError(f"{item!r} is not a port or a 'LOW-HIGH' range")
        lo, hi = int(lo_s), int(hi_s)
        if not 1 <= lo <= hi <= 65535:
            raise ValueError(f"{item!r} is outside 1-65535 or reversed")
        out.append((lo, hi))
    return tuple(out)


def nameserver_list(v: Any) -> tuple[Address, ...]:
    """Resolver addresses: ``IP``, ``IP:PORT`` or ``[IPv6]:PORT`` (port 53 if not given)."""
    if not isinstance(v, list):
        raise ValueError(f"expected a list of resolver addresses, got {v!r}")
    out = []
    for item in v:
        s = str(item)
        try:
            out.append(Address(str(ipaddress.ip_address(s)), 53))
            continue
        except ValueError:
            pass
        try:
            addr = address(s)
            ipaddress.ip_address(addr.host)
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address with an optional port") from None
        out.append(addr)
    return tuple(out)


def path(v: Any) -> Path:
    return Path(text(v))


def optional_path(v: Any) -> Path | None:
    """A file path, or ``"none"`` to turn the file off."""
    s = text(v)
    return None if s == "none" else Path(s)


_COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def source_url(v: Any) -> str:
    """An ``http://`` or ``https://`` base URL, without a trailing slash."""
    s = text(v)
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", s):
        raise ValueError(f"expected an http:// or https:// URL, got {s!r}")
    try:
        urlsplit(s).port  # noqa: B018 (read for its check, as a pull would read it)
    except ValueError as error:  # a bad IPv6 literal, a port that is no number...
        raise ValueError(f"not a valid URL ({error}): {s!r}") from None
    return s.rstrip("/")


def optional_url(v: Any) -> str | None:
    return None if v == "" else source_url(v)


def collection_name(v: Any) -> str:
    """A broker collection's name (what a replication group replicates)."""
    s = text(v)
    if not _COLLECTION_NAME.fullmatch(s):
        raise ValueError(f"expected letters, digits, '.', '_', '-' (at most 64), got {s!r}")
    return s


# -- sections, arrays of tables, files and the reference -----------------------------------------


def read_sections(
    raw: Mapping[str, Any], sections: Mapping[str, type[Any]], origin: str
) -> dict[str, Any]:
    """Each ``[section]`` of ``raw`` built as its dataclass in ``sections`` (fields declared
    with ``setting``); every unknown section or key and bad value in one ConfigError."""
    problems: list[str] = []
    built: dict[str, Any] = {}
    for name, table in raw.items():
        cls = sections.get(name)
        if cls is None:
            problems.append(f"{origin}: unknown section [{name}] (known: {', '.join(sections)})")
            continue
        if not isinstance(table, Mapping):
            problems.append(f"{origin}: [{name}] must be a table")
            continue
        values = read_table(table, cls, origin, f"{name}.", problems)
        if values is not None:
            built[name] = cls(**values)
    if problems:
        raise ConfigError(problems)
    return built


def read_table(
    table: Mapping[str, Any], cls: type[Any], origin: str, prefix: str, problems: list[str]
) -> dict[str, Any] | None:
    """The checked values of ``table`` for ``cls``'s settings; problems are appended (keys
    named ``prefix`` + key, e.g. ``server.listen``) and None returned if there were any."""
    known = {f.name: f for f in fields(cls)}
    values: dict[str, Any] = {}
    before = len(problems)
    for key, value in table.items():
        f = known.get(key)
        if f is None:
            problems.append(f"{origin}: unknown key {prefix}{key}")
            continue
        try:
            values[key] = f.metadata["parse"](value)
        except ValueError as e:
            problems.append(f"{origin}: {prefix}{key}: {e}")
    return values if len(problems) == before else None


def read_array(
    tables: Any,
    cls: type[Any],
    origin: str,
    name: str,
    required: Sequence[str],
    unique: str,
    problems: list[str],
) -> list[Any]:
    """Each table of the array ``[[name]]`` built as ``cls`` (fields declared with
    ``setting``). Problems are appended: not an array of tables, a ``required`` key missing,
    a bad key or value, two tables with the same ``unique`` key."""
    if not isinstance(tables, list) or not all(isinstance(t, Mapping) for t in tables):
        problems.append(f"{origin}: {name} must be an array of tables ([[{name}]])")
        return []
    out = []
    for n, table in enumerate(tables):
        where = f"{name}[{n}]."
        missing = [key for key in required if key not in table]
        problems += [f"{origin}: {where}{key}: required" for key in missing]
        values = read_table(table, cls, origin, where, problems)
        if values is not None and not missing:
            out.append(cls(**values))
    keys = [getattr(item, unique) for item in out]
    problems += [
        f"{origin}: {name}: {unique} {key!r} used twice"
        for key in sorted(set(keys))
        if keys.count(key) > 1
    ]
    return out


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file at ``path``; an unreadable or malformed file is a ConfigError."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError([f"{path}: cannot read: {e.strerror}"]) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"{path}: not valid TOML: {e}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None


def reference_document(
    title: str,
    intro: Sequence[str],
    defaults: Any,
    sections: Iterable[str],
    arrays: Mapping[str, type[Any]] | None = None,
) -> str:
    """A configuration reference in Markdown: ``intro``, then a table per ``[section]`` of
    ``defaults`` and per ``[[array]]`` of tables."""
    lines = [f"# {title}", "", *intro]
    for name in sections:
        lines += ["", f"## [{name}]", "", *reference_table(getattr(defaults, name))]
    for name, cls in (arrays or {}).items():
        lines += ["", f"## [[{name}]]", "", *reference_table(cls())]
    return "\n".join(lines) + "\n"


def reference_table(defaults: Any) -> list[str]:
    """A Markdown table of a settings dataclass's keys, defaults and documentation."""
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    for f in fields(defaults):
        lines.append(f"| `{f.name}` | `{_show(getattr(defaults, f.name))}` | {f.metadata['doc']} |")
    return lines


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Address):
        return str(value)
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in value)
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value) or "(empty)"
    if value is None:
        return "none"
    return str(value)
