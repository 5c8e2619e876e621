"""Turns the configured RootNodes and LeafNodes into crawl starts, running the programs that
generate them: ``|program`` lines (one URL per output line) and ``Enumeration=`` programs (the
root URL on standard input, nine-field RootNode lines on standard output).

A program that cannot start is logged and skipped; one that exits with an error is logged and
what it printed is still used (it may have failed part-way); one that hangs is killed and its
output ignored; a bad output line is logged and skipped. The other roots are always gathered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from gatherer.config import (
    GathererConfig,
    LeafNode,
    LeafProgram,
    RootNode,
    RootProgram,
    parse_enumeration_line,
)
from gatherer.crawl import Root
from gatherer.errors import ConfigError
from gatherer.frontier import Scope
from gatherer.urls import access_method

log = logging.getLogger(__name__)

# A generating program gets this long, and this much output, before it is given up on.
PROGRAM_TIMEOUT = 120.0
PROGRAM_OUTPUT_LIMIT = 16 * 1024 * 1024
ALL_METHODS = frozenset({"HTTP", "FTP", "GOPHER", "FILE"})


def scope_of(node: RootNode) -> Scope:
    """The frontier's limits for one RootNode; the root's own access method always counts."""
    own = access_method(node.url)
    return Scope(
        url_max=node.url_max,
        host_max=node.host_max,
        depth=node.depth,
        access=node.access | ({own} if own else set()),
        delay=node.delay,
        url_filter=node.url_filter.allows if node.url_filter is not None else None,
        host_filter=node.host_filter.allows if node.host_filter is not None else None,
        sitemaps=node.sitemaps,
    )


def leaf_scope(delay: float) -> Scope:
    """A leaf is fetched and summarized alone: one URL, no links followed; a sitemap or feed
    too (enumerating one from its entries is what RootNodes are for)."""
    return Scope(url_max=1, host_max=1, depth=1, access=ALL_METHODS, delay=delay, listings=False)


async def expand(config: GathererConfig) -> list[Root]:
    """Every crawl start of the configuration, roots first, in configuration order."""
    top = config.top_directory
    leaf = leaf_scope(config.access_delay)
    made: list[RootNode | LeafNode | None] = []
    for node in config.root_nodes:
        if isinstance(node, RootProgram):
            for url, source in await _lines(node.command, node.source, top):
                made.append(_node(partial(node.root, url, source=source)))
        elif node.enumeration is not None:
            # The program reads the root's URL and prints RootNode lines to gather instead.
            stdin = node.url.encode() + b"\n"
            for line, source in await _lines(node.enumeration, node.source, top, stdin=stdin):
                # In a thread: the line may name filter files, which are read.
                parse = partial(parse_enumeration_line, line, source=source, base=top)
                made.append(await asyncio.to_thread(_node, parse))
        else:
            made.append(node)
    for leaf_node in config.leaf_nodes:
        if isinstance(leaf_node, LeafProgram):
            for url, source in await _lines(leaf_node.command, leaf_node.source, top):
                made.append(_node(partial(leaf_node.leaf, url, source=source)))
        else:
            made.append(leaf_node)
    return [
        Root(node.url, leaf if isinstance(node, LeafNode) else scope_of(node))
        for node in made
        if node is not None
    ]


def _node(make: Callable[[], RootNode | LeafNode]) -> RootNode | LeafNode | None:
    """What ``make()`` builds from a program's output line; None (logged) for a bad line."""
    try:
        return make()
    except ConfigError as error:
        for problem in error.problems:
            log.warning("skipped: %s", problem)
        return None


async def _lines(
    command: Sequence[str], source: str, cwd: Path, *, stdin: bytes = b""
) -> list[tuple[str, str]]:
    """The non-empty output lines of ``command``, each with a source for messages."""
    name = command[0] if command else "?"
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=PROGRAM_OUTPUT_LIMIT,
        )
    except OSError as error:
        log.warning("%s: cannot run %s: %s", source, name, error.strerror)
        return []
    try:
        async with asyncio.timeout(PROGRAM_TIMEOUT):
            output = await _communicate(process, stdin)
    except TimeoutError:
        process.kill()
        await process.wait()
        log.warning(
            "%s: %s ran longer than %g s; its output is ignored", source, name, PROGRAM_TIMEOUT
        )
        return []
    if process.returncode != 0:
        log.warning("%s: %s exited with status %s", source, name, process.returncode)
    text = output[:PROGRAM_OUTPUT_LIMIT].decode("utf-8", "replace")
    return [
        (line.strip(), f"{source}: {name} output line {number}")
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip()
    ]


async def _communicate(process: asyncio.subprocess.Process, data: bytes) -> bytes:
    """Give the program ``data`` on its input, then read its output to the end.

    Not ``Process.communicate``: a program may exit without reading its input, and uvloop
    refuses (RuntimeError) a write to a pipe it has closed, where asyncio ignores it. The
    input is a line or nothing, well under a pipe's buffer, so it is written before reading.
    """
    stdin, stdout = process.stdin, process.stdout
    assert stdin is not None  # (both are pipes)
    assert stdout is not None
    # No await between the check and the write: the pipe cannot close in between.
    if data and not stdin.is_closing():
        stdin.write(data)
        with contextlib.suppress(ConnectionError):  # (it exited without reading)
            await stdin.drain()
    stdin.close()
    output = await stdout.read()
    await process.wait()
    return output
