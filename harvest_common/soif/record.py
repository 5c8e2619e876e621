"""The SOIF record: one summary object as a value, and the rules its parts must obey.

A record is a template type (``FILE``), the URL it summarizes, and ordered attributes whose
names are unique regardless of case and whose values are arbitrary bytes. The limits here are
the ones the decoder enforces on the wire, so every valid record can be encoded and read back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Character classes as regex fragments, shared with the decoder's byte patterns.
TEMPLATE_CHARS = "A-Za-z0-9_-"
NAME_CHARS = "A-Za-z0-9_.-"

# Bounds that keep a hostile stream from making the decoder buffer without end.
MAX_NAME_BYTES = 256  # template and attribute names
MAX_URL_BYTES = 64 * 1024

# Templates that open an update-stream wrapper (see stream.py) rather than an object.
WRAPPER_TEMPLATES = frozenset({"UPDATE", "REFRESH", "DELETE"})

_TEMPLATE = re.compile(f"[{TEMPLATE_CHARS}]{{1,{MAX_NAME_BYTES}}}")
_NAME = re.compile(f"[{NAME_CHARS}]{{1,{MAX_NAME_BYTES}}}")
_SPACE = re.compile(r"\s")  # the same characters as str.isspace()


def find_url_space(url: str) -> int:
    """Index of the first whitespace character in ``url``, or -1 (like ``str.find``)."""
    found = _SPACE.search(url)
    return -1 if found is None else found.start()


@dataclass(frozen=True, slots=True)
class Record:
    """One SOIF object: ``@template { url`` followed by ``name{size}:<TAB>value`` lines.

    Invalid parts raise ``ValueError`` (``TypeError`` for a value that is not ``bytes``):
    a record is built by code, so a bad one is a programming error, not bad input.
    """

    template: str
    url: str
    attributes: tuple[tuple[str, bytes], ...] = ()

    def __post_init__(self) -> None:
        if not _TEMPLATE.fullmatch(self.template):
            raise ValueError(
                f"template {self.template!r} must be 1-{MAX_NAME_BYTES} of [{TEMPLATE_CHARS}]"
            )
        if self.template in WRAPPER_TEMPLATES:
            raise ValueError(f"template {self.template!r} is reserved for update-stream wrappers")
        if not self.url:
            raise ValueError("url must not be empty")
        if (space := find_url_space(self.url)) >= 0:
            raise ValueError(f"url {self.url!r} has whitespace at index {space}")
        if len(self.url.encode()) > MAX_URL_BYTES:
            raise ValueError(f"url is longer than {MAX_URL_BYTES} bytes")
        seen: set[str] = set()
        for name, value in self.attributes:
            if not _NAME.fullmatch(name):
                raise ValueError(
                    f"attribute name {name!r} must be 1-{MAX_NAME_BYTES} of [{NAME_CHARS}]"
                )
            key = name.lower()
            if key in seen:
                raise ValueError(f"attribute {name!r} appears twice (names ignore case)")
            seen.add(key)
            if not isinstance(value, bytes):
                raise TypeError(f"attribute {name!r} value must be bytes, not {type(value)}")

    @classmethod
    def unchecked(
        cls, template: str, url: str, attributes: tuple[tuple[str, bytes], ...]
    ) -> Record:
        """A record whose parts are already known to obey the rules (the decoder holds the
        wire to the same ones), made without checking them again: that was a quarter of
        decoding a record."""
        record = object.__new__(cls)
        object.__setattr__(record, "template", template)
        object.__setattr__(record, "url", url)
        object.__setattr__(record, "attributes", attributes)
        return record

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}:{len(value)}" for name, value in self.attributes)
        return f"Record({self.template} {self.url!r} [{sizes}])"

    @property
    def names(self) -> tuple[str, ...]:
        """The attribute names, in order, as spelled."""
        return tuple(name for name, _ in self.attributes)

    def _index(self, name: str) -> int:
        key = name.lower()
        for index, (own, _) in enumerate(self.attributes):
            if own.lower() == key:
                return index
        return -1

    def get(self, name: str) -> bytes | None:
        """The value of attribute ``name`` (any case), or None."""
        index = self._index(name)
        return None if index < 0 else self.attributes[index][1]

    def text(self, name: str) -> str | None:
        """The value of attribute ``name`` as UTF-8 text (bad bytes replaced), or None."""
        value = self.get(name)
        return None if value is None else value.decode("utf-8", errors="replace")

    def replace(self, name: str, value: bytes | str) -> Record:
        """A copy with ``name`` set to ``value`` (str is UTF-8 encoded).

        An existing attribute of that name (any case) keeps its position but takes the new
        spelling; otherwise the attribute is appended.
        """
        data = value.encode() if isinstance(value, str) else value
        index = self._index(name)
        attributes = list(self.attributes)
        if index < 0:
            attributes.append((name, data))
        else:
            attributes[index] = (name, data)
        return Record(self.template, self.url, tuple(attributes))

    def without(self, name: str) -> Record:
        """A copy without attribute ``name`` (any case); the same record if it has none."""
        index = self._index(name)
        if index < 0:
            return self
        return Record(
            self.template, self.url, self.attributes[:index] + self.attributes[index + 1 :]
        )
