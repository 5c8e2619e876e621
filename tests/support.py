"""Helpers for tests: a scripted origin, cache configs, a proxy client and raw sockets."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import ssl
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import cast

import aiohttp
from aiohttp import web

from harvest_cache.config import Config, from_mapping, load
from harvest_cache.hierarchy.icp import IcpMessage, decode, encode
from harvest_cache.server.app import CacheServer
from tests.loopback import require_loopback_resolver

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MakeCache = Callable[..., Awaitable[CacheServer]]
REPO = Path(__file__).resolve().parents[1]


class Origin:
    """An aiohttp origin on 127.0.0.1 whose routes each test scripts; it counts requests.
    With ``tls`` (a server context) it speaks HTTPS."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.handlers: dict[str, Handler] = {}
        self.hits: Counter[str] = Counter()
        self.requests: list[web.Request] = []
        self.port = 0
        self._runner: web.AppRunner | None = None

    def route(self, path: str, handler: Handler) -> None:
        self.handlers[path] = handler

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.hits[request.path] += 1
        self.requests.append(request)
        handler = self.handlers.get(request.path)
        if handler is None:
            return web.Response(status=404, text="no such test route")
        return await handler(request)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def static(body: bytes, headers: dict[str, str] | None = None, status: int = 200) -> Handler:
    """A handler answering every request with the same response."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, headers=headers or {})

    return handler


def counting(headers: dict[str, str]) -> Handler:
    """A handler whose body names the request number for its path: b"v1", b"v2", ..."""
    calls = 0

    async def handler(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return web.Response(body=b"v%d" % calls, headers=headers)

    return handler


# The least wait for ICP replies in tests. The default (Squid's 5 ms) is too short for a
# loaded machine where the peers share a process, or two cores, with the test suite: an ICP
# reply late by a few milliseconds makes a TIMEOUT_ where a test expects PARENT_HIT. Tests of
# the dynamic wait itself set their own.
ICP_TIMEOUT_MIN = 0.5


def _icp_floor(raw: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """``raw`` with ICP_TIMEOUT_MIN as its least ICP wait, unless it sets one (or a lower
    most)."""
    hierarchy = raw.setdefault("hierarchy", {})
    most = hierarchy.get("icp_timeout_max", ICP_TIMEOUT_MIN)
    assert isinstance(most, int | float)
    hierarchy.setdefault("icp_timeout_min", min(ICP_TIMEOUT_MIN, most))
    return raw


def cache_config(tmp_path: Path, **sections: dict[str, object]) -> Config:
    """A cache config for tests: ephemeral port, store and log under tmp_path, no DNS."""
    raw: dict[str, dict[str, object]] = {
        "server": {"listen": "127.0.0.1:0", "name": "test-cache"},
        "cache": {"dir": str(tmp_path / "cache"), "memory_mb": 64, "disk_mb": 256},
        "log": {"access_log": str(tmp_path / "access.log")},
        "dns": {"hosts_file": "none", "nameservers": ["127.0.0.1:9"]},
        "upstream": {"connect_timeout": 2.0, "read_timeout": 5.0},
        "admin": {"listen": "127.0.0.1:0"},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return from_mapping(_icp_floor(raw))


class ProxyClient:
    """aiohttp through the cache as its proxy."""

    def __init__(self, session: aiohttp.ClientSession, cache: CacheServer) -> None:
        self.session = session
        self.proxy = f"http://127.0.0.1:{cache.address[1]}"

    async def get(self, url: str, **kw: object) -> tuple[aiohttp.ClientResponse, bytes]:
        return await self.request("GET", url, **kw)

    async def request(
        self, method: str, url: str, **kw: object
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        async with self.session.request(method, url, proxy=self.proxy, **kw) as resp:  # type: ignore[arg-type]
            body = await resp.read()
        return resp, body


async def raw_exchange(port: int, data: bytes, *, within: float = 5.0) -> bytes:
    """Send ``data`` on a new connection and read until the proxy closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(within):
            return await reader.read(-1)
    finally:
        writer.close()


# -- helpers for the integration tests of caching, collapsed forwarding, persistence and the
# -- access log (appended; the helpers above are unchanged)

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import email.utils  # noqa: E402
import re  # noqa: E402
import socket  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402


def http_date(when: float) -> str:
    """An IMF-fixdate for the wall-clock time ``when``."""
    return email.utils.formatdate(when, usegmt=True)


