"""Loopback servers for the gatherer's FTP and Gopher tests: a real FTP server (pyftpdlib,
run in a thread) and a small Gopher server answering selectors from a table."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

with warnings.catch_warnings():
    # pyftpdlib still builds on asyncore, which Python 3.11 deprecates on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import FTPServer


@dataclass(frozen=True, slots=True)
class Ftp:
    """A running FTP server: its port and the directory anonymous users see as "/"."""

    port: int
    public: Path

    def url(self, path: str) -> str:
        return f"ftp://127.0.0.1:{self.port}{path}"


@contextmanager
def ftp_server(public: Path, users: Mapping[str, tuple[str, Path]] | None = None) -> Iterator[Ftp]:
    """pyftpdlib on 127.0.0.1: anonymous read-only on ``public``, and each of ``users``
    (name -> (password, home)) read-only on its home."""
    authorizer = DummyAuthorizer()
    authorizer.add_anonymous(str(public))
    for name, (password, home) in (users or {}).items():
        authorizer.add_user(name, password, str(home), perm="elr")
    # (auth_failed_timeout: pyftpdlib waits 3 s before answering a failed login)
    attributes = {"authorizer": authorizer, "banner": "test ftpd", "auth_failed_timeout": 0.01}
    handler = type("Handler", (FTPHandler,), attributes)
    server = FTPServer(("127.0.0.1", 0), handler)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            server.serve_forever(timeout=0.05, blocking=False, handle_exit=False)
        server.close_all()

    thread = threading.Thread(target=serve, name="ftpd", daemon=True)
    thread.start()
    try:
        yield Ftp(server.address[1], public)
    finally:
        stop.set()
        thread.join(5)


class GopherServer:
    """Answers each selector from a table; a missing one gets a Gopher error menu."""

    def __init__(self) -> None:
        self.documents: dict[bytes, bytes] = {}
        self.selectors: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                selector = (await reader.readline()).removesuffix(b"\r\n")
            self.selectors.append(selector)
            missing = b"3'" + selector + b"' does not exist\t\terror.host\t1\r\n.\r\n"
            writer.write(self.documents.get(selector, missing))
            await writer.drain()
        finally:
            writer.close()

    def url(self, path: str) -> str:
        return f"gopher://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
