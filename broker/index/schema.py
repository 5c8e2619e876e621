"""The index's layout: which tantivy field holds what, and how an object becomes a document.

Every word of an object is indexed once, in the field of its attribute: tokenizing and
inserting terms is nearly all of tantivy's indexing time, so a catch-all field beside the
attribute fields would double it (measured: 4.0k against 6.6k objects/s, 80% against 43% of
the SOIF bytes). Harvest's common attributes each have a text field of their own (the
``DEDICATED`` names, lower-cased); any other attribute (``Embed1-Title``, a new summarizer's)
goes into the JSON field ``other`` keyed by its lower-cased name, and its words also into the
text field ``other_text`` so that bare words find them without naming every key. A bare word
is then a disjunction over the attribute fields. Every text field keeps positions: a word such
as ``e-mail`` or ``cs.colorado.edu`` is a phrase of its tokens, and that can be asked of any
attribute. Only ``oid`` is stored: the broker makes snippets from its registry.

The running text of an object (``Abstract`` of an HTML page, ``Partial-Text`` of a text file,
``Full-Text``, ``Text``: four fifths of the words) goes into one field, ``body``, with the
attribute's name in ``body_kind``, when the object has one of these attributes only (the
gatherer's default): a field per attribute would file each word of the vocabulary twice or
more, and the shared field indexed 100,000 generated records 15-25% faster, into 40.5% of
their SOIF bytes instead of 42.8% (bench/README.md, "Broker index"). ``Abstract: cache`` is
then ``cache`` in ``body`` where ``body_kind`` is ``abstract``, or in the field ``abstract``:
an object with more than one of these attributes keeps each in its own field, so that an
attribute's words are never mistaken for another's.

An object with the attribute ``Server-Type`` (a server record of the HSR) has ``server`` set,
so that queries that do not ask for server records can leave them out (broker/query/scope.py).

The fields are the index's layout: an index made with other fields (by another version) is
replaced by an empty one when opened, which the broker fills from its registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import tantivy

from broker.index.interface import IndexedObject
from broker.index.ranking import field_weight
from broker.query.scope import BOOKKEEPING, SERVER_ATTRIBUTE, searched_unnamed

OID: Final = "oid"
UPDATE_TIME: Final = "update_time"
FILE_SIZE: Final = "file_size"
OTHER: Final = "other"
OTHER_TEXT: Final = "other_text"
BODY: Final = "body"
BODY_KIND: Final = "body_kind"
SERVER: Final = "server"
SERVER_MARK: Final = "yes"

# The attributes of running text, which share ``body`` when an object has only one of them.
RUNNING_TEXT: Final = frozenset({"abstract", "partial-text", "full-text", "text"})

# The object's URL (the attribute ``URL`` the broker gives every object, broker/sync.py), the
# attributes the gatherer writes on every record (gatherer/records.py) and those of its
# Essence summarizers that are common or large. A bare word asks each field whether it holds
# the term, so a field nobody uses still costs a little.
DEDICATED: Final = (
    "url",
    *BOOKKEEPING,
    "title",
    "author",
    "description",
    "keywords",
    "headings",
    "url-references",
    "abstract",
    "partial-text",
    "full-text",
    "text",
    "strings",
)

# Every field a bare word is looked for in, in a fixed order (a field's index is its bit in
# the vocabulary's field masks).
TEXT_FIELDS: Final = (*DEDICATED, BODY, OTHER_TEXT)
_FIELD_INDEX: Final = {name: i for i, name in enumerate(TEXT_FIELDS)}

# Attributes that ``Compare`` can answer, by lower-cased name: the numeric fast fields.
NUMERIC: Final = {"update-time": UPDATE_TIME, "file-size": FILE_SIZE}

# A dot in a JSON path separates keys unless escaped.
_ESCAPED_DOT: Final = "\\."

# tantivy's "default" analyzer, which every text field uses: split on what is not a letter or
# digit, drop tokens over 40 bytes, lower-case.
MAX_TOKEN_BYTES: Final = 40


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field(OID, stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(BODY_KIND, tokenizer_name="raw", index_option="basic")
    builder.add_text_field(SERVER, tokenizer_name="raw", index_option="basic")
    builder.add_float_field(UPDATE_TIME, indexed=True, fast=True)
    builder.add_unsigned_field(FILE_SIZE, indexed=True, fast=True)
    for name in TEXT_FIELDS:
        builder.add_text_field(name, index_option="position")
    builder.add_json_field(OTHER, index_option="position")
    return builder.build()


class Analyzer:
    """The text fields' analyzer, for turning query words into the terms they were indexed as."""

    def __init__(self) -> None:
        self._analyzer = (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
            .filter(tantivy.Filter.lowercase())
            .build()
        )

    def tokens(self, text: str) -> list[str]:
        return self._analyzer.analyze(text)

    def spans(self, text: str) -> list[tuple[str, int, int]]:
        """The tokens with the character offsets of their start and end in ``text``."""
        return [
            (token.text, token.char_offset_from, token.char_offset_to)
            for token in self._analyzer.pre_tokenize(text).tokens
        ]


