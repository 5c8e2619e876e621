"""Validation: asking the origin whether a stored response is still good (RFC 9111 4.3).

The cache sends a conditional request built from the stored validators; a 304 that matches
the stored response refreshes its header fields and times. (A client's own conditional
request is answered by ``conditional``.)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from harvest_cache.http.cache_control import parse_cache_control
from harvest_cache.http.dates import format_http_date, header_date
from harvest_cache.http.forwarding import end_to_end
from harvest_cache.http.headers import Headers, stored_fields
from harvest_cache.http.stored import StoredHead

# Fields a 304 must not change in a stored response (RFC 9111 3.2): they describe the stored
# content as received.
_NOT_UPDATED = ("Content-Length", "Content-Range")


@dataclass(frozen=True, slots=True)
class ETag:
    """An entity tag (RFC 9110 8.8.3); ``opaque`` excludes the quotes."""

    opaque: str
    weak: bool

    def strong_match(self, other: ETag) -> bool:
        """Strong comparison (RFC 9110 8.8.3.2): both strong and identical."""
        return not self.weak and not other.weak and self.opaque == other.opaque

    def weak_match(self, other: ETag) -> bool:
        """Weak comparison (RFC 9110 8.8.3.2): identical opaque tags, weak or not."""
        return self.opaque == other.opaque

    def __str__(self) -> str:
        return f'{"W/" if self.weak else ""}"{self.opaque}"'


def parse_etag(value: str) -> ETag | None:
    """``"xyz"`` or ``W/"xyz"``, or None when malformed."""
    value = value.strip()
    weak = value.startswith("W/")
    tag = value[2:] if weak else value
    if len(tag) < 2 or tag[0] != '"' or tag[-1] != '"' or '"' in tag[1:-1]:
        return None
    return ETag(tag[1:-1], weak)


def response_etag(headers: Headers) -> ETag | None:
    """The ETag of a response; None when absent, malformed or given more than once."""
    lines = headers.get_all("ETag")
    return parse_etag(lines[0]) if len(lines) == 1 else None


def conditional_headers(stored: StoredHead) -> tuple[tuple[str, str], ...]:
    """Fields that make a request conditional on the stored response (RFC 9111 4.3.1).

    If-None-Match carries the stored ETag; If-Modified-Since carries the stored Last-Modified
    verbatim (some origins compare it as text), if it is a valid date. Both when both exist:
    an origin that understands If-None-Match ignores the other (RFC 9110 13.1.3).
    """
    return _conditional_fields(stored.headers)


# Memoised, like the other per-head computations here: an object revalidated again and
# again keeps the same fields (within a second, even the same Date), so the work is done
# once per distinct head.
@lru_cache(maxsize=4096)
def _conditional_fields(stored: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    headers = stored_fields(stored)
    out: list[tuple[str, str]] = []
    if (etag := response_etag(headers)) is not None:
        out.append(("If-None-Match", str(etag)))
    if header_date(headers, "Last-Modified") is not None:
        out.append(("If-Modified-Since", headers.get_all("Last-Modified")[0].strip()))
    return tuple(out)


def is_not_modified_for(stored: StoredHead, not_modified: Headers) -> bool:
    """Whether a 304 may update ``stored`` (RFC 9111 4.3.4).

    A strong ETag in the 304 selects only a stored response with the same strong ETag; a weak
    one selects by weak comparison; else a Last-Modified in both must agree. A 304 with no
    validator answers the conditional request made for this one stored response, so it
    selects it (RFC 9111 4.3.4 speaks of choosing among several stored responses; Harvest
    validates one at a time).
    """
    return _selects(stored.headers, tuple(not_modified))


@lru_cache(maxsize=4096)
def _selects(stored: tuple[tuple[str, str], ...], update: tuple[tuple[str, str], ...]) -> bool:
    stored_headers = stored_fields(stored)
    not_modified = Headers(update)
    new_etag = response_etag(not_modified)
    if new_etag is not None:
        old_etag = response_etag(stored_headers)
        if old_etag is None:
            return False
        return new_etag.weak_match(old_etag) if new_etag.weak else new_etag.strong_match(old_etag)
    new_modified = header_date(not_modified, "Last-Modified")
    old_modified = header_date(stored_headers, "Last-Modified")
    return new_modified is None or old_modified is None or new_modified == old_modified


def head_confirms(stored: StoredHead, response: Headers) -> bool:
    """Whether a 200 answering a HEAD request describes ``stored``, a GET response (RFC 9111
    4.3.5): it carries a validator, every validator it carries (ETag, Last-Modified) has the
    stored value, and its Content-Length, if any, is the stored body's length. If so the
    stored response is freshened with its fields (``freshen``); if not, it is invalidated.
    """
    stored_headers = stored_fields(stored.headers)
    validators = [name for name in ("ETag", "Last-Modified") if name in response]
    if not validators:
        return False
    for name in validators:
        if [v.strip() for v in response.get_all(name)] != [
            v.strip() for v in stored_headers.get_all(name)
        ]:
            return False
    length = response.get("Content-Length")
    return length is None or length.strip() == str(stored.body_length)


def freshen(
    stored: StoredHead, not_modified: Headers, request_time: float, response_time: float
) -> StoredHead:
    """``stored`` updated by a 304 and the times of the exchange that validated it (RFC 9111
    3.2, 4.3.4).

    Each end-to-end field of the 304 replaces the stored lines of that name, except the
    fields in ``_NOT_UPDATED``. The old Age goes in any case: it aged an earlier exchange. A
    304 without Date gets ``response_time`` as its Date, as RFC 9110 6.6.1 asks of a recipient
    with a clock; keeping the old Date would make the response look old at once. Fields that
    the updated Cache-Control marks private are dropped (RFC 9111 5.2.2.7).
    """
    update = end_to_end(not_modified)
    update.remove(*_NOT_UPDATED)
    if "Date" not in update:
        update.add("Date", format_http_date(response_time))
    items = _updated_fields(stored.headers, tuple(update))
    return stored.revalidated(items, request_time, response_time)


@lru_cache(maxsize=4096)
def _updated_fields(
    stored: tuple[tuple[str, str], ...], update: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    replaced = {name.lower() for name, _ in update} | {"age"}
    items = [(n, v) for n, v in stored if n.lower() not in replaced]
    items.extend(update)
    private = parse_cache_control(Headers(items).get_all("Cache-Control")).private_fields
    if private:
        items = [(n, v) for n, v in items if n.lower() not in private]
    return tuple(items)
