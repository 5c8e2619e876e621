"""The query language's regular expressions: checked when a query is parsed, compiled for
RE2 and run by it. Pure: no I/O.

RE2 matches in time linear in the text, whatever the pattern: it never backtracks. Python's
``re`` does, and a query may run a pattern over values of up to 100,000 characters that
anyone can plant through the HSR; ``/(a+)+$/`` against 26 characters took it 9.9 s (issue
25). So a pattern is run by RE2 only, and must also read the same to Python's ``re``, whose
parser the index uses to find the words a pattern's matches must contain
(broker/index/translate.py): what RE2 lacks (backreferences, lookaround...), or reads
otherwise than ``re`` (``{,n}``), is refused with the position of the construct.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

import re2

__all__ = ["compiled", "found", "problem", "spans"]

# Distinct patterns kept compiled: each RE2 program may use up to 8 MiB, so not every
# pattern ever asked for.
_CACHED = 256

_CONDITION_GROUP = re.compile(r"\(\?\(([^)]*)")
_QUANTIFIER = re.compile(r"\{([0-9]*)(,?)([0-9]*)\}")
_FLAGS = frozenset("ims-")
_SURROGATE = re.compile("[\ud800-\udfff]")
_BACKREFERENCES = r"backreferences (\1, (?P=name)) are not supported"
_LOOKAROUND = "lookahead and lookbehind ((?=...), (?<=...)) are not supported"
# What may follow "(?", for the group kinds RE2 lacks.
_GROUPS = (
    ("=", _LOOKAROUND),
    ("!", _LOOKAROUND),
    ("<=", _LOOKAROUND),
    ("<!", _LOOKAROUND),
    ("(", "conditional groups ((?(1)...)) are not supported"),
    (">", "atomic groups ((?>...)) are not supported"),
    ("P=", _BACKREFERENCES),
    ("#", "comments ((?#...)) are not supported"),
)


def problem(pattern: str) -> tuple[int, str] | None:
    """Why ``pattern`` is refused, with the index of the problem in it, or None."""
    hazard = _warning_hazard(pattern)
    if hazard is not None:
        return hazard, _hazard_reason(pattern, hazard)
    try:
        re.compile(pattern)
    except re.error as exc:
        at = exc.pos if exc.pos is not None and exc.pos <= len(pattern) else 0
        return at, f"bad regular expression: {exc.msg}"
    except (OverflowError, RecursionError, ValueError) as exc:
        return 0, f"bad regular expression: {exc}"
    unsupported = _unsupported(pattern)
    if unsupported is not None:
        return unsupported
    surrogate = _SURROGATE.search(pattern)
    if surrogate is not None:  # RE2 reads UTF-8, which has no surrogates
        return surrogate.start(), "bad regular expression: a lone surrogate is not a character"
    try:
        compiled(pattern, True)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else ""
        text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        # RE2's messages end with the offending text ("invalid repetition size: {1001}").
        at = pattern.find(text.rpartition(": ")[2])
        return max(at, 0), f"bad regular expression: {text}"
    return None


@lru_cache(maxsize=_CACHED)
def compiled(pattern: str, case_sensitive: bool) -> re2._Regexp[str]:
    """``pattern`` compiled by RE2 (re2.error if RE2 refuses it: ``problem`` says why)."""
    options = re2.Options()
    options.case_sensitive = case_sensitive
    options.log_errors = False  # a refused pattern is the client's error, not the log's
    return re2.compile(pattern, options)


def found(regex: re2._Regexp[str], text: str) -> bool:
    """Whether ``regex`` matches somewhere in ``text``."""
    # Searched as bytes: RE2 works on UTF-8, and given str the binding maps every match's
    # offsets back to characters, which a yes or no does not need (2-3x the time).
    return regex.search(text.encode("utf-8", "surrogatepass")) is not None


def spans(regex: re2._Regexp[str], text: str) -> Iterator[tuple[int, int]]:
    """The non-empty matches of ``regex`` in ``text``, as character offsets, in order."""
    if not _encodable(text):
        # A lone surrogate becomes "?": one character for one, so the offsets still hold.
        text = text.encode("utf-8", "replace").decode()
    return (m.span() for m in regex.finditer(text) if m.end() > m.start())


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _unsupported(pattern: str) -> tuple[int, str] | None:
    """The first construct of ``pattern`` (which ``re`` compiles) that RE2 lacks or reads
    otherwise, outside sets and escapes."""
    i = 0
    quantified = False  # the last item read was a repetition
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            following = pattern[i + 1 : i + 2]
            if following in tuple("123456789"):
                return i, _BACKREFERENCES
            if following == "Z":
                return i, r"\Z is not supported: write $"
            i, quantified = i + 2, False
            continue
        if ch == "[":
            i, quantified = _set_end(pattern, i), False
            continue
        if ch == "(" and pattern.startswith("?", i + 1):
            reason = _group_problem(pattern, i + 2)
            if reason is not None:
                return i, reason
            i, quantified = i + 2, False
            continue
        if ch == "+" and quantified:
            return i, "possessive repetitions (*+, ++, ?+, {n}+) are not supported"
        if ch in "*+?":
            # A "?" right after a repetition makes it lazy, which RE2 reads as re does.
            lazy = ch == "?" and quantified
            i, quantified = i + 1, not lazy
            continue
        repeat = _QUANTIFIER.match(pattern, i) if ch == "{" else None
        if repeat is not None and repeat.group(2) and not repeat.group(1):
            # re reads {,n} as {0,n}; RE2 as the text "{,n}".
            high = repeat.group(3)
            if high:
                return i, f"write {{0,{high}}} for at most {high} repetitions"
            return i, "write * for any number of repetitions"
        if repeat is not None and repeat.group(1):
            i, quantified = repeat.end(), True
            continue
        i, quantified = i + 1, False
    return None


def _group_problem(pattern: str, start: int) -> str | None:
    """Why the group whose ``(?`` ends before ``start`` is refused, or None."""
    for opening, reason in _GROUPS:
        if pattern.startswith(opening, start):
            return reason
    if pattern.startswith(("P<", ":"), start):
        return None
    end = start
    while end < len(pattern) and pattern[end] not in ":)":
        end += 1
    if not set(pattern[start:end]) <= _FLAGS:
        return "only the flags i, m and s are supported ((?i), (?s:...))"
    return None


def _set_end(pattern: str, start: int) -> int:
    """The index after the set that opens at ``start`` (``re`` has compiled the pattern, so
    the set is closed)."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):  # a set's first member may be ']'
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i + 1


def _hazard_reason(pattern: str, index: int) -> str:
    if pattern[index] == "(":
        return "bad regular expression: a conditional group's name must be ASCII"
    if pattern[index] == "[":
        return "bad regular expression: write '\\[' for a literal '[' inside [...]"
    ch = pattern[index]
    return f"bad regular expression: {ch * 2!r} inside [...] is reserved; write '{ch}\\{ch}'"


def _warning_hazard(pattern: str) -> int | None:
    """Where ``re.compile`` would warn instead of failing (a FutureWarning for ``[`` or a doubled
    ``-&~|`` inside a set, a DeprecationWarning for a non-ASCII conditional group name), or
    None. Such patterns are refused with a reason of their own; erring on the side of
    refusing: any ``[`` inside a set is refused, though ``re`` warns only for ``[[``. (A
    warning would go to stderr, or under warnings-as-errors escape as a non-syntax error; and
    ``re`` caches compiled patterns, so a second compile would not warn again.)"""
    condition = next(
        (m.start() for m in _CONDITION_GROUP.finditer(pattern) if not m.group(1).isascii()), None
    )
    set_hazard = _set_hazard(pattern)
    hazards = [i for i in (condition, set_hazard) if i is not None]
    return min(hazards) if hazards else None


def _set_hazard(pattern: str) -> int | None:
    in_set = first = False
    previous = ""
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            previous, first = "", False
            continue
        if not in_set:
            if ch == "[":
                in_set, first, previous = True, True, ""
                if pattern.startswith("^", i + 1):
                    i += 1  # a negation; the set's first member (maybe ']') follows it
            i += 1
            continue
        if ch == "[":
            return i
        if ch in "-&~|" and ch == previous:
            return i - 1
        if ch == "]" and not first:
            in_set = False
        previous, first = ch, False
        i += 1
    return None
