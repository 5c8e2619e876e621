"""``harvest-cache``: run the caching proxy."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from harvest_cache import __version__, control, heap
from harvest_cache.bump import commands
from harvest_cache.config import Config, load, reference
from harvest_cache.errors import HarvestCacheError
from harvest_cache.hierarchy.peers import peer_flag
from harvest_cache.registration import registered
from harvest_cache.server.app import CacheServer
from harvest_cache.workers import Channel, Supervisor, worker_argv
from harvest_common.errors import ConfigError

log = logging.getLogger("harvest_cache")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harvest-cache", description="Harvest's HTTP/1.1 caching forward proxy."
    )
    p.add_argument("--config", type=Path, help="TOML configuration file")
    p.add_argument("--listen", metavar="HOST:PORT", help="listen address (default 127.0.0.1:3128)")
    p.add_argument(
        "--admin-listen",
        metavar="HOST:PORT",
        help="admin listener for /metrics and the cache manager (default 127.0.0.1:3129; none)",
    )
    p.add_argument("--cache-dir", metavar="DIR", help="disk tier directory (default ./var/cache)")
    p.add_argument("--memory-mb", type=int, metavar="N", help="memory tier size in MiB")
    p.add_argument("--disk-mb", type=int, metavar="N", help="disk tier size in MiB")
    p.add_argument(
        "--icp-port",
        type=int,
        metavar="N",
        help="UDP port for ICP (default 3130 with peers; 0: off)",
    )
    p.add_argument(
        "--peer",
        action="append",
        type=_peer_flag,
        metavar="ROLE:HOST:HTTP_PORT[:ICP_PORT]",
        help="a parent or sibling cache (repeatable; replaces the file's peers; ICP port 3130"
        " if not given, 0: none)",
    )
    p.add_argument("--workers", type=int, metavar="N", help="worker processes (default 1)")
    # (set by the supervisor of several workers on each: its control channel's descriptor)
    p.add_argument("--worker-channel", type=int, help=argparse.SUPPRESS)
    p.add_argument(
        "--check-config", action="store_true", help="validate the configuration and exit"
    )
    p.add_argument(
        "--config-reference", action="store_true", help="print every setting as Markdown and exit"
    )
    p.add_argument("--version", action="version", version=f"harvest-cache {__version__}")
    return p


class JsonLines(logging.Formatter):
    """The error log as one JSON object per line, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(level: str, form: str) -> None:
    handler = logging.StreamHandler()
    if form == "json":
        formatter: logging.Formatter = JsonLines()
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler])


def _peer_flag(v: str) -> dict[str, Any]:
    try:
        return peer_flag(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Command-line values, checked by the same rules as the file's."""
    out: dict[str, dict[str, Any]] = {}
    for flag, section, key in (
        ("listen", "server", "listen"),
        ("cache_dir", "cache", "dir"),
        ("memory_mb", "cache", "memory_mb"),
        ("disk_mb", "cache", "disk_mb"),
        ("icp_port", "icp", "port"),
        ("admin_listen", "admin", "listen"),
        ("workers", "server", "workers"),
    ):
        value = getattr(args, flag)
        if value is not None:
            out.setdefault(section, {})[key] = value
    if args.peer:
        out.setdefault("hierarchy", {})["peers"] = args.peer
    return out


async def _reload(server: CacheServer) -> None:
    with contextlib.suppress(ConfigError):  # (logged, and the running configuration kept)
        await server.reload_config()


async def serve(
    config: Config, loader: Callable[[], Config], channel_fd: int | None = None
) -> None:
    """Run the cache until SIGTERM or SIGINT; SIGHUP reloads the configuration.
    ``channel_fd``: this process is one of several workers, and that its supervisor."""
    server = await CacheServer.start(config, loader)
    channel = None
    if channel_fd is not None:
        channel = await Channel.open(channel_fd, server.store.dropped)
        server.store.sharers = channel
        if server.admin is not None:
            channel.send({"admin": server.admin.address[1]})
    heap.tune()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: server.tasks.spawn(_reload(server), "reload"))
    # After logrotate moved the access log away (Squid's -k rotate sends the same).
    loop.add_signal_handler(signal.SIGUSR1, server.access_log.reopen)
    # With several workers, their supervisor registers the cache (once).
    admin_port = None if server.admin is None else server.admin.address[1]
    registration = (
        registered(config, server.name, server.address, admin_port)
        if channel is None
        else contextlib.nullcontext()
    )
    try:
        async with registration, asyncio.TaskGroup() as group:
            keeper = group.create_task(heap.keep(), name="heap")
            await stop.wait()
            keeper.cancel()
        log.info("stopping: finishing requests in progress")
    finally:
        await server.stop()
        if channel is not None:
            channel.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("purge", "reload"):
        return control.main(argv)
    if argv and argv[0] == "ca":
        return commands.main(argv[1:])
    args = parser().parse_args(argv)
    if args.config_reference:
        sys.stdout.write(reference())
        return 0
    try:
        config = load(args.config, overrides(args))
    except ConfigError as e:
        for problem in e.problems:
            print(f"harvest-cache: {problem}", file=sys.stderr)
        return 2
    if args.check_config:
        print("configuration OK")
        return 0
    setup_logging(config.log.level, config.log.format)

    def loader() -> Config:
        return load(args.config, overrides(args))

    try:
        if args.worker_channel is None and config.server.workers > 1:
            supervisor = Supervisor(config, worker_argv(argv), config.server.workers)
            uvloop.run(supervisor.run())
        else:
            uvloop.run(serve(config, loader, args.worker_channel))
    except ConfigError as e:
        for problem in e.problems:
            print(f"harvest-cache: {problem}", file=sys.stderr)
        return 2
    except (HarvestCacheError, OSError) as e:
        print(f"harvest-cache: {e}", file=sys.stderr)
        return 1
    return 0
