"""A raw HTTP/1.1 origin for the end-to-end fuzz tests (see conftest.py's fixture)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

LAST_MODIFIED = "Sun, 06 Nov 1994 08:49:37 GMT"
STORED_BODY = bytes(range(256)) * 16
"""The body of /stored: the object every fuzz example checks is still served intact."""
FUZZ_BODY = b"".join(b"%04d\n" % i for i in range(60))  # 300 bytes, for range requests


class FuzzOrigin:
    """A raw HTTP/1.1 origin on 127.0.0.1 that answers every request, whatever it holds,
    and closes the connection after each answer.

    ``/stored`` is a long-lived cacheable object; ``/f/...`` are cacheable objects with
    validators and Vary (``/f/nc...`` must be revalidated each time, and answers a matching
    If-None-Match with 304); ``/y0/...`` carry dates in year 0000; anything else is a 404.
    """

    def __init__(self) -> None:
        self.port = 0
        self.hits: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def authority(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"http://{self.authority()}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            async with asyncio.timeout(5.0):
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, fields = _parse_head(head)
                await _drain_body(reader, fields)
            self.hits[path] += 1
            writer.write(_answer(method, path, fields))
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head[:-4].decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    path = rest.rpartition(" ")[0] or rest
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return method, path, fields


async def _drain_body(reader: asyncio.StreamReader, fields: dict[str, str]) -> None:
    """Read the request body, so that closing after the answer sends no reset."""
    if fields.get("transfer-encoding", "").lower() == "chunked":
        with contextlib.suppress(asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            await reader.readuntil(b"0\r\n\r\n")
    elif (length := fields.get("content-length", "")).isascii() and length.isdigit():
        await reader.readexactly(min(int(length), 1 << 20))


def _answer(method: str, path: str, fields: dict[str, str]) -> bytes:
    status, reason = "200", "OK"
    headers = [("Content-Type", "text/plain"), ("Connection", "close")]
    if path == "/stored":
        body = STORED_BODY
        headers += [("Cache-Control", "max-age=3600"), ("ETag", '"s1"')]
        headers += [("Last-Modified", LAST_MODIFIED)]
    elif path.startswith("/f/"):
        body = FUZZ_BODY
        cc = "no-cache" if path.startswith("/f/nc") else "max-age=600"
        headers += [("Cache-Control", cc), ("ETag", '"f1"'), ("Last-Modified", LAST_MODIFIED)]
        headers += [("Vary", "Accept-Encoding")]
        if '"f1"' in fields.get("if-none-match", ""):
            status, reason, body = "304", "Not Modified", b""
    elif path.startswith("/y0/"):
        body = FUZZ_BODY
        headers += [("Cache-Control", "no-cache"), ("ETag", '"y0"')]
        headers += [("Last-Modified", "Sat, 01 Jan 0000 00:00:00 GMT")]
    else:
        status, reason, body = "404", "Not Found", b"no such path\n"
    if status != "304":
        headers.append(("Content-Length", str(len(body))))
    if method == "HEAD":
        body = b""
    head = f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)
    return (head + "\r\n").encode("latin-1") + body