def cache_status_members(value: str) -> list[tuple[str, dict[str, str | bool]]]:
    """A Cache-Status field value (RFC 9211) as (cache name, parameters) per list member.

    A bare parameter (``hit``, ``stored``) maps to True. Good enough for the tokens and
    integers Harvest emits; quoted strings holding ``;`` or ``,`` are not expected.
    """
    members: list[tuple[str, dict[str, str | bool]]] = []
    for member in value.split(","):
        name, *params = (part.strip() for part in member.split(";"))
        parsed: dict[str, str | bool] = {}
        for param in params:
            key, sep, val = param.partition("=")
            parsed[key] = val if sep else True
        members.append((name, parsed))
    return members


def our_cache_status(
    resp: aiohttp.ClientResponse, name: str = "test-cache"
) -> dict[str, str | bool]:
    """The parameters of the last Cache-Status member, which must be this cache's."""
    value = resp.headers.get("Cache-Status")
    assert value is not None, f"no Cache-Status in {dict(resp.headers)}"
    last_name, params = cache_status_members(value)[-1]
    assert last_name == name, value
    return params


ACCESS_LOG_LINE = re.compile(
    r"(?P<time>\d+\.\d{3}) +(?P<elapsed>\d+) (?P<client>\S+)"
    r" (?P<result>[A-Z_]+)/(?P<status>\d{3}) (?P<bytes>\d+) (?P<method>\S+) (?P<url>\S+)"
    r" (?P<user>\S+) (?P<hierarchy>[A-Z_]+)/(?P<peer>\S+) (?P<content_type>\S+)"
)


@dataclasses.dataclass(frozen=True)
class LogLine:
    """One access.log line in Squid's native format, split into its ten fields."""

    time: float
    elapsed_ms: int
    client: str
    result: str
    status: int
    bytes: int
    method: str
    url: str
    user: str
    hierarchy: str
    peer: str
    content_type: str


def parse_access_log(text: str) -> list[LogLine]:
    """Every line must match Squid's native format exactly (10 space-separated fields)."""
    lines: list[LogLine] = []
    for raw in text.splitlines():
        assert len(raw.split()) == 10, f"not 10 fields: {raw!r}"
        m = ACCESS_LOG_LINE.fullmatch(raw)
        assert m is not None, f"not Squid's native format: {raw!r}"
        g = m.groupdict()
        lines.append(
            LogLine(
                float(g["time"]),
                int(g["elapsed"]),
                g["client"],
                g["result"],
                int(g["status"]),
                int(g["bytes"]),
                g["method"],
                g["url"],
                g["user"],
                g["hierarchy"],
                g["peer"],
                g["content_type"],
            )
        )
    return lines


async def stop_and_read_log(cache: CacheServer) -> list[LogLine]:
    """Stop ``cache`` (which flushes its batched access log) and parse the log file."""
    await cache.stop(1.0)
    path = cache.config.log.access_log
    assert path is not None
    return parse_access_log(await asyncio.to_thread(path.read_text, "ascii"))


@contextlib.asynccontextmanager
async def proxy_client(cache: CacheServer) -> AsyncIterator[ProxyClient]:
    """A ProxyClient with its own session, for caches started with make_cache."""
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield ProxyClient(session, cache)


def free_port() -> int:
    """An ephemeral port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that was free a moment ago (for ICP sockets)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_for_port(port: int, *, within: float = 15.0) -> None:
    """Wait until 127.0.0.1:``port`` accepts connections (polling, bounded by ``within``)."""
    async with asyncio.timeout(within):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return


async def wait_until(predicate: Callable[[], bool], *, within: float = 5.0) -> None:
    """Poll ``predicate`` every 10 ms until it holds; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - the state polled has no event to wait on
            await asyncio.sleep(0.01)


# -- raw HTTP on sockets, for framing, keep-alive, pipelining and malformed input --------------


class RawResponse:
    """One response as read off a raw socket: status, fields in order, decoded body."""

    def __init__(
        self, status: int, head: bytes, fields: list[tuple[str, str]], body: bytes, chunked: bool
    ) -> None:
        self.status = status
        self.head = head
        self.fields = fields
        self.body = body
        self.chunked = chunked

    def get(self, name: str) -> str | None:
        values = [v for n, v in self.fields if n.lower() == name.lower()]
        return ", ".join(values) if values else None

    def has(self, name: str) -> bool:
        return any(n.lower() == name.lower() for n, _ in self.fields)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"<RawResponse {self.status} {self.fields!r} body={self.body[:80]!r}>"


