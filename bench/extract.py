#!/usr/bin/env python3
"""Main-content extraction benchmark, run by hand (never in CI): the quality and speed of
boilerplate-removal libraries on real HTML sites from Debian's documentation packages.

    python bench/extract.py [--pages 150] [--repeats 3] [--sites python,apache]
                            [--only trafilatura,justext] [--candidate module:function ...]

Each site comes from one generator (Sphinx, mdBook, rustdoc, DocBook XSL, the Apache manual's
XSLT, AsciiDoc, SQLite's own) whose main-content element is known; its text is the truth a
candidate's text is scored against: bag-of-words precision, recall and F1, whether the first
20 words match (the Abstract is the start of the text), and whether headings of the
navigation leak in. Speed: CPU and wall time per page, and peak RSS growth, each candidate in
a fresh worker process of its own. A missing site's package is installed with apt-get.

Candidates are the built-in names below and any ``--candidate module:function`` (or
``path/to/file.py:function``) taking the page's HTML as ``str`` and returning its main text;
harvest's own heuristic (``gatherer.essence.summarizers.content:main_text``) is added when it
can be imported. The libraries are not Harvest's dependencies: install those to compare into
the venv by hand (see bench/README.md). Results go to bench/results/extract.json.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import run as base
from selectolax.lexbor import LexborHTMLParser, LexborNode

Extract = Callable[[str], str]

OUTPUT = base.BENCH / "results" / "extract.json"
HARVEST = "gatherer.essence.summarizers.content:main_text"
START_WORDS = 20  # the Abstract is the start of the text: do its first words match?
NEAR_WORDS = 50  # ... or stand within the truth's first words (a title left out is forgiven)
MIN_TRUTH_WORDS = 30  # a page with less main text than this is an index or a redirect
PAGE_KIB = 96  # the size of a page in the real site the gatherer's speed target is set on
PACKAGES = ("trafilatura", "justext", "readability-lxml", "resiliparse", "lxml", "selectolax")
_WORD = re.compile(r"\w+")
_HEADINGS = "h1, h2, h3, h4, h5, h6"
_INVISIBLE = ["script", "style", "noscript", "template"]  # as the HTML summarizer drops them
_XML_DECLARATION = re.compile(r"\A\s*<\?xml[^>]*>")

# -- the sites -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Site:
    """An HTML site from a Debian package, and where its generator puts the main content."""

    name: str
    generator: str
    package: str
    root: Path
    truth: str  # CSS selector of the element(s) holding the main content
    cut: tuple[str, ...] = ()  # navigation inside those elements
    pattern: str = "**/*.html"  # the pages, as a glob below root


# The header and footer navigation bars, and the tables of contents and lists of tables.
_DOCBOOK_NAVIGATION = (".navheader", ".navfooter", ".toc", ".list-of-tables", ".list-of-examples")
SITES = (
    Site(
        "python",
        "Sphinx",
        "python3.11-doc",
        Path("/usr/share/doc/python3.11/html"),
        "[role=main]",
        (".toctree-wrapper", "nav.contents"),  # tables of contents: links to elsewhere
    ),
    # The current edition only: the folders of the first, second and 2018 editions hold 264
    # stubs saying that edition is no longer distributed (70% of a sample of the whole).
    Site(
        "rust-book",
        "mdBook",
        "rust-doc",
        Path("/usr/share/doc/rust-doc/html/book"),
        "main",
        pattern="*.html",
    ),
    Site(
        "rust-std", "rustdoc", "rust-doc", Path("/usr/share/doc/rust-doc/html/std"), "#main-content"
    ),
    Site(
        "postgresql",
        "DocBook XSL",
        "postgresql-doc-15",
        Path("/usr/share/doc/postgresql-doc-15/html"),
        "body",
        _DOCBOOK_NAVIGATION,
    ),
    Site(
        "debian-reference",
        "DocBook XSL",
        "debian-reference-en",
        Path("/usr/share/debian-reference"),
        "body",
        _DOCBOOK_NAVIGATION,
        "*.en.html",
    ),
    Site(
        "apache",
        "Apache manual XSLT",
        "apache2-doc",
        Path("/usr/share/doc/apache2-doc/manual/en"),
        "#page-content",
        ("#quickview", ".toplang", ".top"),  # the sidebar, language links, back-to-top arrows
    ),
    Site("git", "AsciiDoc", "git-doc", Path("/usr/share/doc/git-doc"), "#header, #content"),
    Site(
        "sqlite",
        "SQLite's docsrc (Tcl)",
        "sqlite3-doc",
        Path("/usr/share/doc/sqlite3"),
        "body",
        (".tagline", ".menu", ".searchmenu", ".fancy_toc"),  # the site's header and page ToC
    ),
)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def joined(tokens: list[str]) -> str:
    """``tokens`` as one string in which `` phrase `` finds a phrase on word boundaries."""
    return f" {' '.join(tokens)} "


@dataclass(frozen=True, slots=True)
class Truth:
    """A page's main text, as words, and its navigation headings that the main text lacks."""

    words: list[str]
    bag: Counter[str]
    nav_headings: tuple[str, ...]


