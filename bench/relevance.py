#!/usr/bin/env python3
"""Relevance benchmark, run by hand (never in CI): does the broker put first what a person
wants? Debian's Python documentation (python3.11-doc, 530 pages) is gathered and collected by
a broker as a new user would set them up, then queries with the pages a person expects on top
are asked through ``GET /api/search``; the mean reciprocal rank (MRR) of the first expected
page and the recall of the expected pages in the top 10 are reported.

    .venv/bin/python bench/relevance.py [--corpus DIR] [--rebuild] [--code DIR] [--label NAME]

**The corpus** (built once into ``--corpus``, ``~/.cache/harvest-bench/relevance`` by
default; ``--rebuild`` makes it again): ``harvest-gather run`` with a FILE root at the
site's ``index.html`` (the gatherer's defaults: an HTML page's Title, Keywords, Headings and
Abstract from its main content, its URL-References...). Each run then serves that database
(``harvest-gather serve``) and starts a broker whose one collection pulls it; the broker is
also an HSR at which the gatherer and the broker itself register, as the issue's broker was,
so that server records are in the collection as they are on a real one.

**The queries** (``QUERIES``) were written from the pages themselves, before the ranking was
changed: what a person would type for a topic, and the pages that answer it (a module's
reference page, the HOWTO or tutorial chapter on it). Every result of each is read, 100 at a
time. The reciprocal rank is 1 / the rank of the first expected page (0 if none matches);
recall@10 the share of a query's expected pages in its first 10. Besides, how many results of
all the queries are server records, and how many match only through their URL-References
(their only snippets are URL-References).

``--code DIR`` runs the broker and the gatherer's export service of another checkout (from its
directory, on ``PYTHONPATH``), for before/after figures; the corpus is gathered by this one.
Results go to ``bench/results/relevance.json`` (``--output``), keyed by ``--label``. Every
process started here leads its own process group and is stopped by it; only 127.0.0.1 is
contacted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from run import HOST, REPO, BenchError, Session, free_port, say, wait_listening  # noqa: E402

SITE = Path("/usr/share/doc/python3.11/html")
SITE_URL = f"file://{SITE}/"
DEFAULT_CORPUS = Path.home() / ".cache" / "harvest-bench" / "relevance"
OUTPUT = BENCH / "results" / "relevance.json"
PYTHON = REPO / ".venv" / "bin" / "python"
LIMIT = 100
TOP = 10
TARGET_MRR = 0.9
ADMIN_TOKEN = "relevance-bench"
VOCABULARY_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class Query:
    """What a person types, and the pages (relative to the site) they expect on top."""

    text: str
    expected: tuple[str, ...]
    kind: str


def _queries(kind: str, *rows: tuple[str, str | tuple[str, ...]]) -> list[Query]:
    return [
        Query(text, (pages,) if isinstance(pages, str) else pages, kind) for text, pages in rows
    ]


QUERIES = [
    *_queries(
        "module",
        ("asyncio", "library/asyncio.html"),
        ("json", "library/json.html"),
        ("csv", "library/csv.html"),
        ("sqlite", "library/sqlite3.html"),
        ("pathlib", "library/pathlib.html"),
        ("subprocess", "library/subprocess.html"),
        ("itertools", "library/itertools.html"),
        ("dataclasses", "library/dataclasses.html"),
        ("pickle", "library/pickle.html"),
        ("tkinter", "library/tkinter.html"),
        ("timeit", "library/timeit.html"),
        ("decimal", "library/decimal.html"),
        ("zipfile", "library/zipfile.html"),
        ("enum", ("library/enum.html", "howto/enum.html")),
        ("logging", ("library/logging.html", "howto/logging.html")),
        ("argparse", ("library/argparse.html", "howto/argparse.html")),
    ),
    *_queries(
        "topic",
        ("asyncio task groups", "library/asyncio-task.html"),
        ("asyncio queues", "library/asyncio-queue.html"),
        ("asyncio subprocess", "library/asyncio-subprocess.html"),
        ("regular expressions", ("library/re.html", "howto/regex.html")),
        ("virtual environments", ("tutorial/venv.html", "library/venv.html")),
        ("list comprehensions", "tutorial/datastructures.html"),
        ("sorting key functions", "howto/sorting.html"),
        ("logging cookbook", "howto/logging-cookbook.html"),
        ("datetime time zones", ("library/datetime.html", "library/zoneinfo.html")),
        ("command line arguments", ("library/argparse.html", "howto/argparse.html")),
        ("unit testing framework", "library/unittest.html"),
        ("mock objects", "library/unittest.mock.html"),
        ("type hints", "library/typing.html"),
        ("errors and exceptions", "tutorial/errors.html"),
        ("floating point arithmetic", "tutorial/floatingpoint.html"),
        ("descriptor guide", "howto/descriptor.html"),
        ("unicode howto", "howto/unicode.html"),
        ("socket programming", ("howto/sockets.html", "library/socket.html")),
        ("http server", "library/http.server.html"),
        ("open urls", "library/urllib.request.html"),
        ("random numbers", ("library/random.html", "library/secrets.html")),
        ("deque", "library/collections.html"),
        ("lru_cache", "library/functools.html"),
        ("temporary files", "library/tempfile.html"),
        ("what's new in python 3.11", "whatsnew/3.11.html"),
        (
            "formatted string literals",
            ("reference/lexical_analysis.html", "tutorial/inputoutput.html"),
        ),
        ("abstract base classes", "library/abc.html"),
        ("context managers", "library/contextlib.html"),
        ("installing packages", ("installing/index.html", "tutorial/venv.html")),
        ("embedding python", "extending/embedding.html"),
        ("reference counting", "c-api/refcounting.html"),
        ("string methods", "library/stdtypes.html"),
        ("format specification", "library/string.html"),
        ("priority queue", "library/heapq.html"),
        ("weak references", "library/weakref.html"),
        ("process pool", ("library/concurrent.futures.html", "library/multiprocessing.html")),
        ("profiling", "library/profile.html"),
        ("debugger", "library/pdb.html"),
        ("secure tokens", "library/secrets.html"),
        ("packed binary data", "library/struct.html"),
        ("deep copy", "library/copy.html"),
        ("classes inheritance", "tutorial/classes.html"),
        ("import system", "reference/import.html"),
        ("copy files", "library/shutil.html"),
        ("statistics", "library/statistics.html"),
        ("python tutorial", "tutorial/index.html"),
        ("python 3.11 documentation", ("index.html", "contents.html")),
    ),
    *_queries(
        "typo",
        ("asyncoi~1", "library/asyncio.html"),
        ("subprocses~1", "library/subprocess.html"),
        ("pahtlib~1", "library/pathlib.html"),
        ("dataclases~1", "library/dataclasses.html"),
        ("itertols~1", "library/itertools.html"),
        ("asyncoi~2", "library/asyncio.html"),
    ),
]


# -- the corpus ----------------------------------------------------------------------------------

GATHERER_CONFIG = """\
Gatherer-Name: Python Documentation Gatherer
Gatherer-Host: docs.example
Top-Directory: {top}
Access-Delay: 0
Connections-Per-Host: 8
Max-Connections: 8
Hosts-File: none
# Nothing answers DNS on loopback; a FILE root needs none.
DNS-Servers: 127.0.0.1:9
DNS-Timeout: 0.2
{hsr}
<RootNodes>
{root}index.html URL=3000 Delay=0 Depth=0
</RootNodes>
"""

BROKER_CONFIG = """\
[broker]
name = "Python Documentation Broker"
listen = "{host}:{port}"
data_dir = "{data}"
admin_token = "{token}"

