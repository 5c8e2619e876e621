"""Shared Hypothesis settings and strategies for the fuzz tests.

The strategies are structure-aware: besides arbitrary text they assemble values from the
fragments the parsers look for (separators, quotes, escapes, digits, directive names), which
reaches the interesting branches far more often than random characters do.

The inputs that once found bugs are kept as explicit regression tests next to the
properties that found them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from harvest_cache.http.dates import format_http_date
from harvest_cache.http.headers import Headers
from harvest_cache.http.stored import StoredHead

T = TypeVar("T")

# Derandomized and without an example database, so that CI runs the same examples every
# time; no deadline, since a loaded CI machine must not turn slowness into failures.
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

MIN_TS = -62135596800  # 0001-01-01T00:00:00Z
MAX_TS = 253402300799  # 9999-12-31T23:59:59Z, the last instant a 4-digit year can name


# -- text ---------------------------------------------------------------------------------------

latin1_text = st.text(st.characters(codec="latin-1"))
"""What a header value can be after the wire's bytes are decoded as Latin-1."""

field_text = st.text(st.characters(codec="latin-1", exclude_characters="\r\n\x00"), max_size=40)
"""A field value as the HTTP parser lets it through (no CR, LF or NUL), Latin-1."""

_bits = st.text(st.characters(codec="latin-1", exclude_characters="\r\n\x00"), max_size=3)
numerals = st.one_of(
    st.integers(0, 10**12).map(str),
    st.lists(
        st.sampled_from(["0", "1", "9", " ", "\t", "-", "+", ".", "\u00b9", "\u00b2"]), max_size=5
    ).map("".join),
    # Near the edge of what int() reads: 4300 digits.
    st.integers(4295, 4305).map(lambda n: "9" * n),
)
"""Values of numeric fields (Age, Content-Length, Max-Forwards): valid, signed, fractional,
superscript or huge."""

_SEPARATORS = [",", ", ", ",,", ";", "=", '"', '\\"', "\\", " ", "\t", "/", ":", "-", "*"]
_DIGITS = ["0", "1", "9", "00", "42", "2147483648", "99999999999", "-1", "1.5", "+3", "\u00b9"]


def soup(*fragments: str, max_size: int = 10) -> st.SearchStrategy[str]:
    """Strings assembled from ``fragments``, separators, numerals and a little random text."""
    pieces = st.one_of(st.sampled_from([*fragments, *_SEPARATORS, *_DIGITS]), _bits)
    return st.lists(pieces, max_size=max_size).map("".join)


def weighted(*choices: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """One of the strategies, each drawn in proportion to its weight (``st.one_of`` draws
    each distinct strategy about equally often, however often it is listed)."""
    indices = [i for i, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.sampled_from(indices).flatmap(lambda i: choices[i][1])


def random_case(text: str) -> st.SearchStrategy[str]:
    """``text`` (ASCII) with each letter's case chosen at random."""
    return st.lists(st.booleans(), min_size=len(text), max_size=len(text)).map(
        lambda flips: "".join(
            c.upper() if f else c.lower() for c, f in zip(text, flips, strict=True)
        )
    )


# -- dates ---------------------------------------------------------------------------------------

timestamps = st.integers(MIN_TS, MAX_TS)

_DAYNAMES = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "Monday", "Sunday", "Foo"]
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "Jun", "Sep", "Dec", "jan", "DEC", "Xyz"]

# Each number free, with the edges (and plausible values) drawn often.
_num2 = st.one_of(
    st.sampled_from(["00", "01", "09", "23", "28", "29", "30", "31", "59", "60", "61", "99"]),
    st.integers(0, 99).map(lambda n: f"{n:02d}"),
)
_day = st.one_of(_num2, st.integers(0, 9).map(str))
_year4 = st.one_of(
    st.sampled_from(
        ["0000", "0001", "1600", "1900", "1969", "1970", "1994", "2000", "2038", "9999"]
    ),
    st.integers(0, 9999).map(lambda n: f"{n:04d}"),
)
_clock = st.one_of(
    st.sampled_from(["00:00:00", "23:59:59", "23:59:60", "24:00:00", "12:60:00", "08:49:37"]),
    st.builds(lambda h, m, s: f"{h}:{m}:{s}", _num2, _num2, _num2),
)

_date_like = st.one_of(
    timestamps.map(format_http_date),
    # The three shapes with every number free: impossible dates, times and years.
    st.builds(
        lambda wd, d, mon, y, t: f"{wd}, {d} {mon} {y} {t} GMT",
        st.sampled_from(_DAYNAMES),
        _day,
        st.sampled_from(_MONTHS),
        _year4,
        _clock,
    ),
    st.builds(
        lambda wd, d, mon, y, t: f"{wd}, {d}-{mon}-{y} {t} GMT",
        st.sampled_from(_DAYNAMES),
        _day,
        st.sampled_from(_MONTHS),
        _num2,
        _clock,
    ),
    st.builds(
        lambda wd, mon, d, t, y: f"{wd} {mon} {d:>2} {t} {y}",
        st.sampled_from(_DAYNAMES),
        st.sampled_from(_MONTHS),
        _day,
        _clock,
        _year4,
    ),
    soup(*_DAYNAMES, *_MONTHS, "GMT", " ", "00:00:00", "1994", "94", "29", "31", "60"),
)
http_dates = _date_like
"""Date-like field values, valid and not."""


