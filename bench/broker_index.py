#!/usr/bin/env python3
"""Broker index benchmark, run by hand (never in CI): indexing speed, index size and query
latency of ``broker.index.TantivyIndex`` on generated SOIF summaries.

    .venv/bin/python bench/broker_index.py [--records 100000] [--queries 500] [--seed 1994]

Generates ``--records`` realistic SOIF records deterministically (see ``Corpus``), measures
their encoded size with ``harvest_common.soif.encode``, indexes them through the index's async API
(records per second end to end, thread hops and commits included), reports the index's size
on disk against the SOIF bytes, then runs ``--queries`` queries of each class through
``await index.search(tree, limit=10)`` and reports p50/p99/max milliseconds, each against the
issue's target. Results go to bench/results/broker_index.json; the index is built in a
temporary directory that is removed afterwards (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import math
import os
import platform
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from run import core_seconds  # noqa: E402

from broker.index import IndexedObject, TantivyIndex  # noqa: E402
from broker.query.ast import And, Node, Not, Or, Phrase, Word  # noqa: E402
from broker.sync import attributes_text  # noqa: E402
from harvest_common.soif import Record, encode  # noqa: E402

OUTPUT = BENCH / "results" / "broker_index.json"
TARGET_RECORDS_PER_S = 15_000.0
TARGET_SIZE_RATIO = 0.30
TARGET_P99_MS = 5.0
BATCH = 1_000  # records per add(), as the collector hands them over
COMMIT_EVERY = 20_000  # records between commits (one pull from a gatherer)

# -- the corpus ----------------------------------------------------------------------------------

_ONSETS = [*"bcdfghjklmnprstvwz", "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh"]
_ONSETS += ["st", "th", "tr", "wh", "sp", "sc", "qu", ""]
_NUCLEI = [*"aeiouy", "ai", "ea", "ee", "io", "ou", "oa", "ie"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "nt", "st", "ng", "ck", "rk", "ss", "x"]
# Real words at middling ranks, so that the example queries read naturally.
_DOMAIN = [
    *("cache", "caching", "harvest", "broker", "gatherer", "internet", "resource", "discovery"),
    *("index", "network", "protocol", "server", "proxy", "object", "summary", "colorado"),
    *("replica", "query", "search", "document", "archive", "software", "computer", "system"),
    *("library", "information", "university", "research", "report", "manual"),
]
_PUNCTUATION = (". ", ". ", ". ", ", ", "; ", "? ", ".\n")
_TYPES = ("HTML",) * 6 + ("Text", "PostScript", "README", "Tar", "Compressed", "Manual")
_TLDS = ("edu", "edu", "com", "org", "gov", "net", "de", "uk")
_EPOCH_1994 = 757_382_400
_EPOCH_2026 = 1_795_000_000


def _vocabulary(size: int, rng: random.Random) -> list[str]:
    """``size`` distinct pronounceable words, by rank: common words are short and rare ones
    long (Zipf's law of abbreviation), about 4.8 letters a running word and 7.7 a distinct
    one, as in English."""
    words: list[str] = []
    seen: set[str] = set()
    rank = 0
    while len(words) < size:
        rank += 1
        target = max(2, min(16, int(rng.gauss(2.2 + 0.6 * math.log(rank), 1.6))))
        word = ""
        while len(word) < target:
            word += rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS)
        word = word[:target]
        if word not in seen:
            seen.add(word)
            words.append(word)
    for i, word in enumerate(_DOMAIN):
        if word not in seen:
            words.insert(200 + 37 * i, word)
    return words[:size]


def _sampling_table(words: list[str], s: float, size: int = 1 << 22) -> list[str]:
    """``words`` repeated in proportion to a Zipf law of exponent ``s`` over their ranks: a
    uniform draw from it is a Zipf draw, twice as fast as ``choices`` with weights. A word
    rarer than 1/``size`` is in it once or not at all, in proportion to its probability."""
    cum = list(itertools.accumulate(1 / r**s for r in range(1, len(words) + 1)))
    step = cum[-1] / size
    table: list[str] = []
    for rank, upto in enumerate(cum):
        table += [words[rank]] * (round(upto / step) - len(table))
    return table


class Corpus:
    """Deterministic SOIF records shaped like the gatherer's (gatherer/records.py): the common
    attributes, then a summarizer's (HTML: Title, Author, Description, Keywords, Headings,
    URL-References, Abstract; text: Title, Keywords, Partial-Text), and on some ``Embed<n>-``
    attributes of archive members. Text is drawn from a Zipf vocabulary (s = 1.05) of
    ``vocabulary`` words; titles and keywords skip the 100 commonest."""

    def __init__(self, seed: int, vocabulary: int = 50_000) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.words = _vocabulary(vocabulary, self.rng)
        self._zipf = _sampling_table(self.words, 1.05)
        self.content_words = self.words[100:]
        self._content = _sampling_table(self.content_words, 0.9)
        self.hosts = [
            f"{'www.' if self.rng.random() < 0.6 else ''}"
            f"{self.rng.choice(self.words[100:5000])}.{self.rng.choice(_TLDS)}"
            for _ in range(3000)
        ]

    def zipf(self, k: int) -> list[str]:
        return self.rng.choices(self._zipf, k=k)

    def content(self, k: int) -> list[str]:
        return self.rng.choices(self._content, k=k)

    def text(self, nbytes: int) -> str:
        """Sentences of 6-22 words, about ``nbytes`` long."""
        rng = self.rng
        words = self.zipf(nbytes // 6 + 1)
        out = []
        i = 0
        while i < len(words):
            j = i + rng.randint(6, 22)
            sentence = " ".join(words[i:j])
            out.append(sentence[0].upper() + sentence[1:] + rng.choice(_PUNCTUATION))
            i = j
        return "".join(out)

    def url(self) -> str:
        rng = self.rng
        path = "/".join(self.content(rng.randint(0, 4)))
        tail = rng.choice(("", ".html", ".html", ".txt", ".ps", ".tar.gz", "/"))
        return f"http://{rng.choice(self.hosts)}/{path}{tail}"

    def phrase(self, low: int, high: int, title: bool = False) -> str:
        words = " ".join(self.content(self.rng.randint(low, high)))
        return words.title() if title else words

    def records(self, n: int) -> list[Record]:
        gatherers = [(f"{h.split('.')[-2]}-gatherer", h) for h in self.hosts[:40]]
        return [self._record(i, *gatherers[i % len(gatherers)]) for i in range(n)]

    def _record(self, i: int, gatherer: str, host: str) -> Record:
        rng = self.rng
        url = f"http://{rng.choice(self.hosts)}/{'/'.join(self.content(rng.randint(1, 3)))}/{i}"
        when = rng.uniform(_EPOCH_1994, _EPOCH_2026)
        kind = rng.choice(_TYPES)
        attrs: list[tuple[str, str]] = [
            ("Type", kind),
            ("File-Size", str(int(rng.lognormvariate(9, 1.5)))),
            ("MD5", hashlib.md5(f"{self.seed}:{i}".encode()).hexdigest()),
            ("Update-Time", f"{when:.6f}"),
            ("Last-Modification-Time", str(int(when - rng.uniform(0, 3e7)))),
            ("Time-to-Live", "9676800"),
            ("Refresh-Rate", "2419200"),
            ("Gatherer-Name", f"{gatherer} on {host}"),
            ("Gatherer-Host", host),
            ("Gatherer-Port", "8500"),
            ("Gatherer-Version", "1.4"),
            ("Title", self.phrase(3, 10, title=True)),
        ]
        body = self.text(int(min(20_000, max(300, rng.lognormvariate(7.92, 0.55)))))
        if kind == "HTML":
            if rng.random() < 0.3:
                attrs.append(("Author", self.phrase(2, 2, title=True)))
            if rng.random() < 0.4:
                attrs.append(("Description", self.text(rng.randint(100, 400))))
            attrs.append(("Keywords", "\n".join(self.content(rng.randint(4, 14)))))
            if rng.random() < 0.7:
                headings = (self.phrase(2, 6, title=True) for _ in range(rng.randint(2, 8)))
                attrs.append(("Headings", "\n".join(headings)))
            attrs.append(
                ("URL-References", "\n".join(self.url() for _ in range(rng.randint(2, 40))))
            )
            attrs.append(("Abstract", body))
        else:
            attrs.append(("Keywords", "\n".join(self.content(rng.randint(4, 14)))))
            attrs.append(("Partial-Text", body))
        if rng.random() < 0.15:
            for n in range(1, rng.randint(2, 4)):
                attrs += [
                    (f"Embed{n}-Title", self.phrase(2, 6, title=True)),
                    (f"Embed{n}-Type", rng.choice(_TYPES)),
                    (f"Embed{n}-Keywords", "\n".join(self.content(rng.randint(3, 8)))),
                ]
        template = "FILE" if rng.random() < 0.9 else "DIRECTORY"
        return Record(template, url, tuple((name, value.encode()) for name, value in attrs))


def indexed(record: Record, gatherer: str) -> IndexedObject:
    """The object the broker would hand the index for ``record``."""
    attributes = attributes_text(record)
    values = dict(attributes)
    return IndexedObject(
        oid=hashlib.blake2b(f"{gatherer}\n{record.url}".encode(), digest_size=12).hexdigest(),
        url=record.url,
        attributes=attributes,
        update_time=float(values["Update-Time"]),
        file_size=int(values["File-Size"]),
    )


# -- queries -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueryClass:
    name: str
    about: str
    queries: list[Node]
    target: bool  # whether the p99 target applies


def _typo(word: str, edits: int, rng: random.Random) -> str:
    """``word`` with ``edits`` random insertions, deletions or substitutions of letters."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    for _ in range(edits):
        at = rng.randrange(len(word))
        edit = rng.randrange(3)
        if edit == 0:
            word = word[:at] + rng.choice(letters.replace(word[at], "")) + word[at + 1 :]
        elif edit == 1 and len(word) > 3:
            word = word[:at] + word[at + 1 :]
        else:
            word = word[:at] + rng.choice(letters) + word[at:]
    return word


