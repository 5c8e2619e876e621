"""HTTP and HTTPS fetching: the gatherer's one aiohttp.ClientSession.

Every fetch goes through ``settings.proxy`` when set (a Harvest cache, so that repeated
gathering is absorbed by the cache hierarchy). Redirects are followed here rather than by
aiohttp so that the crawl controller can refuse each hop (``permit``) and the chain is
recorded. Bodies are read in chunks under ``max_bytes`` and content codings undone here, under
the same cap; a larger body fails as soon as it is known to be larger, and the connection is
closed rather than drained.
"""

from __future__ import annotations

import asyncio
import email.utils
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC
from types import TracebackType

import aiohttp
from aiohttp import hdrs
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace
from yarl import URL

from gatherer.errors import FetchError
from gatherer.fetch.body import Body
from gatherer.fetch.decoding import Decoder
from gatherer.fetch.result import Fetched, Validators
from gatherer.fetch.settings import FetchSettings
from harvest_common.cache_client import request_class

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
ROBOTS_MAX_BYTES = 500 * 1024  # RFC 9309 section 2.5: at least 500 KiB are parsed
ROBOTS_MAX_REDIRECTS = 5  # RFC 9309 section 2.3.1.2
_CHUNK = 64 * 1024

# The address the current task's request connected to, noted by _PeerConnector. A response
# whose body arrived with its head has already given its connection back to the pool, so it
# cannot be asked afterwards.
_PEER: ContextVar[str | None] = ContextVar("gatherer_http_peer", default=None)


class _PeerConnector(aiohttp.TCPConnector):
    """A TCPConnector noting the peer address of each connection it hands out."""

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature
    ) -> Connection:
        connection = await super().connect(req, traces, timeout)
        transport = connection.transport
        peername = transport.get_extra_info("peername") if transport is not None else None
        _PEER.set(str(peername[0]) if peername else None)
        return connection


