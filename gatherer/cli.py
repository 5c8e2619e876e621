"""``harvest-gather``: run a gathering pass, export or serve the records, show one record.

Exit status: 0 done, 1 a run-time failure (database, network set-up), 2 a bad configuration
or command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import uvloop
from rich.console import Console
from rich.live import Live
from rich.table import Table

from gatherer.config import GathererConfig, load
from gatherer.errors import ConfigError, GathererError
from gatherer.export import compressed, export
from gatherer.metrics import RunStats
from gatherer.runner import gather, open_database
from gatherer.service import serve
from gatherer.soif import encode

DEFAULT_CONFIG = "gatherer.cf"
# How often the progress display redraws while gathering.
REFRESH_SECONDS = 0.5


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="harvest-gather",
        description="Harvest's Gatherer: crawl providers through a cache, summarize into SOIF.",
    )
    commands = top.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="gather once from the configured roots and leaves")
    run.add_argument("config", type=Path, help="gatherer.cf (Harvest form) or a .toml file")
    run.add_argument("--quiet", action="store_true", help="no live progress display")
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
                "--since", type=float, default=None, help="only changes after this Update-Time"
            )
            command.add_argument(
                "--compress", choices=("none", "gzip", "zstd"), default="none", help="encoding"
            )
            command.add_argument("-o", "--output", type=Path, help="file (default stdout)")
        elif name == "serve":
            command.add_argument(
                "--listen", default=None, help="HOST:PORT (default 127.0.0.1:Gatherer-Port)"
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
    try:
        if args.command == "run":
            return uvloop.run(_run(config, quiet=args.quiet))
        if args.command == "export":
            return uvloop.run(_export(config, args.since, args.compress, args.output))
        if args.command == "serve":
            return uvloop.run(_serve(config, args.listen))
        return uvloop.run(_show(config, args.url))
    except GathererError as error:
        print(f"harvest-gather: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


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


async def _run(config: GathererConfig, *, quiet: bool) -> int:
    stats = RunStats()
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        await gather(config, stats)
    else:
        with Live(progress_table(stats), console=console, transient=True) as live:
            async with _redrawing(live, stats):
                await gather(config, stats)
    for line in stats.lines():
        print(line)
    return 0


@contextlib.asynccontextmanager
async def _redrawing(live: Live, stats: RunStats) -> AsyncIterator[None]:
    async def redraw() -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            live.update(progress_table(stats))

    task = asyncio.create_task(redraw())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _export(
    config: GathererConfig, since: float | None, encoding: str, output: Path | None
) -> int:
    coding = "identity" if encoding == "none" else encoding
    async with open_database(config) as db:
        stream = compressed(export(db, since), coding)
        if output is None:
            async for chunk in stream:
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        else:
            handle = await asyncio.to_thread(output.open, "wb")
            try:
                async for chunk in stream:
                    await asyncio.to_thread(handle.write, chunk)
            finally:
                await asyncio.to_thread(handle.close)
    return 0


async def _serve(config: GathererConfig, listen: str | None) -> int:
    host, port = "127.0.0.1", config.port
    if listen is not None:
        host, _, text = listen.rpartition(":")
        if not host or not text.isdigit():
            print(f"harvest-gather: --listen {listen!r}: expected HOST:PORT", file=sys.stderr)
            return 2
        port = int(text)
    async with open_database(config) as db, serve(db, host, port, config.name) as bound:
        print(f"serving {config.name} records on http://{host}:{bound}/records", flush=True)
        await asyncio.Event().wait()
    return 0


async def _show(config: GathererConfig, url: str) -> int:
    async with open_database(config) as db:
        stored = await db.get(url)
    if stored is None:
        print(f"harvest-gather: no record for {url}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(encode(stored.record))
    sys.stdout.buffer.flush()
    return 0