def truth_of(html: str, site: Site) -> Truth | None:
    """The text of ``site.truth`` without ``site.cut``; None if the page has no such element."""
    tree = LexborHTMLParser(html)
    tree.strip_tags(_INVISIBLE, recursive=True)
    mains = tree.css(site.truth)
    if not mains:
        return None
    main_ids = {node.mem_id for node in mains}
    cut = [node for main in mains for selector in site.cut for node in main.css(selector)]
    cut_ids = {node.mem_id for node in cut}
    nav = [
        " ".join(words(node.text(separator=" ")))
        for node in tree.css(_HEADINGS)
        if not _in_main(node, main_ids, cut_ids)
    ]
    for node in cut:
        if _outermost(node, cut_ids):  # an inner one goes with its outer one
            node.decompose()
    tokens = [token for main in mains for token in words(main.text(separator=" "))]
    text = joined(tokens)
    nav_headings = tuple(dict.fromkeys(h for h in nav if h and f" {h} " not in text))
    return Truth(tokens, Counter(tokens), nav_headings)


def _in_main(node: LexborNode, main_ids: set[int], cut_ids: set[int]) -> bool:
    return _nearest(node, main_ids | cut_ids) in main_ids


def _outermost(node: LexborNode, cut_ids: set[int]) -> bool:
    return node.parent is None or _nearest(node.parent, cut_ids) is None


def _nearest(node: LexborNode, ids: set[int]) -> int | None:
    """The id of ``node`` or of its nearest ancestor whose id is in ``ids``."""
    walk: LexborNode | None = node
    while walk is not None:
        if walk.mem_id in ids:
            return walk.mem_id
        walk = walk.parent
    return None


@dataclass(frozen=True, slots=True)
class Page:
    path: Path
    size: int
    truth: Truth


@dataclass(slots=True)
class Sample:
    site: Site
    pages: list[Page]
    skipped: int  # pages looked at without the main element or with too little text in it


def sample(site: Site, limit: int, seed: int) -> Sample:
    """Up to ``limit`` pages with enough main text, in an order fixed by ``seed``."""
    paths = sorted(path for path in site.root.glob(site.pattern) if path.is_file())
    random.Random(f"{seed}/{site.name}").shuffle(paths)
    chosen: list[Page] = []
    skipped = 0
    for path in paths:
        if len(chosen) >= limit:
            break
        data = path.read_bytes()
        truth = truth_of(data.decode("utf-8", "replace"), site)
        if truth is None or len(truth.words) < MIN_TRUTH_WORDS:
            skipped += 1
            continue
        chosen.append(Page(path, len(data), truth))
    return Sample(site, chosen, skipped)


def ensure_sites(sites: Iterable[Site]) -> None:
    missing = sorted({site.package for site in sites if not site.root.is_dir()})
    if missing:
        base.apt_install(missing, what=", ".join(missing))


