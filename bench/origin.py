"""A minimal, fast origin server for the proxy benchmark (asyncio on uvloop).

The benchmark's default origin is nginx (see README.md for why); this one is the fallback when
nginx is missing (``run.py --origin python``) and the second contender in ``run.py --calibrate``.

It serves over HTTP/1.1 keep-alive, GET and HEAD only:

* ``/obj/1k``, ``/obj/16k``, ``/obj/256k``, ``/obj/4m`` (any query string): fixed bodies with
  ``Cache-Control: max-age=3600``, an ``ETag`` and ``Last-Modified``;
* ``/miss/<anything>``: a 1 KiB body that starts with the request target, so each URL's body is
  its own, with ``Cache-Control: max-age=3600``; ``/miss16k/<anything>`` the same at 16 KiB;
* ``/reval/<anything>``: a 1 KiB body with ``Cache-Control: max-age=0`` and a fixed ``ETag``;
  a request whose ``If-None-Match`` holds that tag gets ``304 Not Modified``;
* ``/__stats``: the number of requests answered so far, as text.

Run: ``python bench/origin.py --listen 127.0.0.1:8080``. It stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import time
from email.utils import formatdate
from types import ModuleType

uvloop: ModuleType | None
try:
    import uvloop
except ImportError:  # the plain loop still works, only slower
    uvloop = None

KIB = 1024
SIZES = {"1k": KIB, "16k": 16 * KIB, "256k": 256 * KIB, "4m": 4 * KIB * KIB}
ETAG = b'"harvest-bench-1"'
LAST_MODIFIED = formatdate(1_000_000_000, usegmt=True).encode()
MAX_HEAD = 64 * KIB


def _head(status: bytes, length: int, cache_control: bytes, etag: bytes = ETAG) -> bytes:
    return b"".join(
        [
            b"HTTP/1.1 ",
            status,
            b"\r\nServer: bench-origin\r\nContent-Type: application/octet-stream\r\n",
            b"Content-Length: ",
            str(length).encode(),
            b"\r\nCache-Control: ",
            cache_control,
            b"\r\nETag: ",
            etag,
            b"\r\nLast-Modified: ",
            LAST_MODIFIED,
            b"\r\n\r\n",
        ]
    )


OBJECTS: dict[bytes, tuple[bytes, bytes]] = {
    f"/obj/{name}".encode(): (
        _head(b"200 OK", size, b"max-age=3600", f'"obj-{name}"'.encode()),
        bytes(size),
    )
    for name, size in SIZES.items()
}
REVAL_200 = _head(b"200 OK", KIB, b"max-age=0")
REVAL_304 = _head(b"304 Not Modified", 0, b"max-age=0").replace(b"Content-Length: 0\r\n", b"")
MISS_HEAD = _head(b"200 OK", KIB, b"max-age=3600", b'"miss"')
MISS16K_HEAD = _head(b"200 OK", 16 * KIB, b"max-age=3600", b'"miss16k"')
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


_date: tuple[int, bytes] = (0, b"")


def date_field() -> bytes:
    """The Date field line for the current second (caches rely on it to compute ages)."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n")
    return _date[1]


class Origin(asyncio.Protocol):
    served = 0

    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        out: list[bytes] = []
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                break
            request, self.buf = self.buf[:end], self.buf[end + 4 :]
            head, body = self.respond(request)
            cut = head.index(b"\r\n") + 2  # the Date field goes right after the status line
            out += [head[:cut], date_field(), head[cut:], body]
        if out and self.transport is not None:
            self.transport.writelines(out)
        if len(self.buf) > MAX_HEAD and self.transport is not None:
            self.transport.close()

    def respond(self, head: bytes) -> tuple[bytes, bytes]:
        """The response head (without Date) and body for one request head."""
        Origin.served += 1
        line, _, fields = head.partition(b"\r\n")
        method, _, rest = line.partition(b" ")
        target = rest.rpartition(b" ")[0]
        if target.startswith(b"http://"):
            slash = target.find(b"/", 7)
            target = target[slash:] if slash >= 0 else b"/"
        path = target.partition(b"?")[0]
        with_body = method != b"HEAD"
        if path.startswith(b"/miss/"):
            body = (target + b" ").ljust(KIB, b".")[:KIB]
            return MISS_HEAD, body if with_body else b""
        if path.startswith(b"/miss16k/"):
            body = (target + b" ").ljust(16 * KIB, b".")[: 16 * KIB]
            return MISS16K_HEAD, body if with_body else b""
        if path.startswith(b"/reval/"):
            for field in fields.split(b"\r\n"):
                name, _, value = field.partition(b":")
                if name.strip().lower() == b"if-none-match" and ETAG in value:
                    return REVAL_304, b""
            return REVAL_200, bytes(KIB) if with_body else b""
        obj = OBJECTS.get(path)
        if obj is not None:
            return obj[0], obj[1] if with_body else b""
        if path == b"/__stats":
            text = f"requests {Origin.served}\n".encode()
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(text), text
        return NOT_FOUND, b""


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()

    def finish() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, finish)
    server = await loop.create_server(Origin, host, port, backlog=4096, reuse_address=True)
    async with server:
        await stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT to listen on")
    args = parser.parse_args()
    host, _, port = args.listen.rpartition(":")
    runner = uvloop.run if uvloop is not None else asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(serve(host, int(port)))


if __name__ == "__main__":
    main()
