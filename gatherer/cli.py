"""``harvest-gather``: run a gathering pass, export or serve the records, show one record.

Exit status: 0 done, 1 a run-time failure (database, network set-up, no such record), 2 a bad
configuration or command line.

Signals: SIGTERM or SIGINT stops ``serve`` cleanly, with status 0 (that is how a service is
meant to end). A ``run`` stopped by one closes everything it opened (summarizers, the database:
what was stored so far is kept), prints its summary so far and exits with 128 + the signal
number, 143 for SIGTERM and 130 for SIGINT, as a shell reports a killed command, so scripts
can tell an incomplete run from a finished one. A second signal while stopping takes the
signal's default action.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import signal
import sys
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import uvloop
from rich.console import Console
from rich.live import Live
from rich.logging import RichHandler
from rich.table import Table

from gatherer.config import GathererConfig, load
from gatherer.errors import ConfigError, GathererError
from gatherer.export import export
from gatherer.metrics import RunStats
from gatherer.registration import registered
from gatherer.runner import gather, open_database
from gatherer.service import serve
from harvest_common.software import software_version
from harvest_common.soif import encode
from harvest_common.soif.transport import compressed
from harvest_common.tasks import running

T = TypeVar("T")

DEFAULT_CONFIG = "gatherer.cf"
# How often the progress display redraws while gathering.
REFRESH_SECONDS = 0.5
# The signals that stop a run or the service cleanly.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _since(text: str) -> float:
    """``--since``: epoch seconds, finite and not negative."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"expected epoch seconds, e.g. 1764503554.123456; got {text!r}"
        )
    return value