def imf(ts: int) -> str:
    return format_http_date(ts)


# Spelled out rather than strftime's %a/%b, which follow the locale.
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def rfc850(ts: int) -> str:
    """The obsolete RFC 850 form, e.g. ``Sunday, 06-Nov-94 08:49:37 GMT``."""
    t = datetime.fromtimestamp(ts, UTC)
    return (
        f"{_WEEKDAYS[t.weekday()]}, {t.day:02d}-{_MONTH_NAMES[t.month - 1]}-{t.year % 100:02d}"
        f" {t:%H:%M:%S} GMT"
    )


def asctime(ts: int) -> str:
    """ANSI C's asctime() form, e.g. ``Sun Nov  6 08:49:37 1994``."""
    t = datetime.fromtimestamp(ts, UTC)
    return (
        f"{_WEEKDAYS[t.weekday()][:3]} {_MONTH_NAMES[t.month - 1]} {t.day:2d} {t:%H:%M:%S}"
        f" {t.year:04d}"
    )


# -- header fields -------------------------------------------------------------------------------

CACHE_CONTROL_NAMES = [
    "max-age",
    "s-maxage",
    "min-fresh",
    "max-stale",
    "stale-while-revalidate",
    "stale-if-error",
    "no-cache",
    "private",
    "no-store",
    "public",
    "must-revalidate",
    "proxy-revalidate",
    "must-understand",
    "no-transform",
    "only-if-cached",
    "immutable",
]

cache_control_values = st.one_of(
    soup(*CACHE_CONTROL_NAMES, "x-ext", "ETag", "Set-Cookie", max_size=14),
    field_text,
)

etags = st.one_of(
    st.builds(
        lambda weak, opaque: f'{"W/" if weak else ""}"{opaque}"',
        st.booleans(),
        st.text(st.characters(codec="latin-1", exclude_characters='"\r\n'), max_size=8),
    ),
    soup('"', "W/", "*", "abc", max_size=6),
)

# Field names the HTTP modules look at, in any case, and a few others.
_INTERESTING_FIELDS = [
    "Cache-Control",
    "Pragma",
    "Expires",
    "Date",
    "Last-Modified",
    "ETag",
    "Age",
    "Vary",
    "Content-Length",
    "Content-Range",
    "Content-Type",
    "Connection",
    "Keep-Alive",
    "Proxy-Connection",
    "Transfer-Encoding",
    "TE",
    "Trailer",
    "Upgrade",
    "Via",
    "X-Forwarded-For",
    "Host",
    "Expect",
    "Authorization",
    "Max-Forwards",
    "Accept",
    "Accept-Encoding",
    "Accept-Language",
    "Accept-Charset",
    "If-None-Match",
    "If-Modified-Since",
    "If-Range",
    "Range",
    "Location",
    "Content-Location",
    "Set-Cookie",
    "X-Custom",
]


def _spellings(names: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from([v for n in names for v in (n, n.lower(), n.upper())])


_DATE_FIELDS = ["Date", "Expires", "Last-Modified", "If-Modified-Since", "If-Range"]
_ETAG_FIELDS = ["ETag", "If-None-Match", "If-Range"]
_NUMERIC_FIELDS = ["Age", "Content-Length", "Max-Forwards"]
_LIST_WORDS = [n.lower() for n in _INTERESTING_FIELDS] + ["close", "chunked", "gzip", "*"]

field_names = st.one_of(
    _spellings(_INTERESTING_FIELDS),
    st.text(
        st.characters(codec="latin-1", exclude_characters="\r\n:\x00"), min_size=1, max_size=12
    ),
)

field = st.one_of(
    st.tuples(_spellings(["Cache-Control", "Pragma"]), cache_control_values),
    st.tuples(_spellings(_DATE_FIELDS), st.one_of(http_dates, field_text)),
    st.tuples(_spellings(_ETAG_FIELDS), st.one_of(etags, field_text)),
    st.tuples(_spellings(_NUMERIC_FIELDS), st.one_of(numerals, soup(max_size=4))),
    st.tuples(field_names, st.one_of(field_text, soup(*_LIST_WORDS))),
)
"""One (name, value) header field as the wire could carry it (Latin-1, no CR/LF/NUL)."""

fields = st.lists(field, max_size=8)

headers = fields.map(Headers)

stored_heads = st.builds(
    StoredHead,
    url=st.just("http://example.com/x"),
    status=st.sampled_from([200, 203, 204, 300, 301, 302, 404, 410, 500, 501, 599, 600, 99]),
    reason=st.just("OK"),
    headers=fields.map(tuple),
    request_time=st.floats(1e9, 2e9),
    response_time=st.floats(1e9, 2e9),
    body_length=st.integers(0, 10**6),
)
"""Stored heads with arbitrary (wire-possible) fields and plausible exchange times."""
