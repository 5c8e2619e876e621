"""Harvest's gatherer.cf form: headers, then ``<RootNodes>`` and ``<LeafNodes>`` sections.

Only the syntax lives here: continuation lines, comments, section tags, ``Name: value``
headers, RootNode lines with their ``Option=value`` words, ``|program`` lines. Each value is
handed to ``build`` as text with its ``file:line``, which reads and checks it. The
nine-field lines an Enumeration program writes are parsed here too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from gatherer.config.build import (
    HEADERS_BY_NAME,
    Context,
    NodeSpec,
    build,
    root_node,
)
from gatherer.config.model import GathererConfig, RootNode
from gatherer.config.values import Given, split_command
from gatherer.errors import ConfigError

_SECTIONS = {"rootnodes": "RootNodes", "leafnodes": "LeafNodes"}
_SECTION_TAG = re.compile(r"<(/?)(RootNodes|LeafNodes)>", re.IGNORECASE)
# "Name: value"; a colon followed by "//" is a URL's, not a header's.
_HEADER = re.compile(r"([A-Za-z][A-Za-z0-9-]*)[ \t]*:(?!//)[ \t]*(.*)")
# RootNode options (lower case) -> the RootNode fields "Name=max,filter" or "Name=value" sets.
# Site= is Host='s name before Harvest 1.2.
_OPTIONS = {
    "url": ("url_max", "url_filter"),
    "host": ("host_max", "host_filter"),
    "site": ("host_max", "host_filter"),
    "access": ("access",),
    "delay": ("delay",),
    "depth": ("depth",),
    "enumeration": ("enumeration",),
    "sitemaps": ("sitemaps",),
}
_OPTION_NAMES = "URL=, Host=, Access=, Delay=, Depth=, Enumeration= or Sitemaps="

# The Enumeration program's output fields after the URL, and the names they go by.
_ENUMERATION_FIELDS = (
    ("url_max", "URL-Max"),
    ("url_filter", "URL-Filter"),
    ("host_max", "Host-Max"),
    ("host_filter", "Host-Filter"),
    ("access", "Access"),
    ("delay", "Delay"),
    ("depth", "Depth"),
    ("enumeration", "Enumeration-Program"),
)
NO_PROGRAM = "/bin/false"  # as an Enumeration-Program field: none


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(number of its first line, stripped text) of each logical line: a line ending in a
    backslash continues on the next; blank lines and ``#`` comments are left out."""
    start, parts = 0, list[str]()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not parts and (not line or line.startswith("#")):
            continue
        start = start or number
        parts.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            yield start, " ".join(part for part in parts if part)
            start, parts = 0, list[str]()
    if parts:  # the last line ended in a backslash
        yield start, " ".join(part for part in parts if part)