def _tokens(text: str) -> list[str]:
    # What the index's analyzer makes of the corpus's text (ASCII words and punctuation).
    return "".join(c.lower() if c.isalnum() else " " for c in text).split()


def query_classes(records: Sequence[Record], corpus: Corpus, n: int, seed: int) -> list[QueryClass]:
    """``n`` queries of each class, drawn from the records themselves so that they match."""
    rng = random.Random(seed + 1)
    sample = rng.sample(list(records), min(len(records), 4000))
    texts = [
        dict(r.attributes).get("Abstract") or dict(r.attributes)["Partial-Text"] for r in sample
    ]
    running = [_tokens(t.decode()) for t in texts]
    titles = [_tokens(dict(r.attributes)["Title"].decode()) for r in sample]
    frequency: dict[str, int] = {}
    for tokens in running:
        for token in set(tokens):
            frequency[token] = frequency.get(token, 0) + 1
    by_frequency = sorted(frequency, key=lambda w: -frequency[w])
    common = by_frequency[:50]
    rare = [w for w in by_frequency if frequency[w] <= 2 and len(w) >= 4]
    middling = by_frequency[100:3000]
    long_words = [w for w in by_frequency[:20000] if len(w) >= 6]

    function_words = set(corpus.words[:100])

    def phrase(source: list[list[str]], function: bool | None = None) -> Node:
        """2-3 consecutive tokens; ``function``: all (True) or not all (False) of them among
        the 100 commonest words."""
        while True:
            tokens = rng.choice([t for t in source if len(t) >= 3])
            size = rng.choice((2, 3))
            at = rng.randrange(len(tokens) - size + 1)
            words = tuple(tokens[at : at + size])
            if function is None or function == function_words.issuperset(words):
                return Phrase(words)

    def words() -> Node:
        """2-3 words of one object's running text, anywhere in it, not all among the 100
        commonest: what a person types, ANDed."""
        while True:
            tokens = rng.choice([t for t in running if len(t) >= 3])
            chosen = tuple(dict.fromkeys(rng.sample(tokens, rng.choice((2, 3)))))
            if len(chosen) > 1 and not function_words.issuperset(chosen):
                return And(tuple(Word(token) for token in chosen))

    def prefix() -> Node:
        while len(token := rng.choice(rng.choice(running))) < 4:
            pass
        return Word(token[: rng.randint(3, min(5, len(token) - 1))], prefix=True)

    def draws(make: Callable[[], Node]) -> list[Node]:
        return [make() for _ in range(n)]

    return [
        QueryClass(
            "common word",
            "one of the 50 commonest words (in most objects)",
            draws(lambda: Word(rng.choice(common))),
            True,
        ),
        QueryClass(
            "rare word",
            "a word in at most 2 of 4,000 sampled objects",
            draws(lambda: Word(rng.choice(rare))),
            False,
        ),
        QueryClass(
            "attribute word",
            "Title: a word of some object's title",
            draws(lambda: Word(rng.choice(rng.choice(titles)), attribute="Title")),
            True,
        ),
        QueryClass(
            "phrase",
            "2-3 consecutive words of running text, not all among the 100 commonest",
            draws(lambda: phrase(running, function=False)),
            True,
        ),
        QueryClass(
            "function phrase",
            "2-3 consecutive words of running text, all among the 100 commonest",
            draws(lambda: phrase(running, function=True)),
            False,
        ),
        QueryClass(
            "title phrase",
            "2-3 consecutive words of some object's title",
            draws(lambda: phrase(titles)),
            False,
        ),
        QueryClass(
            "words",
            "2-3 words of one object's running text, not all among the 100 commonest",
            draws(words),
            True,
        ),
        QueryClass(
            "boolean",
            "(a OR b) AND NOT c, words of ranks 100-3,000",
            draws(
                lambda: And(
                    (
                        Or((Word(rng.choice(middling)), Word(rng.choice(middling)))),
                        Not(Word(rng.choice(middling))),
                    )
                )
            ),
            True,
        ),
        QueryClass(
            "prefix",
            "the first 3-5 letters of a longer word of running text",
            draws(prefix),
            True,
        ),
        QueryClass(
            "approximate ~1",
            "a word of 6+ letters with one random edit",
            draws(lambda: Word(_typo(rng.choice(long_words), 1, rng), errors=1)),
            True,
        ),
        QueryClass(
            "approximate ~2",
            "a word of 6+ letters with two random edits",
            draws(lambda: Word(_typo(rng.choice(long_words), 2, rng), errors=2)),
            True,
        ),
    ]


