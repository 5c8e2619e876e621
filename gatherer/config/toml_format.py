"""The TOML form of the gatherer configuration (a file whose name ends in ``.toml``).

Top-level keys are the gatherer.cf header names in snake_case (``gatherer_name``,
``http_proxy``...; ``ftp_login`` is an array of ``{host, user, password}`` tables);
``[[root_nodes]]`` and ``[[root_programs]]`` tables carry RootNode options by field name;
``leaf_nodes`` is an array of URLs and ``leaf_programs`` an array of commands; ``[hsr]``
holds the HSR-* headers by their ``[hsr]`` keys (``url``, ``renew``...). Only the
structure is checked here; values go to ``build`` with their key path
(``file: root_nodes[2].depth``; arrays count from 0).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from gatherer.config.build import (
    HEADERS_BY_TOML_KEY,
    HSR_HEADERS_BY_KEY,
    ROOT_OPTIONS,
    NodeSpec,
    build,
)
from gatherer.config.model import GathererConfig
from gatherer.config.values import Given
from gatherer.errors import ConfigError

_LOGIN_KEYS = ("host", "user", "password")


def parse_toml(text: str, path: Path) -> GathererConfig:
    """The configuration in TOML ``text`` read from ``path`` (for messages and relative
    paths). Raises one ConfigError listing every problem as "path: key.path: reason"."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"{path}: {e}"]) from e
    problems: list[str] = []
    headers: dict[str, list[Given]] = {}
    roots: list[NodeSpec] = []
    leaves: list[NodeSpec] = []
    for key, value in data.items():
        where = f"{path}: {key}"
        header = HEADERS_BY_TOML_KEY.get(key)
        if header is not None and header.repeatable:
            logins = (_login(table, at, problems) for at, table in _tables(value, where, problems))
            headers[header.name] = [login for login in logins if login is not None]
        elif header is not None:
            headers[header.name] = [Given(value, where, text=False)]
        elif key in ("root_nodes", "root_programs"):
            first = "url" if key == "root_nodes" else "command"
            specs = (
                _root(table, at, first, problems) for at, table in _tables(value, where, problems)
            )
            roots.extend(spec for spec in specs if spec is not None)
        elif key == "hsr":
            headers.update(_hsr(value, where, problems))
        elif key == "leaf_nodes":
            leaves.extend(
                NodeSpec(at, url=Given(v, at, text=False))
                for at, v in _items(value, where, problems)
            )
        elif key == "leaf_programs":
            leaves.extend(
                NodeSpec(at, command=Given(v, at, text=False))
                for at, v in _items(value, where, problems)
            )
        else:
            problems.append(f"{where}: unknown key")
    return build(path, headers, roots, leaves, problems)


def _items(value: object, where: str, problems: list[str]) -> list[tuple[str, Any]]:
    """The elements of an array with their key paths (none, and a problem, if not one)."""
    if not isinstance(value, list):
        problems.append(f"{where}: expected an array, got {value!r}")
        return []
    return [(f"{where}[{i}]", item) for i, item in enumerate(value)]


def _tables(value: object, where: str, problems: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """The tables of an array of tables with their key paths; other elements are problems."""
    tables = []
    for at, item in _items(value, where, problems):
        if isinstance(item, dict):
            tables.append((at, item))
        else:
            problems.append(f"{at}: expected a table, got {item!r}")
    return tables


def _root(table: dict[str, Any], where: str, first: str, problems: list[str]) -> NodeSpec | None:
    """A root_nodes (``first`` is ``url``) or root_programs (``command``) table."""
    options = {}
    for key, value in table.items():
        if key in ROOT_OPTIONS:
            options[key] = Given(value, f"{where}.{key}", text=False)
        elif key != first:
            problems.append(f"{where}.{key}: unknown key")
    if first not in table:
        problems.append(f"{where}: missing key {first!r}")
        return None
    main = Given(table[first], f"{where}.{first}", text=False)
    if first == "url":
        return NodeSpec(where, url=main, options=options)
    return NodeSpec(where, command=main, options=options)


def _hsr(value: object, where: str, problems: list[str]) -> dict[str, list[Given]]:
    """The ``[hsr]`` table's values by the HSR header each stands for."""
    if not isinstance(value, dict):
        problems.append(f"{where}: expected a table ([hsr]), got {value!r}")
        return {}
    headers = {}
    for key, item in value.items():
        header = HSR_HEADERS_BY_KEY.get(key)
        if header is None:
            problems.append(f"{where}.{key}: unknown key")
        else:
            headers[header.name] = [Given(item, f"{where}.{key}", text=False)]
    return headers


def _login(table: dict[str, Any], where: str, problems: list[str]) -> Given | None:
    """An ``ftp_login`` table as the (host, user, password) an FTP-Login header gives."""
    bad = [f"{where}.{key}: unknown key" for key in table if key not in _LOGIN_KEYS]
    bad += [
        f"{where}: {key} must be a string"
        for key in _LOGIN_KEYS
        if not isinstance(table.get(key), str)
    ]
    problems.extend(bad)
    return None if bad else Given([table[key] for key in _LOGIN_KEYS], where, text=False)
