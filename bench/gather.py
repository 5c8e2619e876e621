#!/usr/bin/env python3
"""Gathering benchmark, run by hand (never in CI): pages per second, CPU and peak memory of
``harvest-gather run`` crawling a few hundred interlinked HTML pages served by nginx on
loopback, with full summarizing and the SOIF database written.

    python bench/gather.py [--pages 530] [--repeats 1] [--site DIR] [--keep]

Three runs, each with a fresh gatherer database: straight to the origin; through a freshly
started harvest-cache (cold: every page a miss); through the same cache again (warm: every page
a hit). Delay=0 and 8 connections to the host. Scrapy (installed once into a venv under
~/.cache, or ``--scrapy-python``) crawls the same site in the same run, extracting title,
headings, meta description and links, for the ratios (``--no-scrapy`` uses the figures
measured earlier on this kind of machine: about 80 pages/s, 6.5 CPU s, 230 MB RSS). Then the
export stream's size is compared with the pages' (Harvest reported 20-50x).

``--site DIR`` crawls a directory of real HTML pages instead of the generated ones (its
``index.html`` is the root). Results go to bench/results/gather.json. Every process started
here leads its own process group and is stopped by it; only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import (
    ALL_CPUS,
    HOST,
    REPO,
    BenchError,
    Origin,
    Proxy,
    Session,
    ensure_tools,
    group_pids,
    harvest_command,
    say,
    write_report,
)

VENV = REPO / ".venv" / "bin"
GATHER = VENV / "harvest-gather"
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
# Nothing answers DNS on loopback: other hosts' names fail by timeout, kept short here (a
# real resolver says NXDOMAIN at once); Host=1 refuses those links either way.
DNS-Servers: 127.0.0.1:9
DNS-Timeout: 0.2
{proxy}
<RootNodes>
http://{host}:{port}{path}index.html URL={url_max} Delay=0 Depth=0
</RootNodes>
"""