# -- measuring -----------------------------------------------------------------------------------


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _busy() -> float:
    """CPU seconds all cores have been busy so far."""
    return sum(busy for busy, _ in core_seconds().values())


def _size(directory: Path) -> dict[str, int]:
    """Bytes on disk by kind of file (tantivy's extensions)."""
    sizes: dict[str, int] = {}
    for path in directory.iterdir():
        if path.is_file():
            kind = path.suffix.lstrip(".") or path.name
            sizes[kind] = sizes.get(kind, 0) + path.stat().st_size
    return sizes


async def index_corpus(
    objects: Sequence[IndexedObject], directory: Path, args: argparse.Namespace
) -> dict[str, Any]:
    index = await TantivyIndex.open(
        directory, heap_bytes=args.heap_mb * 1_000_000, indexing_threads=args.threads
    )
    cpu, busy, start = _cpu(), _busy(), time.perf_counter()
    commits = 0.0
    for at in range(0, len(objects), BATCH):
        await index.add(objects[at : at + BATCH])
        if (at + BATCH) % args.commit_every == 0 or at + BATCH >= len(objects):
            began = time.perf_counter()
            await index.commit()
            commits += time.perf_counter() - began
    seconds = time.perf_counter() - start
    cpu = _cpu() - cpu
    others = _busy() - busy - cpu
    count = await index.count()
    began = time.perf_counter()
    await index.close()  # waits for merges to finish
    return {
        "records": count,
        "seconds": round(seconds, 2),
        "records_per_s": round(len(objects) / seconds),
        "commit_seconds": round(commits, 2),
        "cpu_seconds": round(cpu, 2),
        "cpu_us_per_record": round(cpu / len(objects) * 1e6),
        "others_cpu_seconds": round(max(others, 0.0), 2),
        "close_seconds": round(time.perf_counter() - began, 2),
    }


