"""``harvest-broker``: run the broker, query it, make it pull, register servers at an HSR,
and print the configuration reference.

::

    harvest-broker serve CONFIG
    harvest-broker query [--url URL] [--limit N] [--offset N] [--case] [--federated] [--json]
                         QUERY
    harvest-broker collect [-c CONFIG] [--url URL] [--token T] [--full] [--offline] [NAME...]
    harvest-broker register --hsr URL --type TYPE --name N --host H --port P [...]
    harvest-broker config-reference

Exit status: 0 done; 1 a run-time failure (the broker or HSR unreachable, a pull failed,
storage); 2 a bad command line, configuration, query, or a record the HSR refused.

Signals: SIGTERM or SIGINT stops ``serve`` cleanly (the scheduler, pulls in progress, the web
server, the index and the registry are closed in that order), with status 0. A second signal
while stopping takes the signal's default action.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

from broker import hsr
from broker.app import PROG, Broker
from broker.collector import Collector
from broker.config import INDEX_DIR, REGISTRY_FILE, Config, load, reference
from broker.errors import BrokerError, CollectError, ConfigError
from broker.federation import html_parts
from broker.index.tantivy_engine import TantivyIndex
from broker.registry import Registry
from broker.sync import IndexSync
from harvest_common import hsr_client
from harvest_common.errors import HsrClientError
from harvest_common.software import software_version
from harvest_common.stopping import stop_signal

DEFAULT_URL = "http://127.0.0.1:8501"
BOLD, PLAIN = "\x1b[1m", "\x1b[0m"
# Characters never printed from a remote answer: C0 and C1 controls (an object's title could
# otherwise move the cursor or retitle the terminal), except tab and newline.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _fail(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text!r}")
    return int(text)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e10:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="Harvest's Broker: collects SOIF summaries, indexes them, answers queries.",
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {software_version()}")
    commands = top.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the broker until SIGTERM or SIGINT")
    serve.add_argument("config", type=Path, help="the broker's TOML configuration")

    query = commands.add_parser("query", help="ask a running broker a query")
    query.add_argument("text", metavar="QUERY", help="e.g. 'Title: cache AND Author: wessels'")
    query.add_argument("--url", default=DEFAULT_URL, help=f"the broker (default {DEFAULT_URL})")
    query.add_argument("--limit", type=_count, default=10, help="results to show (default 10)")
    query.add_argument("--offset", type=_count, default=0, help="results to skip")
    query.add_argument("--case", action="store_true", help="case-sensitive matching")
    query.add_argument(
        "--federated",
        action="store_true",
        help="ask the brokers the broker's HSR picks, and merge their results",
    )
    query.add_argument("--json", action="store_true", help="print the API's JSON answer")
    query.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="bold matched words (auto: when printing to a terminal)",
    )
    query.add_argument("--timeout", type=_seconds, default=30.0, help="seconds to wait")

    collect = commands.add_parser(
        "collect", help="pull collections now (through the running broker, or --offline)"
    )
    collect.add_argument("names", nargs="*", metavar="COLLECTION", help="default: all")
    collect.add_argument("-c", "--config", type=Path, help="the broker's configuration")
    collect.add_argument("--url", help="the running broker (default: its configured listen)")
    collect.add_argument("--token", help="the admin token (default: the configured one)")
    collect.add_argument("--full", action="store_true", help="everything, not just changes")
    collect.add_argument(
        "--offline",
        action="store_true",
        help="pull straight into the data directory (the broker must not be running)",
    )

    register = commands.add_parser(
        "register", help="register a server (cache, gatherer, ...) at an HSR"
    )
    register.add_argument("--hsr", required=True, help="the HSR broker's URL")
    register.add_argument("--type", required=True, choices=hsr_client.TYPES, dest="kind")
    register.add_argument("--name", required=True)
    register.add_argument("--host", required=True)
    register.add_argument("--port", required=True, type=_port)
    register.add_argument("--url", help="where the server answers (default http://HOST:PORT/)")
    register.add_argument("--description", default="", help="what it holds or serves")
    register.add_argument("--admin", default="", help="who runs it (an address)")
    register.add_argument("--software-version", default="", help="what it runs")
    register.add_argument(
        "--ttl", type=_seconds, help="seconds the registration lasts (HSR default: 2 days)"
    )
    register.add_argument("--timeout", type=_seconds, default=30.0, help="seconds to wait")

    commands.add_parser("config-reference", help="print the configuration reference (Markdown)")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    level = logging.INFO if args.command == "serve" else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "config-reference":
            sys.stdout.write(reference())
            return 0
        if args.command == "query":
            return uvloop.run(_query(args))
        if args.command == "register":
            return uvloop.run(_register(args))
        config = _config(args.config) if args.config is not None else None
        if args.command == "serve":
            assert config is not None
            return uvloop.run(_serve(config))
        return _collect(args, config)
    except ConfigError as error:
        for problem in error.problems:
            _fail(problem)
        return 2
    except (BrokerError, OSError) as error:
        # OSError: a port already taken, a data directory that cannot be written.
        _fail(str(error))
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return 128 + signal.SIGINT


def _config(path: Path) -> Config:
    """The configuration at ``path``, with the CLI's own check: the collection name ``hsr``
    belongs to the server registry."""
    config = load(path)
    if config.collection(hsr.COLLECTION) is not None:
        raise ConfigError(
            [f"{path}: collections: the name {hsr.COLLECTION!r} is the server registry's"]
        )
    return config


# -- serve ----------------------------------------------------------------------------------


async def _serve(config: Config) -> int:
    async with await Broker.start(config) as broker:
        await _serving(config, broker)
    return 0


async def _serving(config: Config, broker: Broker) -> None:
    host, port = broker.address
    where = f"[{host}]" if ":" in host else host
    print(f"{PROG}: {config.broker.name} listening on http://{where}:{port}/", flush=True)
    await stop_signal()
    logging.getLogger(__name__).info("stopping")


# -- query ----------------------------------------------------------------------------------


def _clean(text: str) -> str:
    return _CONTROLS.sub("", text)


def _terminal(snippet_html: str, bold: bool) -> str:
    """An API snippet (escaped text, <mark> around matches) for a terminal."""
    out = []
    for piece, marked in html_parts(snippet_html):
        text = _clean(piece)
        out.append(f"{BOLD}{text}{PLAIN}" if marked and bold and text else text)
    return "".join(out)


def _caret(query: str, position: int) -> str:
    """The query and a caret under character ``position``."""
    shown = _clean(query.replace("\t", " "))
    return f"  {shown}\n  {' ' * min(position, len(shown))}^"


def print_results(answer: dict[str, Any], bold: bool) -> None:
    results = answer["results"]
    total = answer["total"]
    exact = "" if answer["exact"] else "at least "
    if not results:
        print(f"no results ({exact}{total} in all) for {_clean(answer['query'])}")
        return
    first = answer["offset"] + 1
    last = answer["offset"] + len(results)
    print(f"{first}-{last} of {exact}{total} for {_clean(answer['query'])}")
    for number, result in enumerate(results, first):
        title = _clean(result["title"])
        print(f"\n{number}. {BOLD}{title}{PLAIN}" if bold else f"\n{number}. {title}")
        print(f"   {_clean(result['url'])}")
        print(f"   {_clean(result['template'])} from {_clean(result['gatherer'])}")
        if "broker" in result:
            also = "".join(f", also {_clean(b['name'])}" for b in result["also"])
            print(f"   at {_clean(result['broker']['name'])}{also}")
        for snippet in result["snippets"]:
            attribute = _clean(snippet["attribute"])
            print(f"   {attribute}: {_terminal(snippet['html'], bold)}")


def print_brokers(answer: dict[str, Any]) -> None:
    """What each broker a federated search asked did."""
    print("\nbrokers asked:" if answer["brokers"] else "\nthe HSR knows no broker to ask")
    for broker in answer["brokers"]:
        where = f"{_clean(broker['name'])} ({_clean(broker['url'])})"
        if broker["outcome"] == "answered":
            print(f"  {where}: {broker['total']} results in {broker['seconds']:.2f} s")
        else:
            print(f"  {where}: {broker['outcome']}, {_clean(str(broker['error']))}")


async def _query(args: argparse.Namespace) -> int:
    params = {
        "q": args.text,
        "limit": str(max(1, args.limit)),
        "offset": str(args.offset),
        "case": "1" if args.case else "0",
        "federated": "1" if args.federated else "0",
    }
    url = args.url.rstrip("/") + "/api/search"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=args.timeout)) as session,
            session.get(url, params=params) as response,
        ):
            status = response.status
            answer = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        _fail(f"cannot query {url}: {type(error).__name__}: {error}")
        return 1
    if status == 400 and isinstance(answer, dict) and "position" in answer:
        _fail(f"the query does not parse: {_clean(answer['error'])}")
        print(_caret(args.text, int(answer["position"])), file=sys.stderr)
        return 2
    if status != 200 or not isinstance(answer, dict):
        reason = answer.get("error") if isinstance(answer, dict) else None
        _fail(f"{url} answered {status}: {_clean(str(reason))}")
        return 2 if status == 400 else 1
    if args.json:
        print(json.dumps(answer, indent=2, ensure_ascii=False))
        return 0
    bold = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    print_results(answer, bold)
    if args.federated:
        print_brokers(answer)
    return 0


# -- collect --------------------------------------------------------------------------------


def _collect(args: argparse.Namespace, config: Config | None) -> int:
    if args.offline:
        if config is None:
            raise ConfigError(["collect --offline needs the configuration (-c CONFIG)"])
        return uvloop.run(_collect_offline(config, args.names, args.full))
    url = args.url
    if url is None and config is not None:
        host, port = config.broker.listen
        host = "127.0.0.1" if host in hsr_client.WILDCARDS else host
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    token = args.token or (config.broker.admin_token if config is not None else None)
    return uvloop.run(_collect_online(url or DEFAULT_URL, token, args.names, args.full))


async def _collect_online(url: str, token: str | None, names: list[str], full: bool) -> int:
    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # No overall deadline: the broker bounds each pull by its pull_timeout.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    failed = 0
    try:
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            if not names:
                async with session.get(f"{base}/api/status") as response:
                    status = await response.json(content_type=None)
                names = [c["name"] for c in status["collections"] if c["scheduled"]]
            for name in names:
                params = {"wait": "1", "full": "1" if full else "0"}
                pull_url = f"{base}/api/admin/collections/{name}/pull"
                async with session.post(pull_url, params=params) as response:
                    answer = await response.json(content_type=None)
                    code = response.status
                if code == 200:
                    print(_pulled_line(name, answer.get("result") or {}))
                    continue
                _fail(f"{name}: {_clean(str(answer.get('error')))}")
                if code in (401, 403, 404):
                    return 2
                failed += 1
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as error:
        _fail(f"cannot reach the broker at {base}: {type(error).__name__}: {error}")
        return 1
    return 1 if failed else 0


def _pulled_line(name: str, result: dict[str, Any]) -> str:
    return (
        f"{name}: {result.get('items', 0)} items, {result.get('upserted', 0)} upserted,"
        f" {result.get('removed', 0)} removed, {result.get('refreshed', 0)} refreshed"
        f" ({'complete' if result.get('complete') else 'changes'},"
        f" {result.get('seconds', 0.0):.2f} s)"
    )


async def _collect_offline(config: Config, names: list[str], full: bool) -> int:
    wanted = names or [c.name for c in config.collections]
    unknown = [n for n in wanted if config.collection(n) is None]
    if unknown:
        raise ConfigError([f"no collection {n!r} in the configuration" for n in unknown])
    directory = config.broker.data_dir
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    failed = 0
    # The index first: its writer lock refuses a second process, so a running broker's data
    # directory is left alone (opening the registry would drop the broker's staged pulls).
    try:
        index = await TantivyIndex.open(directory / INDEX_DIR)
    except BrokerError as error:
        raise BrokerError(f"{error} (is the broker running? stop it, or collect online)") from None
    async with index, await Registry.open(directory / REGISTRY_FILE) as registry:
        sync = IndexSync(registry, index)
        await sync.after_opening()
        async with Collector(config.broker, registry) as collector:
            for name in wanted:
                collection = config.collection(name)
                assert collection is not None
                try:
                    result = await collector.pull(collection, now=time.time(), full=full)
                except CollectError as error:
                    _fail(f"{name}: {error.kind}: {error.reason}")
                    failed += 1
                    continue
                applied = result.applied
                print(
                    _pulled_line(
                        name,
                        {
                            "items": result.items,
                            "upserted": len(applied.upserted),
                            "removed": len(applied.removed),
                            "refreshed": applied.refreshed,
                            "complete": result.complete,
                            "seconds": result.seconds,
                        },
                    )
                )
        await sync.catch_up()
    return 1 if failed else 0


# -- register -------------------------------------------------------------------------------


async def _register(args: argparse.Namespace) -> int:
    try:
        record = hsr_client.server_record(
            args.kind,
            name=args.name,
            host=args.host,
            port=args.port,
            url=args.url,
            description=args.description,
            administrator=args.admin,
            version=args.software_version,
            ttl=args.ttl,
        )
    except ValueError as error:
        _fail(f"bad server record: {error}")
        return 2
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            answer = await hsr_client.register(args.hsr, record, session)
    except HsrClientError as error:
        _fail(error.reason)
        return 2 if error.kind == "refused" else 1
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(answer["expires"])))
    action = "renewed" if answer.get("renewed") else "registered"
    print(f"{action} {args.kind} {_clean(str(answer['url']))} until {expires}")
    return 0