@dataclass(frozen=True, slots=True)
class Target:
    """Where an attribute's words are: ``field`` (a text field, or a JSON path into ``other``)
    for queries, and ``text_field``, the text field whose term dictionary holds them (for a
    JSON path, ``other_text``, a superset); in ``body``, only where ``body_kind`` is
    ``kind``. ``weight``: what a match there counts (broker/index/ranking.py)."""

    field: str
    text_field: str
    kind: str | None = None
    weight: float = 1.0

    @property
    def bit(self) -> int:
        return field_bit(self.text_field)

    @property
    def is_json(self) -> bool:
        return self.field != self.text_field


def targets_of(attribute: str) -> tuple[Target, ...]:
    """Where the words of ``attribute`` (any case) are."""
    name = attribute.lower()
    if name in RUNNING_TEXT:
        return Target(BODY, BODY, name), Target(name, name)
    if name in _FIELD_INDEX and name not in (BODY, OTHER_TEXT):
        return (Target(name, name),)
    # Dots separate a JSON path's keys; a dot in the attribute's name is part of its key.
    escaped = name.replace(".", _ESCAPED_DOT)
    return (Target(f"{OTHER}.{escaped}", OTHER_TEXT),)


# Where a word without an attribute is looked for: the fields of content, weighted.
UNNAMED_TARGETS: Final = tuple(
    Target(name, name, weight=field_weight(name)) for name in TEXT_FIELDS if searched_unnamed(name)
)


def field_bit(field: str) -> int:
    """The bit of text field ``field`` in a vocabulary mask."""
    return 1 << _FIELD_INDEX[field]


def document(obj: IndexedObject, layout: tantivy.Schema) -> tantivy.Document:
    """``obj`` as a tantivy document. Built from one dict in one call, which the binding
    converts by the schema: measured at 44 us an object against 96 for a JSON text passed
    to ``add_json``, and a value of the wrong type raises ValueError here, not in the writer."""
    fields: dict[str, list[str]] = {}
    other: dict[str, list[str]] = {}
    for attribute, value in obj.attributes:
        name = attribute.lower()
        into = fields if name in _FIELD_INDEX and name not in (BODY, OTHER_TEXT) else other
        into.setdefault(name, []).append(value)
    doc: dict[str, object] = {
        OID: obj.oid,
    }
    if SERVER_ATTRIBUTE in other:
        doc[SERVER] = SERVER_MARK
    running = RUNNING_TEXT.intersection(fields)
    if len(running) == 1:
        (kind,) = running
        doc[BODY] = fields.pop(kind)
        doc[BODY_KIND] = kind
    doc.update(fields)
    if other:
        doc[OTHER] = other
        doc[OTHER_TEXT] = [value for values in other.values() for value in values]
    if obj.update_time is not None:
        doc[UPDATE_TIME] = obj.update_time
    if obj.file_size is not None and 0 <= obj.file_size < 2**64:
        doc[FILE_SIZE] = obj.file_size
    return tantivy.Document.from_dict(doc, layout)
