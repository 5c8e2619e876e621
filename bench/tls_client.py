"""A load client for HTTPS through a forward proxy, as a browser sends it: CONNECT, TLS inside
the tunnel (trusting the proxy's CA), then HTTP/1.1 requests. wrk cannot open tunnels.

Modes:
  keep-alive  CONNECTIONS tunnels, each sending GET PATH again as soon as an answer is read,
              for SECONDS; requests answered, and their latency percentiles.
  tunnels     CONNECTIONS workers, each opening a new tunnel, handshake and one GET PATH,
              then closing it, for SECONDS; tunnels completed and their whole time.
Prints one line ``TLSJSON {...}``. Every answer must be a 200 of SIZE bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import time

import uvloop


class Exchange(asyncio.Protocol):
    """One request at a time on a TLS connection: the answer's head and SIZE body bytes."""

    def __init__(self, request: bytes, size: int) -> None:
        self.request = request
        self.size = size
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.writer: asyncio.StreamWriter | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end >= 0 and len(self.buffer) >= end + 4 + self.size:
            head = bytes(self.buffer[:end])
            del self.buffer[: end + 4 + self.size]
            waiter, self.waiter = self.waiter, None
            if waiter is not None and not waiter.done():
                if not head.startswith(b"HTTP/1.1 200"):
                    waiter.set_exception(RuntimeError(head.split(b"\r\n")[0].decode()))
                else:
                    waiter.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))

    async def ask(self) -> None:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(self.request)
        await self.waiter


async def open_tunnel(
    proxy: int, target: str, context: ssl.SSLContext, name: str, request: bytes, size: int
) -> tuple[asyncio.Transport, Exchange]:
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy)
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"CONNECT answered {head[:40]!r}")
    transport = writer.transport
    protocol = Exchange(request, size)
    protocol.writer = writer  # (a StreamWriter let go of closes its transport)
    tls = await loop.start_tls(transport, protocol, context, server_hostname=name)
    assert tls is not None
    protocol.connection_made(tls)
    return tls, protocol  # type: ignore[return-value]


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    if not values:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0}
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)}


async def main(args: argparse.Namespace) -> dict[str, object]:
    context = ssl.create_default_context(cafile=args.ca)
    context.set_alpn_protocols(["http/1.1"])
    if args.no_tickets:
        context.options |= ssl.OP_NO_TICKET
    name = args.name or args.target.rsplit(":", 1)[0]
    request = f"GET {args.path} HTTP/1.1\r\nHost: {args.target}\r\n\r\n".encode()
    latencies: list[float] = []
    done = 0
    errors = 0
    deadline = time.monotonic() + args.seconds

    async def keep_alive() -> None:
        nonlocal done
        tls, exchange = await open_tunnel(
            args.proxy, args.target, context, name, request, args.size
        )
        try:
            while time.monotonic() < deadline:
                began = time.perf_counter()
                await exchange.ask()
                latencies.append(time.perf_counter() - began)
                done += 1
        finally:
            tls.close()

    async def tunnels() -> None:
        nonlocal done, errors
        while time.monotonic() < deadline:
            began = time.perf_counter()
            try:
                tls, exchange = await open_tunnel(
                    args.proxy, args.target, context, name, request, args.size
                )
                await exchange.ask()
                tls.close()
            except (OSError, RuntimeError, ssl.SSLError):
                errors += 1
                continue
            latencies.append(time.perf_counter() - began)
            done += 1

    started = time.monotonic()
    work = keep_alive if args.mode == "keep-alive" else tunnels
    await asyncio.gather(*(work() for _ in range(args.connections)))
    seconds = time.monotonic() - started
    return {
        "requests": done,
        "errors": errors,
        "seconds": seconds,
        "latency_ms": {k: v * 1000 for k, v in percentiles(latencies).items()},
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--proxy", type=int, required=True, help="the proxy's port on 127.0.0.1")
    p.add_argument("--target", required=True, help="host:port to CONNECT to")
    p.add_argument("--name", help="the TLS server name (default: the target's host)")
    p.add_argument("--path", required=True)
    p.add_argument("--size", type=int, required=True, help="the answers' body size")
    p.add_argument("--ca", required=True, help="the proxy's CA (PEM) to trust")
    p.add_argument("--mode", choices=("keep-alive", "tunnels"), default="keep-alive")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--no-tickets", action="store_true", help="never resume a TLS session")
    print("TLSJSON " + json.dumps(uvloop.run(main(p.parse_args()))), flush=True)