# -- the candidates --------------------------------------------------------------------------------
# Each loader imports its library when called, in the worker process that measures it.


@dataclass(frozen=True, slots=True)
class Candidate:
    """An extractor, or a bare parse (``kind="parse"``) measured for its cost alone."""

    name: str
    load: Callable[[], Extract]
    parser: str  # the parse it pays for: "lexbor" can be the gatherer's own, shared
    kind: str = "extractor"


def _trafilatura(
    fast: bool = False, favor_precision: bool = False, favor_recall: bool = False
) -> Callable[[], Extract]:
    def load() -> Extract:
        import trafilatura

        def extract(html: str) -> str:
            text = trafilatura.extract(
                html, fast=fast, favor_precision=favor_precision, favor_recall=favor_recall
            )
            return text or ""

        return extract

    return load


def _justext() -> Extract:
    import justext

    stoplist = justext.get_stoplist("English")

    def extract(html: str) -> str:
        paragraphs = justext.justext(html, stoplist)
        return "\n".join(p.text for p in paragraphs if not p.is_boilerplate)

    return extract


def _readability() -> Extract:
    import lxml.html
    from readability import Document

    def extract(html: str) -> str:
        article = lxml.html.fromstring(Document(html).summary(html_partial=True))
        # text_content() glues the words of adjacent blocks together ("ParametersWITH").
        return " ".join(article.itertext())

    return extract


def _resiliparse() -> Extract:
    from resiliparse.extract.html2text import extract_plain_text

    def extract(html: str) -> str:
        # No alt texts: the summarizer's text has none ("top" of the Apache manual's arrows).
        return str(extract_plain_text(html, main_content=True, alt_texts=False))

    return extract


def _body_text() -> Extract:
    """Today's summarizer: the whole body's visible text."""

    def extract(html: str) -> str:
        tree = LexborHTMLParser(html)
        tree.strip_tags(_INVISIBLE, recursive=True)
        body = tree.body
        return body.text(separator=" ") if body is not None else ""

    return extract


def _parse_lexbor() -> Extract:
    def parse(html: str) -> str:
        LexborHTMLParser(html)
        return ""

    return parse


def _parse_lxml() -> Extract:
    import lxml.html

    def parse(html: str) -> str:
        # lxml refuses a str that declares its encoding; the lxml-based extractors drop it too.
        lxml.html.document_fromstring(_XML_DECLARATION.sub("", html, count=1))
        return ""

    return parse


def _parse_resiliparse() -> Extract:
    from resiliparse.parse.html import HTMLTree

    def parse(html: str) -> str:
        HTMLTree.parse(html)
        return ""

    return parse


BUILTIN = {
    c.name: c
    for c in (
        Candidate("trafilatura", _trafilatura(), "lxml"),
        Candidate("trafilatura-precision", _trafilatura(favor_precision=True), "lxml"),
        Candidate("trafilatura-recall", _trafilatura(favor_recall=True), "lxml"),
        # `fast` is what trafilatura 2 calls no_fallback (still accepted, as a deprecated alias).
        Candidate("trafilatura-fast", _trafilatura(fast=True), "lxml"),
        Candidate("justext", _justext, "lxml"),
        Candidate("readability-lxml", _readability, "lxml"),
        Candidate("resiliparse", _resiliparse, "lexbor (its own)"),
        Candidate("body-text", _body_text, "lexbor"),
        Candidate("parse-lexbor", _parse_lexbor, "lexbor", "parse"),
        Candidate("parse-lxml", _parse_lxml, "lxml", "parse"),
        Candidate("parse-resiliparse", _parse_resiliparse, "lexbor (its own)", "parse"),
    )
}


