"""RootNode filters: Harvest's URL-Filter and Host-Filter files, and what each one matches.

A filter file holds ``Allow regex`` / ``Deny regex`` lines (keyword case-insensitive), ``#``
comment lines and blank lines. The regexes are POSIX-style extended regular expressions,
compiled with Python's ``re`` (POSIX bracket classes such as ``[[:digit:]]`` are translated,
since ``re`` would read them as plain sets) and matched unanchored (``search``). Rules apply
in order and the first match wins; text no rule matches is allowed.

URL filters see the URL path with its query (no scheme, host or port); host filters see
``host:port``, the port always present. This module also owns reading the small rule files
the configuration names (filters and the stoplist), so that all report problems alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gatherer.errors import ConfigError
from gatherer.urls import authority, path_query

# POSIX bracket classes as ``re`` set members (the bracket around them stays).
_POSIX_CLASSES = {
    "[:alpha:]": "a-zA-Z",
    "[:digit:]": "0-9",
    "[:alnum:]": "a-zA-Z0-9",
    "[:upper:]": "A-Z",
    "[:lower:]": "a-z",
    "[:xdigit:]": "0-9A-Fa-f",
    "[:space:]": r" \t\n\r\f\v",
    "[:blank:]": r" \t",
    "[:punct:]": r"!-/:-@\[-`{-~",
    "[:cntrl:]": r"\x00-\x1f\x7f",
    "[:print:]": r"\x20-\x7e",
    "[:graph:]": r"\x21-\x7e",
}
_POSIX_CLASS = re.compile("|".join(re.escape(name) for name in _POSIX_CLASSES))


def posix_classes_to_re(regex: str) -> str:
    """``regex`` with each POSIX class inside a bracket expression (``[[:digit:]_]``) written
    as ``re`` set members (``[0-9_]``); everything else is left as it is."""
    out: list[str] = []
    i, in_set = 0, False
    while i < len(regex):
        posix = _POSIX_CLASS.match(regex, i) if in_set else None
        if posix:
            out.append(_POSIX_CLASSES[posix[0]])
            i = posix.end()
            continue
        # An escape pair is copied whole (``re`` reads escapes inside sets too).
        end = i + (2 if regex[i] == "\\" else 1)
        if regex[i] == "[" and not in_set:
            in_set = True
            # A "^" and then a "]" right after the opening bracket do not end the set.
            end += regex.startswith("^", end)
            end += regex.startswith("]", end)
        elif regex[i] == "]" and in_set:
            in_set = False
        out.append(regex[i:end])
        i = end
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Filter:
    """An ordered list of allow/deny rules.

    ``rules``: ``(allow, pattern)`` pairs in file order; the first pattern found in the text
    decides. ``source``: where the rules came from (a file path), for messages.
    """

    rules: tuple[tuple[bool, re.Pattern[str]], ...]
    source: str

    def allows(self, text: str) -> bool:
        """Whether the first rule matching ``text`` is an Allow (True when none matches)."""
        for allow, pattern in self.rules:
            if pattern.search(text):
                return allow
        return True

    def __repr__(self) -> str:
        return f"Filter({self.source!r}, {len(self.rules)} rules)"


def rule_lines(text: str) -> Iterator[tuple[int, str]]:
    """The (line number, stripped line) pairs of a rule file, without blanks and comments."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield number, line


def read_text_file(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``; ConfigError "path: cannot read WHAT: reason" otherwise."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError([f"{path}: cannot read {what}: {e.strerror or e}"]) from e
    except UnicodeDecodeError as e:
        raise ConfigError([f"{path}: cannot read {what}: not UTF-8 text"]) from e


def parse_filter(text: str, source: str) -> Filter:
    """Parse filter-file text; every bad line is reported as "source:line: reason"."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    problems: list[str] = []
    for number, line in rule_lines(text):
        keyword, *rest = line.split(None, 1)
        keyword, regex = keyword.lower(), "".join(rest)
        if keyword not in ("allow", "deny"):
            problems.append(f"{source}:{number}: expected 'Allow regex' or 'Deny regex'")
        elif not regex:
            problems.append(f"{source}:{number}: {keyword.title()} needs a regular expression")
        else:
            try:
                pattern = re.compile(posix_classes_to_re(regex))
            except re.error as e:
                problems.append(f"{source}:{number}: bad regular expression {regex!r}: {e.msg}")
            else:
                rules.append((keyword == "allow", pattern))
    if problems:
        raise ConfigError(problems)
    return Filter(tuple(rules), source)


def load_filter(path: Path) -> Filter:
    """Read and parse the filter file at ``path`` (ConfigError lists every problem)."""
    return parse_filter(read_text_file(path, "filter file"), str(path))


def url_filter_subject(url: str) -> str:
    """What a URL filter matches: the path and ``?query`` if any (FetchError for a bad URL)."""
    return path_query(url)


def host_filter_subject(url: str) -> str:
    """What a host filter matches: ``host:port``, the port always present (the scheme's
    default; 0 for FILE, whose empty host is ``localhost``). FetchError for a bad URL."""
    return authority(url)


# Like Harvest's URL-filter-default: skip images, sounds and video (they yield no text worth
# indexing and are large), then allow everything. ``(\?|$)`` lets a query follow the name.
DEFAULT_URL_FILTER = parse_filter(
    r"""
Deny (?i)\.(gif|jpe?g|png|bmp|tiff?|xbm|xpm|pbm|pgm|ppm|ico|svg|webp|avif|heic)(\?|$)
Deny (?i)\.(au|snd|wav|aiff?|mp3|ogg|oga|opus|flac|m4a|aac|midi?|ram?|wma)(\?|$)
Deny (?i)\.(mpe?g|mp4|m4v|mov|qt|avi|wmv|flv|mkv|webm|ogv|3gp)(\?|$)
Allow .
""",
    "<default URL filter>",
)