class PeakRss:
    """Samples the summed RSS of a process group every 50 ms while it runs."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            total = 0
            for pid in group_pids(self.pgid):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                found = re.search(r"VmRSS:\s+(\d+)", status)
                total += int(found.group(1)) if found else 0
            self.peak_kib = max(self.peak_kib, total)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kib / 1024


def measured(session: Session, argv: list[str], top: Path) -> tuple[str, float, float, float]:
    """Run ``argv`` on both cores to its end: its output, wall seconds, CPU seconds (its own
    and its children's) and the peak of its process group's summed RSS in MB."""
    log = top / "run.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = session.procs.start(argv, log, ALL_CPUS)
    rss = PeakRss(proc.pid)
    status = proc.wait(600)
    wall = time.monotonic() - started
    peak = rss.stop()
    session.procs.live.remove(proc)
    # Children the program waited for (summarizer workers) count in its children's usage.
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    text = log.read_text()
    if status != 0:
        raise BenchError(f"{argv[0]} exited {status}\n{text[-2000:]}")
    return text, wall, cpu, peak


def gather_once(
    session: Session, label: str, port: int, count: int, proxy: int | None
) -> dict[str, Any]:
    top = session.workdir / f"gatherer-{label}"
    top.mkdir()
    config = top / "gatherer.cf"
    config.write_text(
        CONFIG.format(
            top=top,
            host=HOST,
            port=port,
            path=SITE_PATH,
            url_max=count + 10,
            proxy=f"HTTP-Proxy: {HOST}:{proxy}" if proxy else "",
        )
    )
    text, wall, cpu, peak = measured(session, [str(GATHER), "run", str(config), "--quiet"], top)
    crawl = re.search(r"elapsed ([\d.]+) s", text)
    stored = re.search(r"stored (\d+)", text)
    fetched = re.search(r"fetched (\d+) \((\d+) bytes\)", text)
    crawl_s = float(crawl.group(1)) if crawl else wall
    pages = int(fetched.group(1)) if fetched else 0
    return reported(label, pages, crawl_s, wall, cpu, peak) | {
        "bytes": int(fetched.group(2)) if fetched else 0,
        "stored": int(stored.group(1)) if stored else 0,
        "summary": text.strip().splitlines(),
        "config": str(config),
    }


def reported(
    label: str, pages: int, crawl_s: float, wall: float, cpu: float, peak: float
) -> dict[str, Any]:
    """One run's figures, printed and as the report's entry."""
    result = {
        "label": label,
        "pages": pages,
        "crawl_seconds": round(crawl_s, 2),
        "wall_seconds": round(wall, 2),
        "pages_per_s": round(pages / crawl_s, 1),
        "pages_per_s_wall": round(pages / wall, 1),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_mb": round(peak, 1),
    }
    say(
        f"{label:>12}: {pages} pages in {crawl_s:.2f} s = {result['pages_per_s']} pages/s"
        f" ({result['pages_per_s_wall']}/s with start-up), CPU {cpu:.2f} s, peak RSS {peak:.0f} MB"
    )
    return result


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


def scrapy_once(session: Session, python: Path, port: int) -> dict[str, Any]:
    top = session.workdir / "scrapy"
    top.mkdir()
    spider = top / "spider.py"
    spider.write_text(SPIDER)
    start = f"http://{HOST}:{port}{SITE_PATH}index.html"
    argv = [str(python), str(spider), start, str(top / "items.jsonl")]
    text, wall, cpu, peak = measured(session, argv, top)
    figures = json.loads(text.strip().splitlines()[-1])
    pages, crawl_s = int(figures["pages"]), float(figures["elapsed"]) or wall
    return reported("scrapy", pages, crawl_s, wall, cpu, peak)


def export_size(config: str) -> dict[str, int]:
    sizes = {}
    for coding in ("none", "gzip"):
        out = subprocess.run(
            [str(GATHER), "export", "-c", config, "--compress", coding],
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
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--no-scrapy", action="store_true", help="skip the Scrapy comparison")
    parser.add_argument("--scrapy-python", type=Path, help="a Python that has Scrapy installed")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    ensure_tools(["nginx", "taskset"])
    pages = real_site(args.site) if args.site else generate(args.pages)
    site_bytes = sum(len(body) for body in pages.values())
    say(f"site: {len(pages)} pages, {site_bytes / 1e6:.1f} MB ({site_bytes // len(pages)} B/page)")
    report: dict[str, Any] = {
        "site": {"pages": len(pages), "bytes": site_bytes, "source": str(args.site or "generated")},
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
        runs = report["runs"]
        runs.append(gather_once(session, "direct", origin.port, len(pages), None))
        proxy = Proxy("harvest", session.procs, session.workdir, 256, False, harvest_command(None))
        runs.append(gather_once(session, "cache-cold", origin.port, len(pages), proxy.port))
        runs.append(gather_once(session, "cache-warm", origin.port, len(pages), proxy.port))
        baseline = dict(SCRAPY)
        if not args.no_scrapy:
            scrapy = scrapy_once(session, scrapy_python(args.scrapy_python), origin.port)
            report["scrapy"] = scrapy
            baseline = {"pages_per_s": scrapy["pages_per_s"], "rss_mb": scrapy["peak_rss_mb"]}
        sizes = export_size(runs[0]["config"])
        report["export"] = {
            "soif_bytes": sizes["none"],
            "gzip_bytes": sizes["gzip"],
            # Against what was gathered (a real site's directory may hold pages not linked).
            "reduction_soif": round(runs[0]["bytes"] / sizes["none"], 1),
            "reduction_gzip": round(runs[0]["bytes"] / sizes["gzip"], 1),
        }
        say(
            f"export: SOIF {sizes['none'] / 1e6:.2f} MB ({report['export']['reduction_soif']}x"
            f" smaller than the {runs[0]['bytes'] / 1e6:.1f} MB gathered),"
            f" gzip {sizes['gzip'] / 1e6:.2f} MB ({report['export']['reduction_gzip']}x)"
        )
        for run in runs:
            say(
                f"{run['label']:>12}: {run['pages_per_s'] / TARGET_PAGES_PER_S:.2f}x the"
                f" 150 pages/s target, {run['pages_per_s'] / baseline['pages_per_s']:.2f}x"
                " Scrapy's pages/s,"
                f" RSS {run['peak_rss_mb'] / baseline['rss_mb']:.2f}x Scrapy's"
            )
        report["systems"] = {"harvest": {"status": "ok"}}
    if session.status:
        return session.status
    write_report(report, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
