"""Manually written records: IAFA-style templates, and how they override generated attributes.

Harvest let administrators describe objects by hand; such records are kept apart so that
re-summarizing never overwrites them. A template file holds templates separated by blank
lines::

    # comment lines start with '#'
    Template-Type: DOCUMENT
    URI: http://example.org/paper.ps
    Title: Type Structured File Systems
    Author-Name: Mike Schwartz
    Description: A long value can continue
      on indented lines.

``URI`` is the record's URL (required); ``Template-Type`` its SOIF template (``FILE`` when
absent). IAFA names become SOIF names where they differ (``Author-Name`` -> ``Author``); others
are kept as written. Continuation lines join their attribute's value with newlines, as SOIF's
multi-line values do; a name given twice in one template joins its values the same way.
Pure: the caller reads the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gatherer.errors import ConfigError
from harvest_common.soif.record import (
    MAX_NAME_BYTES,
    MAX_URL_BYTES,
    NAME_CHARS,
    TEMPLATE_CHARS,
    WRAPPER_TEMPLATES,
    find_url_space,
)

DEFAULT_TEMPLATE = "FILE"
# IAFA template names whose SOIF name differs, by lowercased IAFA name.
IAFA_TO_SOIF = {"author-name": "Author"}

_URI = "uri"
_TEMPLATE_TYPE = "template-type"
_FIELD = re.compile(f"([{NAME_CHARS}]{{1,{MAX_NAME_BYTES}}}):(.*)")
_TEMPLATE = re.compile(f"[{TEMPLATE_CHARS}]{{1,{MAX_NAME_BYTES}}}")

Attributes = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class ManualRecord:
    """One hand-written record: its URL, SOIF template, attributes, and where it was written.

    ``source`` is ``file:line`` of the template's first line.
    """

    url: str
    template: str
    attributes: Attributes
    source: str

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.attributes)
        return f"ManualRecord({self.template} {self.url!r} [{names}] from {self.source})"


def parse_templates(text: str, source: str) -> list[ManualRecord]:
    """The templates in ``text`` (the contents of file ``source``), in order.

    Raises ``ConfigError`` listing every problem as ``source:line: reason``.
    """
    parser = _Parser(source)
    for number, line in enumerate(text.splitlines(), 1):
        parser.line(number, line)
    parser.end()
    if parser.problems:
        raise ConfigError(parser.problems)
    return parser.records


def merge(generated: Attributes, manual: ManualRecord) -> Attributes:
    """``generated`` with ``manual``'s attributes winning name by name (ignoring case).

    Replaced attributes keep their generated position; new manual attributes follow, in order.
    """
    written = {name.lower(): (name, value) for name, value in manual.attributes}
    merged = [written.pop(name.lower(), (name, value)) for name, value in generated]
    return (*merged, *written.values())


@dataclass(frozen=True, slots=True)
class _Field:
    """One ``Name: value`` line and its continuation lines, as read."""

    name: str
    line: int
    lines: list[str]


class _Parser:
    """Reads lines into templates, collecting problems instead of stopping at the first."""

    __slots__ = ("fields", "problems", "records", "source", "start")

    def __init__(self, source: str) -> None:
        self.source = source
        self.records: list[ManualRecord] = []
        self.problems: list[str] = []
        self.fields: list[_Field] = []
        self.start = 0  # line of the template being read

    def problem(self, line: int, reason: str) -> None:
        self.problems.append(f"{self.source}:{line}: {reason}")

    def line(self, number: int, line: str) -> None:
        if line.startswith("#"):
            return
        if not line.strip():
            self.end()
        elif line[0].isspace():
            if self.fields:
                self.fields[-1].lines.append(line.strip())
            else:
                self.problem(number, "continuation line with no attribute before it")
        elif found := _FIELD.fullmatch(line):
            if not self.fields:
                self.start = number
            value = found[2].strip()
            self.fields.append(_Field(found[1], number, [value] if value else []))
        else:
            self.problem(number, f"expected 'Name: value', got {line[:40]!r}")

    def end(self) -> None:
        """Close the template being read, if any."""
        if self.fields:
            self.close()
        self.fields = []

    def close(self) -> None:
        url: str | None = None
        template = DEFAULT_TEMPLATE
        values: dict[str, tuple[str, list[str]]] = {}  # by lowercased name: (name, values)
        seen: set[str] = set()
        for field in self.fields:
            key = field.name.lower()
            value = "\n".join(field.lines)
            if key in (_URI, _TEMPLATE_TYPE) and key in seen:
                self.problem(field.line, f"{field.name} given twice in one template")
            elif key == _URI:
                url = self.check_url(field.line, value)
            elif key == _TEMPLATE_TYPE:
                template = self.check_template(field.line, value)
            else:
                name = IAFA_TO_SOIF.get(key, field.name)
                values.setdefault(name.lower(), (name, []))[1].append(value)
            seen.add(key)
        if url is None:
            if _URI not in seen:
                self.problem(self.start, "template has no URI")
            return
        if any(record.url == url for record in self.records):
            self.problem(self.start, f"a template for {url} comes earlier in the file")
            return
        attributes = tuple((name, "\n".join(parts).encode()) for name, parts in values.values())
        source = f"{self.source}:{self.start}"
        self.records.append(ManualRecord(url, template, attributes, source))

    def check_url(self, line: int, url: str) -> str | None:
        if not url:
            self.problem(line, "URI is empty")
        elif find_url_space(url) >= 0:
            self.problem(line, f"URI {url!r} contains whitespace")
        elif len(url.encode()) > MAX_URL_BYTES:
            self.problem(line, f"URI is longer than {MAX_URL_BYTES} bytes")
        else:
            return url
        return None

    def check_template(self, line: int, template: str) -> str:
        if not _TEMPLATE.fullmatch(template) or template in WRAPPER_TEMPLATES:
            self.problem(line, f"Template-Type {template!r} is not a SOIF template name")
        return template