class _Reader:
    """Walks the logical lines, keeping track of the section it is in, and collects the
    headers, node specs and syntax problems."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []
        self.headers: dict[str, list[Given]] = {}
        self.header_lines: dict[str, int] = {}
        self.nodes: dict[str, list[NodeSpec]] = {"RootNodes": [], "LeafNodes": []}
        self.section: tuple[str, int] | None = None  # (name, line it was opened at)
        self.section_lines: dict[str, int] = {}

    def line(self, number: int, line: str) -> None:
        where = f"{self.path}:{number}"
        tag = _SECTION_TAG.fullmatch(line)
        if tag:
            self._tag(number, where, closing=tag[1] == "/", name=_SECTIONS[tag[2].lower()])
        elif self.section is None:
            self._header(number, where, line)
        elif line.startswith("|"):
            self._program(where, line[1:], root=self.section[0] == "RootNodes")
        elif self.section[0] == "RootNodes":
            url, *options = line.split()
            spec = NodeSpec(
                where, url=Given(url, where, text=True), options=self._options(options, where)
            )
            self.nodes["RootNodes"].append(spec)
        else:
            url, *extra = line.split()
            if extra:
                unexpected = " ".join(extra)
                self.problems.append(
                    f"{where}: a LeafNode line holds one URL; unexpected {unexpected!r}"
                )
            self.nodes["LeafNodes"].append(NodeSpec(where, url=Given(url, where, text=True)))

    def _tag(self, number: int, where: str, *, closing: bool, name: str) -> None:
        current = self.section
        if closing:
            if current is None:
                self.problems.append(f"{where}: </{name}> without <{name}>")
            elif current[0] != name:
                self.problems.append(
                    f"{where}: </{name}> closes <{current[0]}> opened at line {current[1]}"
                )
            self.section = None
            return
        if current is not None:
            # Taken as the end of the open section: the usual mistake is a missing close tag.
            self.problems.append(
                f"{where}: <{name}> inside <{current[0]}> opened at line {current[1]}"
            )
        if name in self.section_lines:
            self.problems.append(
                f"{where}: a second <{name}> section (the first is at line "
                f"{self.section_lines[name]})"
            )
        self.section_lines.setdefault(name, number)
        self.section = (name, number)

    def _header(self, number: int, where: str, line: str) -> None:
        match = _HEADER.fullmatch(line)
        header = HEADERS_BY_NAME.get(match[1].lower()) if match else None
        if match is None:
            self.problems.append(
                f"{where}: expected a 'Name: value' header or a <RootNodes> or <LeafNodes> "
                f"section, got {line!r}"
            )
        elif header is None:
            self.problems.append(f"{where}: unknown header {match[1]!r}")
        elif header.name in self.header_lines and not header.repeatable:
            self.problems.append(
                f"{where}: {header.name} given twice (first at line "
                f"{self.header_lines[header.name]})"
            )
        else:
            self.header_lines.setdefault(header.name, number)
            given = Given(match[2], f"{where}: {header.name}", text=True)
            self.headers.setdefault(header.name, []).append(given)

    def _program(self, where: str, text: str, *, root: bool) -> None:
        try:
            words = split_command(text)
        except ValueError as e:
            self.problems.append(f"{where}: {e}")
            return
        if not root:
            self.nodes["LeafNodes"].append(NodeSpec(where, command=Given(words, where, text=False)))
            return
        # In <RootNodes>, words naming a known option are options; the rest is the command.
        options: list[str] = []
        command: list[str] = []
        for word in words:
            name, equals, _ = word.partition("=")
            (options if equals and name.lower() in _OPTIONS else command).append(word)
        spec = NodeSpec(
            where, command=Given(command, where, text=False), options=self._options(options, where)
        )
        self.nodes["RootNodes"].append(spec)

    def _options(self, words: list[str], where: str) -> dict[str, Given]:
        """``Name=value`` words as option values by RootNode field."""
        options: dict[str, Given] = {}
        written: dict[str, str] = {}  # RootNode field -> the option name that set it
        for word in words:
            name, equals, value = word.partition("=")
            fields = _OPTIONS.get(name.lower()) if equals else None
            if fields is None:
                self.problems.append(f"{where}: unknown option {word!r} (use {_OPTION_NAMES})")
            elif fields[0] in written:
                self.problems.append(f"{where}: {name}= repeats {written[fields[0]]}=")
            else:
                written[fields[0]] = name
                # "URL=max,filter": the filter only when a comma is there.
                values = value.split(",", 1) if len(fields) == 2 else [value]
                for field, text in zip(fields, values, strict=False):
                    options[field] = Given(text, f"{where}: {name}=", text=True)
        return options


def parse_harvest(text: str, path: Path) -> GathererConfig:
    """The configuration in gatherer.cf ``text`` read from ``path`` (for messages and
    relative paths). Raises one ConfigError listing every problem as "path:line: reason"."""
    reader = _Reader(path)
    for number, line in logical_lines(text):
        reader.line(number, line)
    if reader.section is not None:
        name, number = reader.section
        reader.problems.append(f"{path}:{number}: <{name}> is never closed")
    return build(
        path, reader.headers, reader.nodes["RootNodes"], reader.nodes["LeafNodes"], reader.problems
    )


def parse_enumeration_line(line: str, *, source: str, base: Path) -> RootNode:
    """A RootNode from one line of an Enumeration program's output: nine fields, ``URL
    URL-Max URL-Filter Host-Max Host-Filter Access Delay Depth Enumeration-Program``.

    ``/dev/null`` as a filter means none, ``/bin/false`` as the program means none. Filter
    files are relative to ``base`` (Top-Directory) and read here, synchronously: call it in a
    thread from async code. ``source`` names the line in problems.
    """
    url, *values = line.split() or [""]
    if len(values) != len(_ENUMERATION_FIELDS):
        raise ConfigError(
            [
                f"{source}: expected 9 fields (URL URL-Max URL-Filter Host-Max Host-Filter "
                f"Access Delay Depth Enumeration-Program), got {len(values) + bool(url)}"
            ]
        )
    options = {
        key: Given(value, f"{source}: {label}", text=True)
        for (key, label), value in zip(_ENUMERATION_FIELDS, values, strict=True)
        if not (key == "enumeration" and value == NO_PROGRAM)
    }
    problems: list[str] = []
    node = root_node(Given(url, source, text=True), options, source, Context(base, {}), problems)
    if problems:
        raise ConfigError(problems)
    return node