[[collections]]
name = "python-docs"
source = "http://{host}:{gatherer_port}"
interval = 86400

[hsr]
url = "http://{host}:{port}"
description = "The Python 3.11 documentation"
"""


def gatherer_config(top: Path, hsr: str | None) -> Path:
    config = top / "gatherer.cf"
    registering = f"HSR-URL: {hsr}\nHSR-Description: Python docs" if hsr else ""
    config.write_text(GATHERER_CONFIG.format(top=top, root=SITE_URL, hsr=registering))
    return config


def harvest(code: Path, *argv: str) -> list[str]:
    """The command that runs ``python -m argv...`` on the checkout ``code`` (its directory
    current, as ``-m`` puts the current directory first on the module path)."""
    return ["env", "-C", str(code), f"PYTHONPATH={code}", str(PYTHON), "-m", *argv]


def build(corpus: Path) -> None:
    """Gather the site into ``corpus``."""
    if not (SITE / "index.html").exists():
        raise BenchError(f"{SITE} is missing: apt-get install python3.11-doc")
    shutil.rmtree(corpus, ignore_errors=True)
    corpus.mkdir(parents=True)
    config = gatherer_config(corpus, None)
    started = time.monotonic()
    done = subprocess.run(
        harvest(REPO, "gatherer", "run", str(config), "--quiet"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise BenchError(f"gathering failed ({done.returncode}):\n{done.stderr[-2000:]}")
    say(f"gathered {SITE} into {corpus} in {time.monotonic() - started:.1f} s")
    say("\n".join(done.stdout.strip().splitlines()[-4:]))


# -- a broker collecting it ----------------------------------------------------------------------


def get_json(url: str, params: dict[str, str] | None = None) -> Any:
    if params:
        url = f"{url}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.load(response)


def collected(session: Session, corpus: Path, code: Path) -> str:
    """Start the gatherer's export service and a broker pulling it (an HSR too, with both
    registered); returns the broker's base URL once it holds every record."""
    work = session.workdir
    broker_port, gatherer_port = free_port(), free_port()
    broker_url = f"http://{HOST}:{broker_port}"
    broker_config = work / "broker.toml"
    broker_config.write_text(
        BROKER_CONFIG.format(
            host=HOST,
            port=broker_port,
            data=work / "broker",
            token=ADMIN_TOKEN,
            gatherer_port=gatherer_port,
        )
    )
    broker = session.procs.start(
        harvest(code, "broker", "serve", str(broker_config)), work / "broker.log", None
    )
    wait_listening(broker_port, broker, 60)
    config = gatherer_config(corpus, broker_url)
    listen = f"{HOST}:{gatherer_port}"
    gatherer = session.procs.start(
        harvest(code, "gatherer", "serve", "-c", str(config), "--listen", listen),
        work / "gatherer.log",
        None,
    )
    wait_listening(gatherer_port, gatherer, 60)
    pulled = subprocess.run(
        harvest(code, "broker", "collect", "-c", str(broker_config), "--url", broker_url),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if pulled.returncode != 0:
        raise BenchError(f"collect failed:\n{pulled.stdout}{pulled.stderr}")
    deadline = time.monotonic() + 60
    while len(get_json(f"{broker_url}/api/hsr")["servers"]) < 2:
        if time.monotonic() > deadline:
            raise BenchError("the gatherer and the broker did not both register at the HSR")
        time.sleep(0.5)
    return broker_url


# -- measuring -----------------------------------------------------------------------------------


def page_of(url: str) -> str:
    return url.removeprefix(SITE_URL)


def every_result(broker_url: str, query: str) -> list[Any]:
    """Every result of ``query``, best first, a page of LIMIT at a time."""
    results: list[Any] = []
    while True:
        params = {"q": query, "limit": str(LIMIT), "offset": str(len(results))}
        found = get_json(f"{broker_url}/api/search", params)
        results += found["results"]
        if not found["results"] or len(results) >= found["total"]:
            return results


def measured(broker_url: str) -> dict[str, Any]:
    # The first approximate word after a change starts the refresh of the index's word
    # list, and until it ends (well under a second here) such words match unranked.
    get_json(f"{broker_url}/api/search", {"q": "pythn~1"})
    time.sleep(VOCABULARY_SECONDS)
    per_query = []
    servers = only_referencing = 0
    times = []
    for query in QUERIES:
        started = time.perf_counter()
        results = every_result(broker_url, query.text)
        times.append((time.perf_counter() - started) * 1000)
        pages = [page_of(r["url"]) for r in results]
        rank = next((i for i, page in enumerate(pages, 1) if page in query.expected), None)
        recall = len(set(pages[:TOP]) & set(query.expected)) / len(query.expected)
        servers += sum(r["template"] != "FILE" for r in results)
        only_referencing += sum(
            1
            for r in results
            if r["snippets"] and all(s["attribute"] == "URL-References" for s in r["snippets"])
        )
        per_query.append(
            {
                "query": query.text,
                "kind": query.kind,
                "expected": list(query.expected),
                "rank": rank,
                "reciprocal_rank": round(1 / rank, 4) if rank else 0.0,
                f"recall_at_{TOP}": recall,
                "total": len(results),
                "top": pages[:3],
            }
        )
        say(f"{rank or '-':>4} {len(results):>4}  {query.text!r:34} {pages[:2]}")
    kinds = sorted({q.kind for q in QUERIES})
    return {
        "queries": len(QUERIES),
        "mrr": _mean(per_query, "reciprocal_rank"),
        f"recall_at_{TOP}": _mean(per_query, f"recall_at_{TOP}"),
        "by_kind": {
            kind: {
                "queries": sum(q["kind"] == kind for q in per_query),
                "mrr": _mean([q for q in per_query if q["kind"] == kind], "reciprocal_rank"),
                f"recall_at_{TOP}": _mean(
                    [q for q in per_query if q["kind"] == kind], f"recall_at_{TOP}"
                ),
            }
            for kind in kinds
        },
        "server_records_in_results": servers,
        "results_matching_only_url_references": only_referencing,
        "latency_ms": {
            "p50": round(statistics.median(times), 1),
            "max": round(max(times), 1),
        },
        "per_query": per_query,
    }


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return round(statistics.fmean(row[key] for row in rows), 3) if rows else 0.0


def save(label: str, result: dict[str, Any], output: Path) -> None:
    """Keep ``result`` under ``label`` in the report at ``output`` (beside the other labels)."""
    report = json.loads(output.read_text()) if output.exists() else {}
    report[label] = {"when": time.strftime("%Y-%m-%d %H:%M"), **result}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    say(f"wrote {output}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--rebuild", action="store_true", help="gather the corpus again")
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout to run")
    parser.add_argument("--label", default="current")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    with Session("harvest-relevance-", args.keep) as session:
        if args.rebuild or not (args.corpus / "gatherer.cf").exists():
            build(args.corpus)
        broker_url = collected(session, args.corpus, args.code.resolve())
        result = measured(broker_url)
    if session.status:
        return session.status
    say(
        f"{args.label}: MRR {result['mrr']:.3f} (target {TARGET_MRR}), recall@{TOP}"
        f" {result[f'recall_at_{TOP}']:.3f} over {result['queries']} queries;"
        f" server records in results {result['server_records_in_results']},"
        f" results matching only by URL-References {result['results_matching_only_url_references']}"
    )
    for kind, figures in result["by_kind"].items():
        say(f"  {kind:>7}: {figures}")
    save(args.label, result, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