async def run_queries(classes: list[QueryClass], directory: Path) -> dict[str, Any]:
    began = time.perf_counter()
    index = await TantivyIndex.open(directory)
    opened = time.perf_counter() - began
    began = time.perf_counter()
    await index.refresh_vocabulary()
    refreshed = time.perf_counter() - began
    out: dict[str, Any] = {
        "open_seconds": round(opened, 3),
        "vocabulary_seconds": round(refreshed, 2),
        "classes": {},
    }
    for cls in classes:  # warm the caches with a few of each
        for query in cls.queries[:20]:
            await index.search(query, limit=10)
    busy = _busy()
    cpu = _cpu()
    for cls in classes:
        times = []
        totals = []
        for query in cls.queries:
            start = time.perf_counter()
            results = await index.search(query, limit=10)
            times.append((time.perf_counter() - start) * 1000)
            totals.append(results.total)
        times.sort()
        out["classes"][cls.name] = {
            "about": cls.about,
            "queries": len(times),
            "p50_ms": round(statistics.median(times), 3),
            "p99_ms": round(times[min(len(times) - 1, math.ceil(0.99 * len(times)) - 1)], 3),
            "max_ms": round(times[-1], 3),
            "median_total": statistics.median(totals),
            "no_match": sum(t == 0 for t in totals),
            "target": cls.target,
        }
    out["others_cpu_seconds"] = round(max(_busy() - busy - (_cpu() - cpu), 0.0), 2)
    await index.close()
    return out


