"""Gopher URLs (RFC 1436; URL form per RFC 4266): ``gopher://host[:port]/<type><selector>``.

The selector is percent-decoded and sent as is (an RFC 4266 search string, "%09" + words,
goes with it), then the response is read until the server closes, under ``max_bytes`` and
the fetch timeout. An empty path is the root menu (type 1).

Menus (types 1 and 7) become their display strings, one a line ("text/x-gopher-menu"), and
the links of their fetchable items; a menu of nothing but error (3) and info lines is taken
as "not found" (status 404). Text (type 0) loses its "." terminator and dot-stuffing. Other
types are passed through as sent; HTML (h) and GIF (g) say their type, the rest none.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from urllib.parse import unquote_to_bytes, urlsplit

from gatherer.errors import FetchError
from gatherer.fetch.body import Body
from gatherer.fetch.gopher_menu import DEFAULT_PORT, parse, text_body
from gatherer.fetch.result import Fetched, Validators
from gatherer.fetch.settings import FetchSettings
from gatherer.fetch.slots import ConnectionSlots

MENU_TYPE = "text/x-gopher-menu"
_MENU_ITEM_TYPES = frozenset("17")
_CONTENT_TYPES = {"0": "text/plain", "h": "text/html", "g": "image/gif"}
_CHUNK = 64 * 1024


class GopherFetcher:
    """Fetches gopher: URLs, holding a connection slot of its host for each."""

    def __init__(self, settings: FetchSettings, slots: ConnectionSlots) -> None:
        self._settings = settings
        self._slots = slots

    async def fetch(
        self,
        url: str,
        *,
        validators: Validators | None = None,  # (Gopher has no validators)
        permit: Callable[[str], bool] | None = None,  # (nor redirects)
    ) -> Fetched:
        parts = urlsplit(url)
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError as error:
            raise FetchError(url, "refused", f"bad port: {error}") from error
        host = parts.hostname
        if not host:
            raise FetchError(url, "refused", "no host")
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        item_type = path[1] if len(path) > 1 else "1"
        async with self._slots.hold(host):
            raw, peer = await self._exchange(url, host, port, unquote_to_bytes(path[2:]))
        return _document(url, item_type, raw, peer)

    async def _exchange(
        self, url: str, host: str, port: int, selector: bytes
    ) -> tuple[bytes, str | None]:
        """Send the selector; everything the server sends back, and its address."""
        settings = self._settings
        body = Body(url, settings.max_bytes)
        try:
            async with asyncio.timeout(settings.timeout):
                reader, writer = await _connect(url, host, port, settings.connect_timeout)
                try:
                    peername = writer.get_extra_info("peername")
                    writer.write(selector + b"\r\n")
                    await writer.drain()
                    while chunk := await reader.read(_CHUNK):  # (bounded by max_bytes)
                        body.add(chunk)
                except OSError as error:
                    raise FetchError(url, "protocol", f"{type(error).__name__}: {error}") from error
                finally:
                    writer.close()
        except TimeoutError as error:
            raise FetchError(url, "timeout", f"not fetched within {settings.timeout} s") from error
        return body.value(), (str(peername[0]) if peername else None)


async def _connect(
    url: str, host: str, port: int, within: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        async with asyncio.timeout(within):
            return await asyncio.open_connection(host, port)
    except TimeoutError as error:  # (before OSError, which it is a subclass of)
        raise FetchError(url, "timeout", f"no connection within {within} s") from error
    except socket.gaierror as error:
        raise FetchError(url, "dns", str(error)) from error
    except OSError as error:
        raise FetchError(url, "connect", f"{type(error).__name__}: {error}") from error


def _document(url: str, item_type: str, raw: bytes, peer: str | None) -> Fetched:
    """What a response of the given item type means."""
    if item_type not in _MENU_ITEM_TYPES:
        content = text_body(raw) if item_type == "0" else raw
        return Fetched(
            url=url, content=content, content_type=_CONTENT_TYPES.get(item_type), peer=peer
        )
    items = parse(raw.decode("utf-8", "surrogateescape"))
    errors = [item for item in items if item.type == "3"]
    if errors and all(item.type in ("3", "i") for item in items):
        raise FetchError(url, "status", f"gopher error: {errors[0].display}", status=404)
    links = dict.fromkeys(link for item in items if (link := item.url) is not None)
    text = "".join(f"{item.display}\n" for item in items)
    return Fetched(
        url=url,
        content=text.encode("utf-8", "surrogateescape"),
        content_type=MENU_TYPE,
        links=tuple(links),
        peer=peer,
    )