def candidate(spec: str) -> Candidate:
    """A built-in candidate by name, ``harvest`` (the summarizer's own heuristic, which shares
    its lexbor parse), or ``module:function`` / ``path/to/file.py:function``."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if spec in ("harvest", HARVEST):
        return Candidate("harvest", _imported(HARVEST), "lexbor")
    where, _, function = spec.rpartition(":")
    if not where or not function:
        raise base.BenchError(f"--candidate {spec}: expected module:function")
    return Candidate(spec, _imported(spec), "its own")


def _imported(spec: str) -> Callable[[], Extract]:
    where, _, function = spec.rpartition(":")

    def load() -> Extract:
        if where.endswith(".py"):
            sys.dont_write_bytecode = True  # no __pycache__ left beside someone else's file
            found = importlib.util.spec_from_file_location(Path(where).stem, where)
            if found is None or found.loader is None:
                raise base.BenchError(f"--candidate {spec}: cannot load {where}")
            module = importlib.util.module_from_spec(found)
            found.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
        extract: Extract = getattr(module, function)
        return extract

    return load


def harvest_importable() -> bool:
    module = HARVEST.partition(":")[0]
    sys.path.insert(0, str(base.REPO))
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False
    finally:
        sys.path.remove(str(base.REPO))


# -- the worker: one candidate over every page, in a process of its own ----------------------------


def work(spec: str, pages_file: Path, out_file: Path, repeats: int, seconds: float) -> None:
    """Run ``spec`` over the pages ``repeats`` times, writing a JSON line per page and pass
    (with the text on the first pass), then one with the memory figures. Lines are flushed as
    they go, so a worker stopped at its time limit leaves what it did."""
    sys.path.insert(0, str(base.REPO))
    group = os.getpgrp()
    before_import = base.peak_rss_mib(group)
    extract = candidate(spec).load()
    imported = base.peak_rss_mib(group)
    pages = [
        Path(p).read_bytes().decode("utf-8", "replace") for p in pages_file.read_text().split("\n")
    ]
    base.reset_peak_rss(group)
    before_run = base.peak_rss_mib(group)
    deadline = time.monotonic() + seconds
    with out_file.open("w") as out:
        for repeat in range(repeats):
            for index, html in enumerate(pages):
                if time.monotonic() > deadline:
                    break
                text, error = "", None
                wall = time.perf_counter_ns()
                cpu = time.process_time_ns()
                try:
                    text = extract(html)
                except Exception as e:  # a failing extractor is a result to count, not a crash
                    error = f"{type(e).__name__}: {e}"[:300]
                cpu = time.process_time_ns() - cpu
                wall = time.perf_counter_ns() - wall
                line: dict[str, Any] = {
                    "page": index,
                    "repeat": repeat,
                    "cpu_ns": cpu,
                    "wall_ns": wall,
                }
                if repeat == 0:
                    line |= {"text": text if isinstance(text, str) else "", "error": error}
                out.write(json.dumps(line) + "\n")
                out.flush()
        memory = {
            "import_mib": imported - before_import,
            "rss_growth_mib": base.peak_rss_mib(group) - before_run,
        }
        out.write(json.dumps(memory) + "\n")


@dataclass(slots=True)
class Outcome:
    """What a worker reported: per page, its text (None if never reached) and error, and CPU
    and wall nanoseconds of each pass that reached it."""

    texts: list[str | None]
    errors: list[str | None]
    cpu_ns: list[list[int]]
    wall_ns: list[list[int]]
    memory: dict[str, float]
    status: str


def measure(spec: str, pages: list[Page], repeats: int, seconds: float, workdir: Path) -> Outcome:
    pages_file = workdir / "pages.txt"
    pages_file.write_text("\n".join(str(page.path) for page in pages))
    out_file = workdir / "out.jsonl"
    out_file.unlink(missing_ok=True)
    argv = [sys.executable, __file__, "--worker", spec, str(pages_file), str(out_file)]
    argv += ["--repeats", str(repeats), "--seconds", str(seconds)]
    status = "ok"
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=seconds + 120, start_new_session=True
        )
        if done.returncode != 0:
            status = f"worker exited {done.returncode}: {done.stderr.strip()[-500:]}"
    except subprocess.TimeoutExpired:
        status = "worker timed out"
    outcome = Outcome(
        [None] * len(pages),
        [None] * len(pages),
        [[] for _ in pages],
        [[] for _ in pages],
        {},
        status,
    )
    if not out_file.exists():
        return outcome
    for raw in out_file.read_text().splitlines():
        line = json.loads(raw)
        if "page" not in line:
            outcome.memory = line
            continue
        index = line["page"]
        if line["repeat"] == 0:
            outcome.texts[index] = line["text"]
            outcome.errors[index] = line["error"]
        outcome.cpu_ns[index].append(line["cpu_ns"])
        outcome.wall_ns[index].append(line["wall_ns"])
    if status == "ok" and None in outcome.texts:
        outcome.status = f"stopped at its --seconds limit after {outcome.texts.index(None)} pages"
    return outcome


# -- scoring ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PageScore:
    precision: float
    recall: float
    f1: float
    starts: bool  # the first START_WORDS words are the truth's
    starts_near: bool  # they stand within the truth's first NEAR_WORDS words
    leaks: bool | None  # a navigation heading is in the text (None: the page has none to leak)
    failure: str | None  # "error", "empty" or "not run"


def score(text: str | None, error: str | None, truth: Truth) -> PageScore:
    got = words(text or "")
    failure = "not run" if text is None else "error" if error else "empty" if not got else None
    common = sum((Counter(got) & truth.bag).values())
    precision = common / len(got) if got else 0.0
    recall = common / len(truth.words)
    f1 = 2 * precision * recall / (precision + recall) if common else 0.0
    leaks = None
    if truth.nav_headings:
        found = joined(got)
        leaks = any(f" {heading} " in found for heading in truth.nav_headings)
    opening = got[:START_WORDS]
    starts = opening == truth.words[:START_WORDS]
    near = bool(opening) and joined(opening) in joined(truth.words[:NEAR_WORDS])
    return PageScore(precision, recall, f1, starts, near, leaks, failure)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))] if ordered else 0.0


def quality(scores: list[PageScore]) -> dict[str, Any]:
    f1 = [s.f1 for s in scores]
    leakable = [s.leaks for s in scores if s.leaks is not None]
    return {
        "pages": len(scores),
        "precision": statistics.fmean(s.precision for s in scores),
        "recall": statistics.fmean(s.recall for s in scores),
        "f1_mean": statistics.fmean(f1),
        "f1_median": statistics.median(f1),
        "f1_p10": quantile(f1, 0.1),
        "starts": statistics.fmean(s.starts for s in scores),
        "starts_near": statistics.fmean(s.starts_near for s in scores),
        "nav_leaks": statistics.fmean(leakable) if leakable else None,
        "failures": dict(Counter(s.failure for s in scores if s.failure)),
    }


def speed(outcome: Outcome, pages: list[Page], indexes: Iterable[int]) -> dict[str, Any]:
    """CPU and wall milliseconds a page (each page's median over its passes)."""
    measured = [i for i in indexes if outcome.cpu_ns[i]]
    if not measured:
        return {"pages": 0}
    cpu = [statistics.median(outcome.cpu_ns[i]) / 1e6 for i in measured]
    wall = [statistics.median(outcome.wall_ns[i]) / 1e6 for i in measured]
    kib = sum(pages[i].size for i in measured) / 1024
    return {
        "pages": len(measured),
        "cpu_ms_mean": statistics.fmean(cpu),
        "cpu_ms_p90": quantile(cpu, 0.9),
        "wall_ms_mean": statistics.fmean(wall),
        "cpu_ms_per_96kib": sum(cpu) / kib * PAGE_KIB,
    }


def evaluate(
    cand: Candidate, outcome: Outcome, samples: list[Sample], shared_parse: dict[str, Any] | None
) -> dict[str, Any]:
    """Per site and overall: quality (sites weighed alike) and speed (pages pooled)."""
    pages = [page for s in samples for page in s.pages]
    result: dict[str, Any] = {"parser": cand.parser, "kind": cand.kind, "status": outcome.status}
    result |= {"memory": outcome.memory, "sites": {}}
    start = 0
    all_scores: list[PageScore] = []
    for s in samples:
        indexes = range(start, start + len(s.pages))
        start += len(s.pages)
        entry: dict[str, Any] = {"speed": speed(outcome, pages, indexes)}
        if cand.kind == "extractor":
            scores = [score(outcome.texts[i], outcome.errors[i], pages[i].truth) for i in indexes]
            all_scores += scores
            entry["quality"] = quality(scores)
        result["sites"][s.site.name] = entry
    result["speed"] = speed(outcome, pages, range(len(pages)))
    if cand.parser == "lexbor" and shared_parse and result["speed"]["pages"]:
        # The summarizer parses every page with lexbor anyway: only the rest is extra.
        extra = result["speed"]["cpu_ms_mean"] - shared_parse["cpu_ms_mean"]
        result["speed"]["cpu_ms_beyond_shared_parse"] = extra
    if cand.kind == "extractor":
        overall = quality(all_scores)
        sites = [entry["quality"] for entry in result["sites"].values()]
        for key in ("precision", "recall", "f1_mean", "starts", "starts_near"):
            overall[key] = statistics.fmean(q[key] for q in sites)
        leaks = [q["nav_leaks"] for q in sites if q["nav_leaks"] is not None]
        overall["nav_leaks"] = statistics.fmean(leaks) if leaks else None
        result["quality"] = overall
    errors = Counter(e.split(":", 1)[0] for e in outcome.errors if e)
    if errors:
        result["errors"] = dict(errors)
    return result


# -- the report ------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def tables(report: dict[str, Any]) -> str:
    """Markdown tables: overall quality and speed, then F1 by site."""
    rows = [
        "| candidate | parse | F1 mean | F1 median | F1 p10 | precision | recall | starts "
        "| starts near | nav leaks | failures | CPU ms/page | p90 | beyond shared parse "
        "| per 96 KiB | wall ms | RSS growth MiB | import MiB |",
        "| --- " * 18 + "|",
    ]
    for name, r in report["candidates"].items():
        sp, mem = r["speed"], r["memory"]
        cells = [name, r["parser"]]
        q = r.get("quality")
        if q is None:
            cells += ["-"] * 9
        else:
            fails = sum(q["failures"].values())
            cells += [f"{q['f1_mean']:.3f}", f"{q['f1_median']:.3f}", f"{q['f1_p10']:.3f}"]
            cells += [f"{q['precision']:.3f}", f"{q['recall']:.3f}", _pct(q["starts"])]
            cells.append(_pct(q["starts_near"]))
            cells += [_pct(q["nav_leaks"]), str(fails)]
        if sp["pages"]:
            beyond = sp.get("cpu_ms_beyond_shared_parse")
            cells += [f"{sp['cpu_ms_mean']:.2f}", f"{sp['cpu_ms_p90']:.2f}"]
            cells += ["-" if beyond is None else f"{beyond:.2f}", f"{sp['cpu_ms_per_96kib']:.2f}"]
            cells += [f"{sp['wall_ms_mean']:.2f}"]
        else:
            cells += ["-"] * 5
        cells += [f"{mem.get('rss_growth_mib', 0):.1f}", f"{mem.get('import_mib', 0):.1f}"]
        rows.append("| " + " | ".join(cells) + " |")
    sites = [s["name"] for s in report["sites"]]
    rows += [
        "",
        "| F1 mean (starts near) | " + " | ".join(sites) + " |",
        "| --- " * (len(sites) + 1) + "|",
    ]
    for name, r in report["candidates"].items():
        if r["kind"] != "extractor":
            continue
        cells = [name]
        for site in sites:
            q = r["sites"][site]["quality"]
            cells.append(f"{q['f1_mean']:.3f} ({_pct(q['starts_near'])})")
        rows.append("| " + " | ".join(cells) + " |")
    kib = " | ".join(f"{s['kib_mean']:.0f}" for s in report["sites"])
    rows += ["", "| CPU ms/page | " + " | ".join(sites) + " |", "| --- " * (len(sites) + 1) + "|"]
    rows.append(f"| (page KiB) | {kib} |")
    for name, r in report["candidates"].items():
        cells = [name]
        for site in sites:
            sp = r["sites"][site]["speed"]
            cells.append(f"{sp['cpu_ms_mean']:.2f}" if sp["pages"] else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def versions() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--pages", type=int, default=150, help="pages sampled per site (150)")
    ap.add_argument(
        "--repeats", type=int, default=3, help="passes over the pages per candidate (3)"
    )
    ap.add_argument("--seed", type=int, default=1, help="the pages' sampling seed (1)")
    ap.add_argument("--seconds", type=float, default=1200, help="time limit per candidate (1200)")
    ap.add_argument("--sites", help="comma-separated site names (all)")
    ap.add_argument("--only", help="comma-separated candidate names (all built-in ones)")
    ap.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="another extractor: main_text(html: str) -> str (repeatable)",
    )
    ap.add_argument("--output", type=Path, default=OUTPUT, help=f"JSON results ({OUTPUT})")
    ap.add_argument("--worker", nargs=3, metavar=("SPEC", "PAGES", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    names = {site.name for site in SITES}
    args.site_list = [s for s in SITES if args.sites is None or s.name in args.sites.split(",")]
    if args.sites and not set(args.sites.split(",")) <= names:
        ap.error(f"--sites: known sites are {', '.join(sorted(names))}")
    specs = list(BUILTIN) if args.only is None else args.only.split(",")
    if not args.only and harvest_importable():
        specs.append("harvest")
    args.specs = list(dict.fromkeys(specs + args.candidate))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        spec, pages_file, out_file = args.worker
        work(spec, Path(pages_file), Path(out_file), args.repeats, args.seconds)
        return 0
    try:
        cands = [candidate(spec) for spec in args.specs]
        ensure_sites(args.site_list)
    except base.BenchError as e:
        base.say(f"error: {e}")
        return 2
    samples = [sample(site, args.pages, args.seed) for site in args.site_list]
    pages = [page for s in samples for page in s.pages]
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpu": base._cpu_model(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "versions": versions(),
        "settings": {"pages": args.pages, "repeats": args.repeats, "seed": args.seed},
        "sites": [
            {
                "name": s.site.name,
                "generator": s.site.generator,
                "package": s.site.package,
                "truth": s.site.truth,
                "cut": list(s.site.cut),
                "pages": len(s.pages),
                "skipped": s.skipped,
                "kib_mean": statistics.fmean(p.size for p in s.pages) / 1024 if s.pages else 0,
                "sample": [str(p.path.relative_to(s.site.root)) for p in s.pages],
            }
            for s in samples
        ],
        "candidates": {},
    }
    for site in report["sites"]:
        size = f"{site['pages']} pages, {site['kib_mean']:.0f} KiB mean"
        base.say(f"{site['name']} ({site['generator']}): {size}")
    # The shared parse first, so that the others' extra cost over it can be reported.
    cands.sort(key=lambda c: c.name != "parse-lexbor")
    shared: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="harvest-extract-") as tmp:
        for cand in cands:
            started = time.monotonic()
            outcome = measure(cand.name, pages, args.repeats, args.seconds, Path(tmp))
            result = evaluate(cand, outcome, samples, shared)
            if cand.name == "parse-lexbor":
                shared = result["speed"]
            report["candidates"][cand.name] = result
            q = result.get("quality")
            line = f"{cand.name}: {result['speed'].get('cpu_ms_mean', 0):.2f} CPU ms/page"
            if q:
                line += f", F1 {q['f1_mean']:.3f}, starts {_pct(q['starts'])}"
            base.say(f"{line} ({time.monotonic() - started:.0f} s; {outcome.status})")
    base.say("\n" + tables(report))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    base.say(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