def _listen(text: str) -> tuple[str, int]:
    """``--listen``: HOST:PORT, the host possibly a bracketed IPv6 address."""
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (port 0-65535); got {text!r}")
    return host, int(port)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="harvest-gather",
        description="Harvest's Gatherer: crawl providers through a cache, summarize into SOIF.",
    )
    commands = top.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="gather once from the configured roots and leaves")
    run.add_argument("config", type=Path, help="gatherer.cf (Harvest form) or a .toml file")
    run.add_argument("--quiet", action="store_true", help="no live progress display")
    run.add_argument(
        "--refresh",
        action="store_true",
        help="check every stored record again now, not only those due for refresh",
    )
    check = commands.add_parser("check-config", help="check a configuration and exit")
    check.add_argument("config", type=Path, help="gatherer.cf (Harvest form) or a .toml file")
    for name, help_text in (
        ("export", "write the records as a SOIF stream"),
        ("serve", "serve the records to brokers over HTTP (gatherd)"),
        ("show", "print one record as SOIF"),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument(
            "-c", "--config", type=Path, default=Path(DEFAULT_CONFIG), help="configuration file"
        )
        if name == "export":
            command.add_argument(
                "--since", type=_since, default=None, help="only changes after this Update-Time"
            )
            command.add_argument(
                "--compress", choices=("none", "gzip", "zstd"), default="none", help="encoding"
            )
            command.add_argument("-o", "--output", type=Path, help="file (default stdout)")
        elif name == "serve":
            command.add_argument(
                "--listen",
                type=_listen,
                default=None,
                help="HOST:PORT (default 127.0.0.1:Gatherer-Port)",
            )
        else:
            command.add_argument("url", help="the record's URL")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config_path: Path = args.config
    try:
        config = load(config_path)
    except ConfigError as error:
        for problem in error.problems:
            print(f"harvest-gather: {problem}", file=sys.stderr)
        return 2
    if args.command == "check-config":
        roots, leaves = len(config.root_nodes), len(config.leaf_nodes)
        print(
            f"{config_path}: gatherer {config.name}, {roots} root node(s), {leaves} leaf"
            f" node(s), records in {config.data_directory}"
        )
        return 0
    try:
        if args.command == "run":
            return uvloop.run(_run(config, quiet=args.quiet, refresh=args.refresh))
        if args.command == "export":
            return uvloop.run(_export(config, args.since, args.compress, args.output))
        if args.command == "serve":
            return uvloop.run(_serve(config, args.listen))
        return uvloop.run(_show(config, args.url))
    except (GathererError, OSError) as error:
        # OSError: a port already taken, a directory or output file that cannot be written.
        print(f"harvest-gather: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return 128 + signal.SIGINT


class _Stopped(Exception):
    """SIGTERM or SIGINT cancelled the work; ``signum`` says which."""

    def __init__(self, signum: signal.Signals) -> None:
        self.signum = signum
        super().__init__(signum.name)


async def _until_stopped(work: Coroutine[Any, Any, T]) -> T:
    """``work``'s result; raises _Stopped once a stop signal has cancelled it and it has
    finished unwinding (its ``finally`` blocks and context managers closing what it opened)."""
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(work)
    received: list[signal.Signals] = []

    def restore() -> None:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)

    def stop(signum: signal.Signals) -> None:
        received.append(signum)
        restore()  # the next signal acts as usual: a way out should stopping hang
        task.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    try:
        result = await task
    except asyncio.CancelledError:
        if not received:
            raise  # cancelled from outside, not by a signal
        raise _Stopped(received[0]) from None
    finally:
        restore()
    if received:  # the work caught the cancellation and returned: it was still cut short
        raise _Stopped(received[0])
    return result


def progress_table(stats: RunStats) -> Table:
    table = Table(title="Harvest gatherer", show_header=False)
    rows = (
        ("pages/s", f"{stats.rate():.1f}"),
        ("fetched", f"{stats.fetched} ({stats.bytes / 1e6:.1f} MB)"),
        ("unchanged", f"{stats.not_modified + stats.unchanged + stats.fresh}"),
        ("stored", str(stats.stored)),
        ("queue", f"{stats.queued} queued, {stats.active} fetching"),
        ("hosts", str(stats.hosts)),
        ("errors", str(stats.errors)),
        ("elapsed", f"{stats.elapsed:.1f} s"),
    )
    for name, value in rows:
        table.add_row(name, value)
    return table


async def _run(config: GathererConfig, *, quiet: bool, refresh: bool) -> int:
    stats = RunStats()
    console = Console(stderr=True)
    status = 0
    try:
        if quiet or not console.is_terminal:
            await _until_stopped(gather(config, stats, refresh=refresh))
        else:
            live = Live(progress_table(stats), console=console, transient=True)
            with live, _logging_to(console):
                async with _redrawing(live, stats):
                    await _until_stopped(gather(config, stats, refresh=refresh))
    except _Stopped as stop:
        print(f"harvest-gather: run stopped by {stop.signum.name}, incomplete", file=sys.stderr)
        status = 128 + stop.signum
    for line in stats.lines():
        print(line)
    return status


@contextlib.contextmanager
def _logging_to(console: Console) -> Iterator[None]:
    """Log through ``console`` while the live display holds the terminal: a line written
    straight to stderr would tear the display; the console prints it above."""
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [RichHandler(console=console, show_path=False)]
    try:
        yield
    finally:
        root.handlers = saved


@contextlib.asynccontextmanager
async def _redrawing(live: Live, stats: RunStats) -> AsyncIterator[None]:
    async def redraw() -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            if stats.started:  # the crawl updates it per finished job: keep it moving between
                stats.elapsed = time.monotonic() - stats.started
            live.update(progress_table(stats))

    async with running(redraw(), "progress redraw"):
        yield


async def _export(
    config: GathererConfig, since: float | None, encoding: str, output: Path | None
) -> int:
    coding = "identity" if encoding == "none" else encoding
    async with (
        open_database(config) as db,
        contextlib.aclosing(compressed(export(db, since), coding)) as stream,
    ):
        # Writes go to a thread: a slow reader on the pipe must not stall the event loop.
        if output is None:
            async for chunk in stream:
                await asyncio.to_thread(sys.stdout.buffer.write, chunk)
            await asyncio.to_thread(sys.stdout.buffer.flush)
        else:
            handle = await asyncio.to_thread(output.open, "wb")
            try:
                async for chunk in stream:
                    await asyncio.to_thread(handle.write, chunk)
            finally:
                await asyncio.to_thread(handle.close)
    return 0


async def _serve(config: GathererConfig, listen: tuple[str, int] | None) -> int:
    host, port = listen if listen is not None else ("127.0.0.1", config.port)
    # A stop signal is how the service is meant to end: a clean exit, status 0.
    with contextlib.suppress(_Stopped):
        await _until_stopped(_serving(config, host, port))
    return 0


async def _serving(config: GathererConfig, host: str, port: int) -> None:
    version = f"harvest-gather {await asyncio.to_thread(software_version)}"
    async with (
        open_database(config) as db,
        serve(db, host, port, config.name, interval=config.gather_interval) as bound,
        registered(config, (host, bound), version),
    ):
        where = f"[{host}]" if ":" in host else host
        print(f"serving {config.name} records on http://{where}:{bound}/records", flush=True)
        await asyncio.Event().wait()


async def _show(config: GathererConfig, url: str) -> int:
    async with open_database(config) as db:
        stored = await db.get(url)
    if stored is None:
        print(f"harvest-gather: no record for {url}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(encode(stored.record))
    sys.stdout.buffer.flush()
    return 0
