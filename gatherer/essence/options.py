"""Essence's settings for one gathering run: a plain, picklable value sent to the workers."""

from __future__ import annotations

from dataclasses import dataclass

# Types not summarized unless the configuration's stoplist says otherwise: media that yields
# no text worth indexing (Harvest's stoplist.cf held the same kinds).
DEFAULT_STOPLIST = frozenset({"Image", "Audio", "Video", "Font"})


@dataclass(frozen=True, slots=True)
class EssenceOptions:
    """How Essence recognizes, selects, unnests and summarizes.

    ``stoplist``: Essence type names not to summarize.
    ``full_text``: add the whole text as ``Full-Text`` for text types (README and FAQ always).
    ``abstract_bytes``: size of the ``Abstract`` / ``Partial-Text`` taken from a document.
    ``max_keywords``: how many keywords the text summarizers keep.
    ``unnest_max_bytes``: total bytes a nested presentation may expand to (bomb guard).
    ``unnest_max_members``: archive members looked at; ``unnest_max_depth``: nesting levels.
    ``members_as_records``: unnested members become records of their own instead of
    ``Embed<n>-`` attributes.
    """

    stoplist: frozenset[str] = DEFAULT_STOPLIST
    full_text: bool = False
    abstract_bytes: int = 1024
    max_keywords: int = 50
    unnest_max_bytes: int = 64 * 1024 * 1024
    unnest_max_members: int = 1000
    unnest_max_depth: int = 3
    members_as_records: bool = False
