#!/usr/bin/env python3
"""Gathering benchmark, run by hand (never in CI): pages per second, CPU and peak memory of
``harvest-gather run`` crawling a few hundred interlinked HTML pages served by nginx on
loopback, with full summarizing and the SOIF database written.

    python bench/gather.py [--pages 530] [--site DIR] [--repeats 1] [--baseline CHECKOUT]
                           [--no-scrapy] [--keep]

Three runs, each with a fresh gatherer database: straight to the origin; through a freshly
started harvest-cache (cold: every page a miss); through the same cache again (warm: every page
a hit). Delay=0 and 8 connections to the host. ``--repeats N`` does the three N times (a new
cache each time). ``--baseline CHECKOUT`` runs another checkout's gatherer (its ``gatherer``
package, say a worktree of main) in turn with this one's, alternating which goes first, for an
A/B comparison on the same origin and the same machine load; this checkout's gatherer is
always the one run (not whatever the venv's editable install points at).

Scrapy (installed once into a venv under ~/.cache, or ``--scrapy-python``) crawls the same site
in the same run, extracting title, headings, meta description and links, for the ratios
(``--no-scrapy`` uses the figures measured earlier on this kind of machine: about 80 pages/s,
6.5 CPU s, 230 MB RSS). Then the export stream's size is compared with the pages' (Harvest
reported 20-50x).

Per run: pages per second over the crawl (and including start-up); CPU seconds of the gatherer
and its summarizer workers, the workers' share, and the cache's and nginx's CPU over the same
time (they share the machine); the peak of the gatherer's summed RSS. Names that pages link to
are answered NXDOMAIN at once by a resolver on loopback, as a real one would.

``--site DIR`` crawls a directory of real HTML pages instead of the generated ones (its
``index.html`` is the root). Results go to bench/results/gather.json. Every process started
here leads its own process group and is stopped by it; only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.rcode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (
    ALL_CPUS,
    HOST,
    REPO,
    VENV_PY,
    BenchError,
    Origin,
    Proxy,
    Session,
    cpu_seconds,
    ensure_tools,
    group_pids,
    harvest_command,
    say,
    write_report,
)

OUTPUT = Path(__file__).resolve().parent / "results" / "gather.json"
TARGET_PAGES_PER_S = 150.0
SCRAPY = {"pages_per_s": 80.0, "cpu_s": 6.5, "rss_mb": 230.0}
SITE_PATH = "/site/"

# -- the site ------------------------------------------------------------------------------------

SYLLABLE_TEXT = """
ca che ob ject pro xy hi er ar chy gath bro ker in dex rep li tor sum ma ry net work serv cli
ent pa ren sib ling dig est fresh ness val id ate re quest sponse head bod y stream chunk tun
nel con nect per sist
"""
SYLLABLES = tuple(SYLLABLE_TEXT.split())


def vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
    return sorted(words)


def sentence(rng: random.Random, words: list[str], weights: list[float]) -> str:
    chosen = rng.choices(words, weights, k=rng.randint(8, 22))
    return " ".join(chosen).capitalize() + "."


def generate(count: int, seed: int = 1994) -> dict[str, bytes]:
    """``count`` documentation-like pages, 15-35 KB each, densely interlinked (navigation,
    table of contents and links in the text), deterministic for a seed."""
    rng = random.Random(seed)
    words = vocabulary(rng)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf, like real text
    names = ["index.html"] + [f"doc/{n // 50:02d}/page{n:04d}.html" for n in range(1, count)]
    sections = [name for name in names if name.endswith(("0.html", "5.html"))][:25]
    pages: dict[str, bytes] = {}
    for number, name in enumerate(names):
        title = " ".join(rng.choices(words, weights, k=4)).title()
        nav = "".join(
            f'<li><a href="{SITE_PATH}{s}">{s.rsplit("/", 1)[-1]}</a></li>' for s in sections
        )
        # Every page links the next few, so a breadth-first crawl from the index reaches all.
        targets = [names[(number + k) % count] for k in range(1, 4)]
        targets += rng.sample(names, 12)
        toc = []
        body = []
        for h in range(rng.randint(5, 9)):
            heading = " ".join(rng.choices(words, weights, k=3)).title()
            toc.append(f'<li><a href="#s{h}">{heading}</a></li>')
            body.append(f'<h2 id="s{h}">{heading}</h2>')
            for _ in range(rng.randint(2, 4)):
                text = " ".join(sentence(rng, words, weights) for _ in range(rng.randint(3, 7)))
                if targets:
                    link = targets.pop()
                    text += f' See <a href="{SITE_PATH}{link}">{link}</a>.'
                body.append(f"<p>{text}</p>")
            if rng.random() < 0.4:
                code = "\n".join(sentence(rng, words, weights) for _ in range(4))
                body.append(f"<pre><code>{code}</code></pre>")
        body += [f'<p><a href="{SITE_PATH}{t}">{t}</a></p>' for t in targets]
        keywords = ", ".join(rng.choices(words, weights, k=6))
        html = (
            "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            f"<title>{title}</title>"
            f'<meta name="description" content="{sentence(rng, words, weights)}">'
            f'<meta name="keywords" content="{keywords}">'
            '<link rel="stylesheet" href="/static/site.css">'
            "<script>window.dataLayer=window.dataLayer||[];function t(){}</script>"
            f"</head><body><header><nav><ul>{nav}</ul></nav></header><aside><ul>{''.join(toc)}"
            f"</ul></aside><main><h1>{title}</h1>{''.join(body)}</main>"
            "<footer><p>Generated documentation for the Harvest gathering benchmark.</p>"
            "</footer></body></html>"
        )
        pages[name] = html.encode()
    return pages


def real_site(directory: Path) -> dict[str, bytes]:
    pages = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            pages[str(path.relative_to(directory))] = path.read_bytes()
    if "index.html" not in pages:
        raise SystemExit(f"{directory}: no index.html to start from")
    return pages


# -- one gathering run ---------------------------------------------------------------------------

CONFIG = """\
Gatherer-Name: Benchmark Gatherer
Gatherer-Host: bench.local
Top-Directory: {top}
Access-Delay: 0
Connections-Per-Host: 8
Max-Connections: 8
Summarizer-Workers: 0
Hosts-File: none
# Names of other hosts are answered NXDOMAIN at once; Host=1 refuses those links either way.
DNS-Servers: {host}:{dns_port}
{proxy}
<RootNodes>
http://{host}:{port}{path}index.html URL={url_max} Delay=0 Depth=0
</RootNodes>
"""


class GroupSampler:
    """Samples a process group every 50 ms while it runs: the peak of its summed RSS (and
    what each process held then) and of its summed PSS (which counts a page shared by several
    processes, libpython's say, once over all), and the CPU seconds of its summarizer workers
    (each as last seen: they are idle when they end)."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.peak_kib = 0
        self.peak_pss_kib = 0
        self.peak_parts: list[tuple[str, int]] = []
        self._worker_ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            parts = []
            pss = 0
            for pid in group_pids(self.pgid):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    command = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                found = re.search(r"VmRSS:\s+(\d+)", status)
                worker = b"gatherer.essence.worker" in command
                parts.append(("worker" if worker else "main", int(found.group(1)) if found else 0))
                found = re.search(r"^Pss:\s+(\d+)", rollup, re.MULTILINE)
                pss += int(found.group(1)) if found else 0
                if worker:
                    fields = stat[stat.rfind(")") + 2 :].split()
                    self._worker_ticks[pid] = int(fields[11]) + int(fields[12])
            total = sum(kib for _, kib in parts)
            if total > self.peak_kib:
                self.peak_kib, self.peak_parts = total, parts
            self.peak_pss_kib = max(self.peak_pss_kib, pss)

    def stop(self) -> tuple[float, float]:
        """The peak RSS in MB and the workers' CPU seconds."""
        self._stop.set()
        self._thread.join()
        workers = sum(self._worker_ticks.values()) / os.sysconf("SC_CLK_TCK")
        return self.peak_kib / 1024, workers


class NxdomainResolver:
    """A DNS server on 127.0.0.1 (UDP, its own thread) answering every question NXDOMAIN at
    once, as a real resolver does for the other hosts a site links to."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((HOST, 0))
        self._socket.settimeout(0.2)
        self.port = int(self._socket.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._socket.recvfrom(4096)
            except TimeoutError:
                continue
            try:
                response = dns.message.make_response(dns.message.from_wire(data))
            except dns.exception.DNSException:
                continue
            response.set_rcode(dns.rcode.NXDOMAIN)
            self._socket.sendto(response.to_wire(), peer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()


def measured(
    session: Session, argv: list[str], top: Path, neighbours: dict[str, int]
) -> dict[str, Any]:
    """Run ``argv`` on both cores to its end: its output, wall seconds, CPU seconds (its own
    and its children's; the summarizer workers' apart), the peak of its process group's
    summed RSS in MB, and the CPU seconds each of ``neighbours`` (name: process group) used
    meanwhile."""
    log = top / "run.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    others = {name: cpu_seconds(pgid) for name, pgid in neighbours.items()}
    started = time.monotonic()
    proc = session.procs.start(argv, log, ALL_CPUS)
    sampler = GroupSampler(proc.pid)
    status = proc.wait(600)
    wall = time.monotonic() - started
    peak, workers = sampler.stop()
    parts = [f"{kind} {kib / 1024:.0f}" for kind, kib in sampler.peak_parts]
    session.procs.live.remove(proc)
    # Children the program waited for (summarizer workers) count in its children's usage.
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    text = log.read_text()
    if status != 0:
        raise BenchError(f"{argv[0]} exited {status}\n{text[-2000:]}")
    return {
        "text": text,
        "wall": wall,
        "cpu": cpu,
        "worker_cpu": workers,
        "peak": peak,
        "peak_pss": sampler.peak_pss_kib / 1024,
        "peak_parts": parts,
        "neighbours": {name: cpu_seconds(pgid) - others[name] for name, pgid in neighbours.items()},
    }


def gatherer_command(checkout: Path) -> list[str]:
    """``harvest-gather`` running the ``gatherer`` package of ``checkout`` (the venv's own
    script would import whatever its editable install points at)."""
    main = f"import sys; sys.path.insert(0, {str(checkout)!r}); from gatherer.cli import main"
    return [str(VENV_PY), "-c", f"{main}; sys.exit(main())"]


@dataclass(frozen=True)
class Setup:
    """What every gathering run of one benchmark shares."""

    session: Session
    origin: Origin
    resolver: NxdomainResolver
    count: int  # the site's pages


def gather_once(
    setup: Setup, build: str, checkout: Path, label: str, proxy: Proxy | None
) -> dict[str, Any]:
    top = setup.session.workdir / f"gatherer-{build}-{label}-{time.monotonic_ns()}"
    top.mkdir()
    config = top / "gatherer.cf"
    config.write_text(
        CONFIG.format(
            top=top,
            host=HOST,
            port=setup.origin.port,
            dns_port=setup.resolver.port,
            path=SITE_PATH,
            url_max=setup.count + 10,
            proxy=f"HTTP-Proxy: {HOST}:{proxy.port}" if proxy else "",
        )
    )
    neighbours = {"nginx": setup.origin.proc.pid}
    if proxy is not None:
        neighbours["cache"] = proxy.pgid
    argv = [*gatherer_command(checkout), "run", str(config), "--quiet"]
    run = measured(setup.session, argv, top, neighbours)
    text = run["text"]
    crawl = re.search(r"elapsed ([\d.]+) s", text)
    stored = re.search(r"stored (\d+)", text)
    fetched = re.search(r"fetched (\d+) \((\d+) bytes\)", text)
    crawl_s = float(crawl.group(1)) if crawl else run["wall"]
    pages = int(fetched.group(1)) if fetched else 0
    result = reported(f"{build} {label}", pages, crawl_s, run)
    result |= {
        "build": build,
        "run": label,
        "worker_cpu_seconds": round(run["worker_cpu"], 2),
        "peak_rss_parts_mb": run["peak_parts"],
        "neighbour_cpu_seconds": {k: round(v, 2) for k, v in run["neighbours"].items()},
        "bytes": int(fetched.group(2)) if fetched else 0,
        "stored": int(stored.group(1)) if stored else 0,
        "summary": text.strip().splitlines(),
        "config": str(config),
    }
    shares = ", ".join(f"{k} {v:.2f}" for k, v in result["neighbour_cpu_seconds"].items())
    say(
        f"{'':>20}  workers' CPU {result['worker_cpu_seconds']:.2f} s; meanwhile CPU s: {shares};"
        f" at the RSS peak (MB): {', '.join(run['peak_parts'])}"
    )
    return result


def gather_set(setup: Setup, build: str, checkout: Path) -> list[dict[str, Any]]:
    """The three runs of one build: direct, then cold and warm through a new cache."""
    runs = [gather_once(setup, build, checkout, "direct", None)]
    proxy = Proxy(
        "harvest",
        setup.session.procs,
        setup.session.workdir / f"cache-{time.monotonic_ns()}",
        256,
        False,
        harvest_command(None),
    )
    try:
        runs.append(gather_once(setup, build, checkout, "cache-cold", proxy))
        runs.append(gather_once(setup, build, checkout, "cache-warm", proxy))
    finally:
        proxy.stop()
    return runs


def reported(label: str, pages: int, crawl_s: float, run: dict[str, Any]) -> dict[str, Any]:
    """One run's figures (``run`` as ``measured`` gives them), printed and as the report's
    entry."""
    wall, cpu, peak = run["wall"], run["cpu"], run["peak"]
    result = {
        "label": label,
        "pages": pages,
        "crawl_seconds": round(crawl_s, 2),
        "wall_seconds": round(wall, 2),
        "pages_per_s": round(pages / crawl_s, 1),
        "pages_per_s_wall": round(pages / wall, 1),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(peak, 1),
        "peak_pss_mb": round(run["peak_pss"], 1),
    }
    say(
        f"{label:>20}: {pages} pages in {crawl_s:.2f} s = {result['pages_per_s']} pages/s"
        f" ({result['pages_per_s_wall']}/s with start-up), CPU {cpu:.2f} s, peak RSS {peak:.0f}"
        f" MB (PSS {result['peak_pss_mb']:.0f} MB)"
    )
    return result


MEASURES = (
    "pages_per_s",
    "pages_per_s_wall",
    "cpu_seconds",
    "worker_cpu_seconds",
    "peak_rss_mb",
    "peak_pss_mb",
)


def summarized(runs: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per build and run kind: the median, least and greatest of each measure over the
    repeats, and of the cache's CPU seconds."""
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for key in dict.fromkeys((run["build"], run["run"]) for run in runs):
        group = [run for run in runs if (run["build"], run["run"]) == key]
        figures = {m: [float(run[m]) for run in group] for m in MEASURES}
        if "cache" in group[0]["neighbour_cpu_seconds"]:
            figures["cache_cpu_seconds"] = [run["neighbour_cpu_seconds"]["cache"] for run in group]
        summary.setdefault(key[0], {})[key[1]] = {
            m: {
                "median": round(statistics.median(v), 2),
                "min": round(min(v), 2),
                "max": round(max(v), 2),
            }
            for m, v in figures.items()
        }
    return summary


SPIDER = """\
import json, sys
import scrapy
from scrapy.crawler import CrawlerProcess


class Site(scrapy.Spider):
    # What the issue's Scrapy figure extracted: title, headings, meta description and links.
    name = "site"
    allowed_domains = ["127.0.0.1"]

    def __init__(self, start):
        super().__init__()
        self.start_urls = [start]

    def parse(self, response):
        yield {
            "url": response.url,
            "title": response.css("title::text").get(),
            "headings": response.css("h1::text, h2::text, h3::text").getall(),
            "description": response.css("meta[name=description]::attr(content)").get(),
        }
        yield from response.follow_all(css="a", callback=self.parse)


process = CrawlerProcess(settings={
    "CONCURRENT_REQUESTS": 8,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "DOWNLOAD_DELAY": 0,
    "ROBOTSTXT_OBEY": True,
    "LOG_LEVEL": "ERROR",
    "TELNETCONSOLE_ENABLED": False,
    "FEEDS": {sys.argv[2]: {"format": "jsonlines"}},
})
crawler = process.create_crawler(Site)
process.crawl(crawler, start=sys.argv[1])
process.start()
stats = crawler.stats.get_stats()
print(json.dumps({"pages": stats.get("item_scraped_count", 0),
                  "elapsed": stats.get("elapsed_time_seconds", 0)}))
"""


def scrapy_python(explicit: Path | None) -> Path:
    """A Python with Scrapy: ``--scrapy-python``, else a venv made (once) in ~/.cache."""
    if explicit is not None:
        return explicit
    venv = Path.home() / ".cache" / "harvest-bench" / "scrapy-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        say(f"installing Scrapy into {venv} (once)")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "scrapy"], check=True)
    return python


def scrapy_once(setup: Setup, python: Path) -> dict[str, Any]:
    top = setup.session.workdir / "scrapy"
    top.mkdir()
    spider = top / "spider.py"
    spider.write_text(SPIDER)
    start = f"http://{HOST}:{setup.origin.port}{SITE_PATH}index.html"
    argv = [str(python), str(spider), start, str(top / "items.jsonl")]
    run = measured(setup.session, argv, top, {"nginx": setup.origin.proc.pid})
    figures = json.loads(run["text"].strip().splitlines()[-1])
    pages, crawl_s = int(figures["pages"]), float(figures["elapsed"]) or run["wall"]
    return reported("scrapy", pages, crawl_s, run)


def export_size(config: str) -> dict[str, int]:
    sizes = {}
    for coding in ("none", "gzip"):
        out = subprocess.run(
            [*gatherer_command(REPO), "export", "-c", config, "--compress", coding],
            capture_output=True,
            check=True,
            timeout=300,
        )
        sizes[coding] = len(out.stdout)
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=530)
    parser.add_argument("--site", type=Path, help="crawl this directory of real pages instead")
    parser.add_argument("--repeats", type=int, default=1, help="gathering runs of each kind")
    parser.add_argument(
        "--baseline", type=Path, help="a checkout whose gatherer runs in turn with this one's"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--no-scrapy", action="store_true", help="skip the Scrapy comparison")
    parser.add_argument("--scrapy-python", type=Path, help="a Python that has Scrapy installed")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    ensure_tools(["nginx", "taskset"])
    builds = [("this", REPO)]
    if args.baseline is not None:
        if not (args.baseline / "gatherer" / "cli.py").is_file():
            raise SystemExit(f"{args.baseline}: not a Harvest checkout")
        builds.append(("baseline", args.baseline.resolve()))
    pages = real_site(args.site) if args.site else generate(args.pages)
    site_bytes = sum(len(body) for body in pages.values())
    say(f"site: {len(pages)} pages, {site_bytes / 1e6:.1f} MB ({site_bytes // len(pages)} B/page)")
    report: dict[str, Any] = {
        "site": {"pages": len(pages), "bytes": site_bytes, "source": str(args.site or "generated")},
        "builds": {name: str(path) for name, path in builds},
        "runs": [],
        "systems": {},
    }
    with Session("harvest-gather-bench-", args.keep) as session:
        origin = Origin(
            "nginx",
            session.procs,
            session.workdir,
            ALL_CPUS,
            extra_locations=(
                f"        location {SITE_PATH} {{\n"
                '            add_header Cache-Control "max-age=3600";\n'
                "        }\n"
            ),
            extra_files={f"{SITE_PATH.strip('/')}/{name}": body for name, body in pages.items()},
        )
        resolver = NxdomainResolver()
        try:
            setup = Setup(session, origin, resolver, len(pages))
            runs = report["runs"]
            for repeat in range(args.repeats):
                # Alternate which build goes first, so that neither always meets a warmer
                # machine (page cache, CPU frequency) or a busier one.
                for name, checkout in builds if repeat % 2 == 0 else builds[::-1]:
                    runs += gather_set(setup, name, checkout)
            report["summary"] = summarized(runs)
            baseline = dict(SCRAPY)
            if not args.no_scrapy:
                scrapy = scrapy_once(setup, scrapy_python(args.scrapy_python))
                report["scrapy"] = scrapy
                baseline = {"pages_per_s": scrapy["pages_per_s"], "rss_mb": scrapy["peak_rss_mb"]}
        finally:
            resolver.close()
        first = runs[0]
        sizes = export_size(first["config"])
        report["export"] = {
            "soif_bytes": sizes["none"],
            "gzip_bytes": sizes["gzip"],
            # Against what was gathered (a real site's directory may hold pages not linked).
            "reduction_soif": round(first["bytes"] / sizes["none"], 1),
            "reduction_gzip": round(first["bytes"] / sizes["gzip"], 1),
        }
        say(
            f"export: SOIF {sizes['none'] / 1e6:.2f} MB ({report['export']['reduction_soif']}x"
            f" smaller than the {first['bytes'] / 1e6:.1f} MB gathered),"
            f" gzip {sizes['gzip'] / 1e6:.2f} MB ({report['export']['reduction_gzip']}x)"
        )
        for name, kinds in report["summary"].items():
            for kind, figures in kinds.items():
                rate, cpu = figures["pages_per_s"], figures["cpu_seconds"]
                rss = figures["peak_rss_mb"]["max"]
                say(
                    f"{name + ' ' + kind:>20}: {rate['median']} pages/s ({rate['min']}-"
                    f"{rate['max']}), CPU {cpu['median']} s ({cpu['min']}-{cpu['max']}):"
                    f" {rate['median'] / TARGET_PAGES_PER_S:.2f}x the 150 pages/s target,"
                    f" {rate['median'] / baseline['pages_per_s']:.2f}x Scrapy's pages/s,"
                    f" peak RSS {rss / baseline['rss_mb']:.2f}x Scrapy's"
                )
        report["systems"] = {"harvest": {"status": "ok"}}
    if session.status:
        return session.status
    write_report(report, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