# -- reporting -----------------------------------------------------------------------------------


def report_table(report: dict[str, Any]) -> None:
    ix = report["indexing"]
    size = report["size"]
    kinds = ", ".join(f"{k} {v / report['soif_bytes']:.1%}" for k, v in size["kinds"].items())
    print(f"\n{report['records']:,} records, {report['soif_bytes'] / 1e6:.0f} MB of SOIF")
    print(
        f"indexing: {ix['records_per_s']:,} records/s ({ix['seconds']} s, commits "
        f"{ix['commit_seconds']} s; {ix['cpu_us_per_record']} us CPU a record; other "
        f"processes {ix['others_cpu_seconds']} CPU s)   target {TARGET_RECORDS_PER_S:,.0f}: "
        f"{ix['records_per_s'] / TARGET_RECORDS_PER_S:.2f}x"
    )
    print(
        f"size: {size['bytes'] / 1e6:.0f} MB in {size['segments']} segments = "
        f"{size['ratio']:.1%} of the SOIF bytes   "
        f"target {TARGET_SIZE_RATIO:.0%}: {size['ratio'] / TARGET_SIZE_RATIO:.2f}x   "
        f"({kinds})"
    )
    q = report["queries"]
    print(
        f"reopen {q['open_seconds']} s, vocabulary {q['vocabulary_seconds']} s, other processes "
        f"{q['others_cpu_seconds']} CPU s during the queries"
    )
    print(f"\n{'class':<16}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'total':>9}  p99/target")
    for name, row in q["classes"].items():
        ratio = f"{row['p99_ms'] / TARGET_P99_MS:.2f}x" if row["target"] else "-"
        print(
            f"{name:<16}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['max_ms']:>9.2f}"
            f"{row['median_total']:>9.0f}  {ratio}"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500, help="per class")
    parser.add_argument("--seed", type=int, default=1994)
    parser.add_argument("--heap-mb", type=int, default=512, help="the writer's memory")
    parser.add_argument("--threads", type=int, default=2, help="tantivy's indexing threads")
    parser.add_argument("--commit-every", type=int, default=COMMIT_EVERY)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--keep", action="store_true", help="keep the index directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    corpus = Corpus(args.seed)
    records = corpus.records(args.records)
    soif_bytes = sum(len(encode(record)) for record in records)
    gatherers = [f"gatherer-{i}" for i in range(8)]
    objects = [indexed(record, gatherers[i % 8]) for i, record in enumerate(records)]
    classes = query_classes(records, corpus, args.queries, args.seed)
    print(f"generated {len(records):,} records in {time.perf_counter() - began:.0f} s")
    workdir = Path(tempfile.mkdtemp(prefix="broker-index-"))
    try:
        indexing = asyncio.run(index_corpus(objects, workdir, args))
        del objects
        queries = asyncio.run(run_queries(classes, workdir))
        # Measured after reopening, which removes the files of segments that merges replaced.
        kinds = _size(workdir)
        total = sum(kinds.values())
        segments = sum(path.suffix == ".idx" for path in workdir.iterdir())
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "records": len(records),
        "soif_bytes": soif_bytes,
        "settings": {
            "heap_mb": args.heap_mb,
            "indexing_threads": args.threads,
            "batch": BATCH,
            "commit_every": args.commit_every,
        },
        "indexing": indexing,
        "size": {
            "segments": segments,
            "bytes": total,
            "ratio": total / soif_bytes,
            "kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:6]),
        },
        "queries": queries,
        "targets": {
            "records_per_s": TARGET_RECORDS_PER_S,
            "size_ratio": TARGET_SIZE_RATIO,
            "p99_ms": TARGET_P99_MS,
        },
    }
    report_table(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
