"""FTP URLs through aioftp: ``ftp://[user[:password]@]host[:port]/path``.

One control connection per fetch: a crawl takes few documents from an FTP server, one at a
time per host (``ConnectionSlots``), and a pool of logged-in connections is not worth its
state. The login is the URL's, else ``settings.ftp_logins[host]``, else anonymous. The URL path
is used as an absolute path from the login's root.

A path ending in "/", or a directory per MLST (or LIST, for servers without it), is listed;
a file is downloaded under ``max_bytes``. A file's change token is ``"{modify}:{size}"`` from
its MLST facts, given as ``Fetched.last_modified`` and compared with
``Validators.last_modified``: the same token means not modified, without downloading.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import unquote, urlsplit

import aioftp

from gatherer.errors import FetchError
from gatherer.fetch.body import Body
from gatherer.fetch.listing import Listing
from gatherer.fetch.result import Fetched, Validators
from gatherer.fetch.settings import FetchSettings
from gatherer.fetch.slots import ConnectionSlots

ANONYMOUS = ("anonymous", "harvest@")
DEFAULT_PORT = 21
_CHUNK = 64 * 1024
_DIRECTORY_TYPES = frozenset({"dir", "cdir", "pdir"})


@dataclass(frozen=True, slots=True)
class _Target:
    host: str
    port: int
    user: str
    password: str
    path: str


class FtpFetcher:
    """Fetches ftp: URLs, holding a connection slot of its host for each."""

    def __init__(self, settings: FetchSettings, slots: ConnectionSlots) -> None:
        self._settings = settings
        self._slots = slots
        self._logins = {host.lower(): login for host, login in settings.ftp_logins.items()}

    async def fetch(
        self,
        url: str,
        *,
        validators: Validators | None = None,
        permit: Callable[[str], bool] | None = None,  # (FTP does not redirect)
    ) -> Fetched:
        target = self._target(url)
        async with self._slots.hold(target.host):
            return await self._fetch(url, target, validators)

    def _target(self, url: str) -> _Target:
        parts = urlsplit(url)
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError as error:
            raise FetchError(url, "refused", f"bad port: {error}") from error
        host = parts.hostname
        if not host:
            raise FetchError(url, "refused", "no host")
        if parts.username is not None:
            user, password = unquote(parts.username), unquote(parts.password or "")
        else:
            user, password = self._logins.get(host, ANONYMOUS)
        return _Target(host, port, user, password, unquote(parts.path) or "/")

    async def _fetch(self, url: str, target: _Target, validators: Validators | None) -> Fetched:
        settings = self._settings
        client = aioftp.Client(
            socket_timeout=settings.timeout, connection_timeout=settings.connect_timeout
        )
        phase = "connect"  # which step failed decides what a failure means
        try:
            async with asyncio.timeout(settings.timeout):
                await client.connect(target.host, target.port)
                phase = "login"
                await client.login(target.user, target.password)
                phase = "transfer"
                return await self._retrieve(url, client, target.path, validators)
        except TimeoutError as error:  # (before OSError, which it is a subclass of)
            raise FetchError(url, "timeout", f"not fetched within {settings.timeout} s") from error
        except socket.gaierror as error:
            raise FetchError(url, "dns", str(error)) from error
        except aioftp.StatusCodeError as error:
            raise _status_failure(url, phase, error) from error
        except (OSError, EOFError) as error:
            kind = "connect" if phase == "connect" else "protocol"
            raise FetchError(url, kind, f"{type(error).__name__}: {error}") from error
        except (UnicodeError, aioftp.AIOFTPException) as error:
            raise FetchError(url, "protocol", f"{type(error).__name__}: {error}") from error
        finally:
            client.close()

    async def _retrieve(
        self, url: str, client: aioftp.Client, path: str, validators: Validators | None
    ) -> Fetched:
        peername = client.stream.writer.get_extra_info("peername")
        peer = str(peername[0]) if peername else None
        if path.endswith("/"):
            return await self._list(url, client, path, peer)
        info = await client.stat(path)
        if info["type"] in _DIRECTORY_TYPES:
            return await self._list(url, client, path, peer)
        modify, size = info.get("modify"), info.get("size")
        token = f"{modify}:{size}" if modify and size else None
        modified = _mlsx_time(modify)
        if token is not None and validators is not None and validators.last_modified == token:
            return Fetched(
                url=url,
                content=b"",
                not_modified=True,
                last_modified=token,
                modified=modified,
                peer=peer,
            )
        body = Body(url, self._settings.max_bytes)
        if size and size.isascii() and size.isdigit():
            body.expect(int(size))
        async with client.download_stream(path) as stream:
            async for block in stream.iter_by_block(_CHUNK):
                body.add(block)
        return Fetched(
            url=url, content=body.value(), last_modified=token, modified=modified, peer=peer
        )

    async def _list(self, url: str, client: aioftp.Client, path: str, peer: str | None) -> Fetched:
        listing = Listing(url, self._settings.max_bytes)
        # Read to the end even past max_bytes (Listing stops keeping names): leaving the data
        # connection half-read would leave it open.
        async for entry, info in client.list(path):
            listing.add(entry.name, info["type"] in _DIRECTORY_TYPES)
        return listing.document(peer=peer)


def _status_failure(url: str, phase: str, error: aioftp.StatusCodeError) -> FetchError:
    """What an unexpected FTP reply means, by the step it answered."""
    code = error.received_codes[-1] if error.received_codes else ""
    reason = f"FTP {code} {' '.join(error.info) if isinstance(error.info, list) else error.info}"
    if phase == "connect":
        return FetchError(url, "connect", reason)
    if phase == "login":
        return FetchError(url, "refused", f"login failed: {reason}")
    if code == "550":  # (file unavailable: not found, or no access)
        return FetchError(url, "status", reason, status=404)
    return FetchError(url, "protocol", reason)


def _mlsx_time(value: str | None) -> float | None:
    """An MLSx time fact ("YYYYMMDDHHMMSS[.sss]", UTC) as epoch seconds; None if not one."""
    digits = (value or "")[:14]
    if len(digits) != 14 or not (digits.isascii() and digits.isdigit()):
        return None
    year, month, day = int(digits[:4]), int(digits[4:6]), int(digits[6:8])
    hour, minute, second = int(digits[8:10]), int(digits[10:12]), int(digits[12:14])
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
    except ValueError:  # (month 13 and the like)
        return None
