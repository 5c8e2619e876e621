"""A small collection for the search page's tests and its screenshots in the docs: records
of four gatherers, four types and update times from a day to years ago, most about caching.

    PYTHONPATH=. .venv/bin/python -m tests.broker.search_demo [docs/images]

starts a broker on loopback with these records, drives headless Chromium over it (the
browser tests' flags: tests/browser.py) and writes ``SHOTS`` as PNG files (docs/images by
default). The browser tests take the same screenshots into a temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from broker.app import Broker
from harvest_common.soif import Record
from tests import browser
from tests.broker.test_api import load, running, url_of
from tests.browser import Tab, tab
from tests.support import REPO

DAY = 86_400.0
GATHERERS = (
    ("Campus web", "www.cs.example.edu"),
    ("Python docs", "docs.python.example"),
    ("RFC archive", "rfc.example.org"),
    ("SQLite docs", "sqlite.example.org"),
)
# Record n comes from gatherer GATHERER_OF[n % 10], has type TYPES[n % 7] and was updated
# AGES[n % 8] days ago: uneven counts, as real collections have.
GATHERER_OF = (0, 0, 0, 1, 1, 2, 2, 2, 2, 3)
TYPES = ("HTML", "HTML", "HTML", "Text", "PDF", "PostScript", "HTML")
AGES = (1, 3, 12, 25, 90, 200, 400, 900)
TOPICS = (
    "Object cache design",
    "A hierarchical Internet object cache",
    "Squid cache configuration",
    "Cache consistency in HTTP",
    "Resource discovery with Harvest",
    "Proxy cache replacement policies",
    "Summarizing documents into SOIF",
    "The broker's query language",
    "Replicating broker collections",
    "Caching DNS answers",
    "Gatherer politeness and robots.txt",
    "Shared cache freshness",
)
RECORDS = 60
WORD = "cache"  # what most of the records are about


@dataclass(frozen=True, slots=True)
class Demo:
    """One record's facts, for the tests to count what a query should find."""

    url: str
    title: str
    gatherer: str
    type: str
    age_days: float
    about_cache: bool


def demo(n: int) -> Demo:
    name, host = GATHERERS[GATHERER_OF[n % 10]]
    title = TOPICS[n % len(TOPICS)]
    return Demo(
        url=f"http://{host}/doc/{n}",
        title=title,
        gatherer=name,
        type=TYPES[n % 7],
        age_days=AGES[n % 8],
        about_cache=WORD in title.lower() or n % 3 == 0,
    )


DEMOS = tuple(demo(n) for n in range(RECORDS))


def record(item: Demo, now: float) -> Record:
    name, host = next(g for g in GATHERERS if g[0] == item.gatherer)
    description = (
        "How a shared cache keeps copies of documents close to their readers."
        if item.about_cache
        else "Notes on resource discovery."
    )
    pairs = [
        ("Type", item.type),
        ("Update-Time", f"{now - item.age_days * DAY:.6f}"),
        ("Gatherer-Name", name),
        ("Gatherer-Host", host),
        ("Gatherer-Port", "8500"),
        ("Title", item.title),
        ("Description", description),
    ]
    return Record("FILE", item.url, tuple((k, v.encode()) for k, v in pairs))


@contextlib.asynccontextmanager
async def demo_broker(data: Path, now: float) -> AsyncIterator[Broker]:
    """A broker on loopback holding DEMOS, updated relative to ``now``."""
    async with running(data, name="Harvest Broker") as broker:
        await load(broker, "demo", [record(item, now) for item in DEMOS])
        yield broker


# (file name, the page's path and query, viewport width and height)
SHOTS = (
    ("search-results.png", "/?q=cache", 1280, 1000),
    ("search-narrowed.png", "/?q=cache&type=HTML&gatherer=Campus+web", 1280, 900),
    ("search-error.png", "/?q=Title%3A+%2Fcach(e%2F", 1280, 900),
    ("search-narrow-screen.png", "/?q=cache", 390, 844),
)


async def screenshots(page: Tab, base: str, directory: Path) -> list[Path]:
    """Take SHOTS of the broker at ``base`` into ``directory``; the files written."""
    written = []
    for name, path, width, height in SHOTS:
        await page.viewport(width, height)
        await page.goto(base + path)
        await page.evaluate("document.activeElement.blur()")  # no focus ring on the box
        image = await page.screenshot()
        target = directory / name
        await asyncio.to_thread(target.write_bytes, image)
        written.append(target)
    return written


async def _shoot(port: int, scratch: Path, directory: Path) -> None:
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    async with demo_broker(scratch / "broker", time.time()) as broker, tab(port) as page:
        for path in await screenshots(page, url_of(broker), directory):
            print(path)


def main(argv: Sequence[str]) -> int:
    directory = Path(argv[0]) if argv else REPO / "docs" / "images"
    scratch = Path(tempfile.mkdtemp(prefix="harvest-demo-"))
    try:
        with browser.chromium(scratch / "chromium") as port:
            asyncio.run(_shoot(port, scratch, directory))
    finally:
        # Chromium's helpers may still be writing its profile for a moment after it ends.
        for _ in range(50):
            shutil.rmtree(scratch, ignore_errors=True)
            if not scratch.exists():
                break
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