def request_bytes(
    method: str,
    url: str,
    *,
    version: str = "1.1",
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
) -> bytes:
    """A request head in absolute form (Host from the URL unless given) plus ``body``."""
    fields = list(headers or [])
    if not any(n.lower() == "host" for n, _ in fields):
        authority = url.split("://", 1)[-1].split("/", 1)[0]
        fields.insert(0, ("Host", authority))
    if body and not any(n.lower() in ("content-length", "transfer-encoding") for n, _ in fields):
        fields.append(("Content-Length", str(len(body))))
    lines = [f"{method} {url} HTTP/{version}", *(f"{n}: {v}" for n, v in fields)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def read_head(reader: asyncio.StreamReader) -> tuple[int, bytes, list[tuple[str, str]]]:
    """A response head: status, the raw bytes and the fields."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields.append((name.strip(), value.strip()))
    return status, head, fields


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body, decoded; the trailer section is read and dropped."""
    body = bytearray()
    for _ in range(1_000_000):
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return bytes(body)
        data = await reader.readexactly(size + 2)
        assert data.endswith(b"\r\n"), f"chunk not followed by CRLF: {data[-8:]!r}"
        body += data[:-2]
    raise AssertionError("too many chunks")


async def read_response(
    reader: asyncio.StreamReader, *, method: str = "GET", within: float = 5.0
) -> RawResponse:
    """Read one complete response (interim 1xx responses skipped), framed as it says."""
    async with asyncio.timeout(within):
        while True:
            status, head, fields = await read_head(reader)
            if not (100 <= status < 200):
                break
        resp = RawResponse(status, head, fields, b"", False)
        te = resp.get("Transfer-Encoding")
        length = resp.get("Content-Length")
        if method == "HEAD" or status in (204, 304):
            return resp
        if te is not None:
            assert te.lower() == "chunked", f"unexpected Transfer-Encoding {te!r}"
            resp.chunked = True
            resp.body = await read_chunked(reader)
        elif length is not None:
            resp.body = await reader.readexactly(int(length))
        else:
            resp.body = await reader.read(-1)
        return resp


async def closed_by_peer(reader: asyncio.StreamReader, within: float = 3.0) -> bool:
    """True if the peer closes (EOF or reset) within ``within`` seconds with no more data."""
    try:
        async with asyncio.timeout(within):
            return await reader.read(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


async def open_proxy(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)


RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A TCP server on 127.0.0.1 whose every connection runs ``handler``; for origins that
    misbehave on purpose. It counts connections and closes them all on ``stop``."""

    def __init__(self, handler: RawHandler) -> None:
        self.handler = handler
        self.port = 0
        self.accepted = 0
        self.closed = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # cancelled only by stop(), which waits for it: nothing else awaits this task
        finally:
            self.closed += 1
            self._writers.discard(writer)
            self._tasks.discard(task)  # type: ignore[arg-type]
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=1.0)
        if self._server is not None:
            await self._server.wait_closed()


async def read_request_head(reader: asyncio.StreamReader) -> tuple[str, list[tuple[str, str]]]:
    """For RawServer handlers: the request line and the fields of the next request."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].decode("latin-1").split("\r\n")
    fields = [(n.strip(), v.strip()) for n, _, v in (line.partition(":") for line in lines[1:])]
    return lines[0], fields


# -- configuration files for caches run as programs ---------------------------------------------


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # (a TOML basic string for the plain text used here)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def toml(sections: Mapping[str, Mapping[str, object]]) -> str:
    """A TOML document: one table per section; a list of tables as ``[[section.key]]``."""
    out: list[str] = []
    for name, table in sections.items():
        out.append(f"[{name}]")
        arrays: list[tuple[str, list[Mapping[str, object]]]] = []
        for key, value in table.items():
            if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
                arrays.append((key, value))
            else:
                out.append(f"{key} = {toml_value(value)}")
        for key, items in arrays:
            for item in items:
                out.append(f"[[{name}.{key}]]")
                out.extend(f"{k} = {toml_value(v)}" for k, v in item.items())
        out.append("")
    return "\n".join(out)


def write_config(path: Path, sections: Mapping[str, Mapping[str, object]]) -> None:
    # Write then rename, so that a reload never reads half a file.
    part = path.with_suffix(".part")
    part.write_text(toml(sections), encoding="utf-8")
    part.replace(path)


def program_config(
    home: Path, listen: str, admin_listen: str, token: str, **sections: Mapping[str, object]
) -> dict[str, dict[str, object]]:
    """A cache's configuration for running it as a program: loopback addresses, its own
    store and access log under ``home``, no DNS, no digests; ``sections`` merged in."""
    raw: dict[str, dict[str, object]] = {
        "server": {"listen": listen, "name": "program-cache"},
        "cache": {"dir": str(home / "cache"), "memory_mb": 64, "disk_mb": 256},
        "log": {"access_log": str(home / "access.log")},
        "dns": {"hosts_file": "none", "nameservers": ["127.0.0.1:9"]},
        "upstream": {"connect_timeout": 2.0, "read_timeout": 5.0},
        "admin": {"listen": admin_listen, "token": token},
        "hierarchy": {"digests": False},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return _icp_floor(raw)


async def promtool_check(text: str) -> None:
    """``promtool check metrics`` on an exposition: exit status 0 and not a word said.
    Without promtool the test fails: it is part of the test environment (scripts/test.sh)."""
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    assert os.access(promtool, os.X_OK), f"promtool is missing ({promtool})"
    proc = await asyncio.create_subprocess_exec(
        promtool,
        "check",
        "metrics",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(10):
            out, err = await proc.communicate(text.encode())
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    said = (out + err).decode("utf-8", "replace").strip()
    assert proc.returncode == 0, f"promtool exit {proc.returncode}: {said}"
    assert said == "", f"promtool complained: {said}"


# -- ICP ----------------------------------------------------------------------------------------


class Querier(asyncio.DatagramProtocol):
    """A peer cache's ICP socket: sends datagrams, keeps what comes back and from where."""

    def __init__(self) -> None:
        self.replies: asyncio.Queue[tuple[bytes, tuple[str, int]]] = asyncio.Queue()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports implement DatagramTransport without subclassing it)
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.replies.put_nowait((data, addr))

    async def ask(self, port: int, data: bytes, within: float = 2.0) -> tuple[bytes, int] | None:
        """Send ``data`` to the cache's ICP port; the reply and the port it came from, or
        None if nothing came within ``within`` seconds."""
        assert self.transport is not None
        self.transport.sendto(data, ("127.0.0.1", port))
        try:
            async with asyncio.timeout(within):
                reply, addr = await self.replies.get()
        except TimeoutError:
            return None
        return reply, addr[1]

    async def answer(self, port: int, message: IcpMessage, within: float = 2.0) -> IcpMessage:
        """The reply to ``message``, which must come from the port it was sent to."""
        got = await self.ask(port, encode(message), within)
        assert got is not None, "no ICP reply"
        reply, source = got
        assert source == port  # from the socket the query went to, as Squid requires
        return decode(reply)


@contextlib.asynccontextmanager
async def udp_querier() -> AsyncIterator[Querier]:
    """A peer cache's ICP socket on loopback, closed afterwards (an open one would hang the
    loop's shutdown)."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(Querier, local_addr=("127.0.0.1", 0))
    try:
        yield protocol
    finally:
        transport.close()


def cache_argv(config: Path, *args: str) -> list[str]:
    """``python -m harvest_cache --config FILE ARGS``, once the file is seen to give the cache
    a resolver on loopback (reads the file: call it off the event loop)."""
    require_loopback_resolver(load(config).dns)
    return [sys.executable, "-m", "harvest_cache", "--config", str(config), *args]


def spawn(config: Path, stderr: Path) -> subprocess.Popen[bytes]:
    """``python -m harvest_cache --config FILE``, its stderr to the file ``stderr``."""
    argv = cache_argv(config)
    with stderr.open("wb") as err:
        return subprocess.Popen(
            argv,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


async def run_module(module: str, *args: str, within: float = 60.0) -> tuple[int, str, str]:
    """Run ``python -m MODULE ARGS`` from the repository; its exit status, stdout and
    stderr. Killed (and the test failed) if it runs longer than ``within`` seconds."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), within)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@contextlib.contextmanager
def no_collector() -> Iterator[None]:
    """The garbage collector off (after one collection), so that objects only it would free
    stay to be seen; what a ``gc.collect()`` in the block finds is kept in ``gc.garbage``."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
