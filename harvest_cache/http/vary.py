"""Vary: which request fields select a stored response, and the key they form (RFC 9111 4.1).

Two requests match when their selecting fields are equal after the transformations RFC 9111
4.1 permits. This module applies those that are safe for any field: combining field lines,
removing empty list members and whitespace around commas, trimming. For the Accept family,
whose members are parameterised, whitespace around ``;`` is dropped too, and where values are
case-insensitive (charsets, codings, language tags) they are lowercased. It does not reorder
members: order can carry preference.
"""

from __future__ import annotations

import re

from harvest_cache.http.headers import Headers, split_list

_PARAMETERISED = frozenset({"accept", "accept-charset", "accept-encoding", "accept-language"})
_CASE_INSENSITIVE = frozenset({"accept-charset", "accept-encoding", "accept-language"})
_SEMICOLON = re.compile(r"[ \t]*;[ \t]*")


def vary_names(headers: Headers) -> tuple[str, ...] | None:
    """The response's Vary names, lowercased, deduplicated and sorted; None for ``Vary: *``.

    ``*`` means the response varies on something beyond the request's fields, so no later
    request can be shown to match it.
    """
    if "Vary" not in headers:
        return ()  # nearly always: one lookup, no list to split
    names = {name.lower() for name in headers.get_list("Vary")}
    if "*" in names:
        return None
    return tuple(sorted(names))


def vary_key(names: tuple[str, ...], request_headers: Headers) -> str:
    """A canonical text of the request's values for ``names`` ("" for no names).

    One line per name: ``name=value`` when present (the value may be empty), bare ``name``
    when absent, so that an absent field never matches an empty one. Field values cannot hold
    a line feed, so the lines cannot run together.
    """
    return "\n".join(_selecting_value(name, request_headers) for name in names)


def _selecting_value(name: str, request_headers: Headers) -> str:
    lines = request_headers.get_all(name)
    if not lines:
        return name
    members = [member for line in lines for member in split_list(line)]
    if name in _PARAMETERISED:
        members = [_SEMICOLON.sub(";", member) for member in members]
    value = ", ".join(members)
    return f"{name}={value.lower() if name in _CASE_INSENSITIVE else value}"