class HttpFetcher:
    """Fetches http: and https: URLs; ``async with`` opens and closes its session."""

    def __init__(self, settings: FetchSettings) -> None:
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> HttpFetcher:
        settings = self._settings
        connector = _PeerConnector(
            limit=settings.max_connections, limit_per_host=settings.connections_per_host
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            request_class=request_class(settings.https_via_proxy),
            # The whole fetch is bounded by asyncio.timeout(settings.timeout) instead.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=settings.connect_timeout),
            auto_decompress=False,  # decoded here, under the max_bytes cap
            cookie_jar=aiohttp.DummyCookieJar(),  # a crawler keeps no state between documents
            headers={
                hdrs.USER_AGENT: settings.user_agent,
                hdrs.ACCEPT_ENCODING: "gzip, deflate",
            },
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def fetch(
        self,
        url: str,
        *,
        validators: Validators | None = None,
        permit: Callable[[str], bool] | None = None,
    ) -> Fetched:
        """GET ``url``; redirects followed up to ``max_redirects``, each hop asked of
        ``permit`` first; 304 gives ``not_modified``; any other non-2xx status fails."""
        return await self._get(
            url,
            validators=validators,
            permit=permit,
            max_redirects=self._settings.max_redirects,
            body=Body(url, self._settings.max_bytes),
        )

    async def get_robots(self, url: str) -> tuple[int | None, bytes]:
        """The robots.txt of ``url``'s host: its status (None if it could not be had: no
        connection, timeout, broken response) and up to 500 KiB of its body (empty unless 2xx).
        Up to five redirects are followed; beyond, the last redirect's status is given."""
        try:
            robots = str(URL(url).join(URL("/robots.txt")))
        except ValueError:  # (not a URL: nothing to ask)
            return None, b""
        try:
            fetched = await self._get(
                robots,
                validators=None,
                permit=None,
                max_redirects=ROBOTS_MAX_REDIRECTS,
                body=Body(robots, ROBOTS_MAX_BYTES, truncate=True),
            )
        except FetchError as error:
            return error.status, b""
        return fetched.status, fetched.content

    async def _get(
        self,
        url: str,
        *,
        validators: Validators | None,
        permit: Callable[[str], bool] | None,
        max_redirects: int,
        body: Body,
    ) -> Fetched:
        timeout = self._settings.timeout
        try:
            async with asyncio.timeout(timeout):
                return await self._follow(url, validators, permit, max_redirects, body)
        except TimeoutError as error:  # (aiohttp's own timeouts derive from it too)
            raise FetchError(url, "timeout", f"not fetched within {timeout} s") from error
        except aiohttp.ClientConnectorDNSError as error:
            raise FetchError(url, "dns", str(error)) from error
        except aiohttp.ClientConnectorError as error:
            raise FetchError(url, "connect", str(error)) from error
        except aiohttp.InvalidURL as error:
            raise FetchError(url, "refused", f"not a fetchable URL: {error}") from error
        except aiohttp.ClientError as error:
            raise FetchError(url, "protocol", f"{type(error).__name__}: {error}") from error

    async def _follow(
        self,
        url: str,
        validators: Validators | None,
        permit: Callable[[str], bool] | None,
        max_redirects: int,
        body: Body,
    ) -> Fetched:
        session = self._session
        if session is None:
            raise RuntimeError("HttpFetcher used outside 'async with'")
        headers = _conditional_headers(validators)
        settings = self._settings
        proxied = settings.proxy is not None
        https_absolute = proxied and settings.https_via_proxy == "absolute"
        redirects: list[str] = []
        target = url
        while True:  # bounded: each turn adds a redirect, and there are max_redirects at most
            _PEER.set(None)
            async with session.get(
                target, headers=headers, proxy=self._settings.proxy, allow_redirects=False
            ) as resp:
                location = _redirect_location(url, resp)
                if location is None:
                    return await _complete(
                        url,
                        target,
                        resp,
                        tuple(redirects),
                        validators,
                        body,
                        proxied=proxied,
                        https_absolute=https_absolute,
                    )
                status = resp.status
            if len(redirects) == max_redirects:
                raise FetchError(
                    url, "redirects", f"more than {max_redirects} redirects", status=status
                )
            if URL(location).scheme not in ("http", "https"):
                raise FetchError(url, "refused", f"redirected out of HTTP, to {location}")
            if permit is not None and not permit(location):
                raise FetchError(url, "refused", f"redirect to {location} not permitted")
            redirects.append(target)
            target = location


def _conditional_headers(validators: Validators | None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if validators is not None and validators.etag:
        headers[hdrs.IF_NONE_MATCH] = validators.etag
    if validators is not None and validators.last_modified:
        headers[hdrs.IF_MODIFIED_SINCE] = validators.last_modified
    return headers


def _redirect_location(url: str, resp: aiohttp.ClientResponse) -> str | None:
    """The absolute URL a redirect response points to (fragment dropped), else None."""
    location = resp.headers.get(hdrs.LOCATION)
    if resp.status not in REDIRECT_STATUSES or not location:
        return None
    try:
        return str(resp.url.join(URL(location)).with_fragment(None))
    except ValueError as error:  # (yarl: not a URL, a port out of range...)
        raise FetchError(url, "protocol", f"bad Location {location!r}: {error}") from error


async def _complete(
    url: str,
    target: str,
    resp: aiohttp.ClientResponse,
    redirects: tuple[str, ...],
    validators: Validators | None,
    body: Body,
    *,
    proxied: bool,
    https_absolute: bool,
) -> Fetched:
    """The final response (from ``target``) of a fetch of ``url`` as a Fetched (body read),
    or a ``status`` failure."""
    status = resp.status
    not_modified = status == 304
    if not (not_modified or 200 <= status < 300):
        where = f" at {target}" if redirects else ""
        reason = f"HTTP {status} {resp.reason or ''}".strip()
        raise FetchError(url, "status", reason + where, status=status)
    content = b"" if not_modified else await _read(url, resp, body)
    etag = resp.headers.get(hdrs.ETAG)
    last_modified = resp.headers.get(hdrs.LAST_MODIFIED)
    if not_modified and validators is not None:
        # A 304 need not repeat the validators; the stored ones still hold.
        etag = etag or validators.etag
        last_modified = last_modified or validators.last_modified
    has_type = hdrs.CONTENT_TYPE in resp.headers  # (aiohttp defaults a missing one)
    return Fetched(
        url=target,
        content=content,
        content_type=resp.content_type if has_type else None,
        charset=resp.charset if has_type else None,
        status=status,
        not_modified=not_modified,
        etag=etag,
        last_modified=last_modified,
        modified=_epoch(last_modified),
        redirects=redirects,
        request_head=_request_head(resp, proxied=proxied, https_absolute=https_absolute),
        response_head=_response_head(resp),
        peer=_PEER.get(),
    )


def _epoch(http_date: str | None) -> float | None:
    """An HTTP-date as epoch seconds; None if absent or not a date."""
    if not http_date:
        return None
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _request_head(resp: aiohttp.ClientResponse, *, proxied: bool, https_absolute: bool) -> bytes:
    """The request line and fields as aiohttp sent them (its request_info holds them in
    order). To a proxy, a plain-HTTP request goes in absolute form, and so does an HTTPS one
    if ``https_absolute`` (else it is tunnelled, and its target is origin-form)."""
    info = resp.request_info
    absolute = proxied and (info.url.scheme == "http" or https_absolute)
    target = str(info.url) if absolute else info.url.raw_path_qs
    # (aiohttp's default HTTP/1.1; a proxy credential is left out of the record)
    lines = [f"{info.method} {target} HTTP/1.1"]
    lines += [f"{k}: {v}" for k, v in info.headers.items() if k.lower() != "proxy-authorization"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


def _response_head(resp: aiohttp.ClientResponse) -> bytes:
    """The status line and the fields as received."""
    version = resp.version or aiohttp.HttpVersion11
    status_line = f"HTTP/{version.major}.{version.minor} {resp.status} {resp.reason or ''}"
    fields = b"".join(name + b": " + value + b"\r\n" for name, value in resp.raw_headers)
    return status_line.rstrip().encode("latin-1", "replace") + b"\r\n" + fields + b"\r\n"


async def _read(url: str, resp: aiohttp.ClientResponse, body: Body) -> bytes:
    """The decoded body, read into ``body``: the announced, raw and decoded sizes are each
    held to its cap."""
    if resp.content_length is not None:
        body.expect(resp.content_length)
    decoder = Decoder(url, resp.headers.get(hdrs.CONTENT_ENCODING, "identity"))
    received = 0
    async for chunk in resp.content.iter_chunked(_CHUNK):
        received += len(chunk)
        body.expect(received)
        body.add(decoder.feed(chunk, body.room + 1))
        if body.done:
            # Not decoder.finish(): it would inflate the input held back past the cap.
            return body.value()
    body.add(decoder.finish())
    return body.value()
