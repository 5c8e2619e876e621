"""``harvest-replicator``: run a member of replication groups, check its configuration, show
a running member's status, and print the configuration reference.

::

    harvest-replicator serve CONFIG
    harvest-replicator check-config CONFIG
    harvest-replicator status [--url URL]
    harvest-replicator config-reference

Exit status: 0 done; 1 a run-time failure (a port taken, the state unreadable, the member
unreachable); 2 a bad command line or configuration.

Signals: SIGTERM or SIGINT stops ``serve`` cleanly (its loops end, the state is saved, the
server and sessions close), with status 0; a second signal takes its default action.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import uvloop

from harvest_common import hsr_client
from harvest_common.errors import ReplicatorError
from harvest_common.software import software_version
from harvest_common.stopping import stop_signal
from replicator.config import Config, load, reference
from replicator.errors import ConfigError
from replicator.node import Node

PROG = "harvest-replicator"
DEFAULT_URL = "http://127.0.0.1:8502"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description="Harvest's replicator.")
    commands = top.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run this member of its replication groups")
    serve.add_argument("config", type=Path, help="the TOML configuration")
    check = commands.add_parser("check-config", help="check a configuration and exit")
    check.add_argument("config", type=Path)
    status = commands.add_parser("status", help="print a running member's status (JSON)")
    status.add_argument("--url", default=DEFAULT_URL, help=f"the member (default {DEFAULT_URL})")
    commands.add_parser("config-reference", help="print every configuration key (Markdown)")
    return top


def _fail(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    level = logging.INFO if args.command == "serve" else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "config-reference":
            sys.stdout.write(reference())
            return 0
        if args.command == "status":
            return uvloop.run(_status(args.url))
        config = load(args.config)
        if args.command == "check-config":
            groups = ", ".join(g.collection for g in config.groups) or "none"
            print(f"{args.config}: member {config.member}, groups: {groups}")
            return 0
        return uvloop.run(_serve(config))
    except ConfigError as error:
        for problem in error.problems:
            _fail(problem)
        return 2
    except (ReplicatorError, OSError) as error:
        _fail(str(error))
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C while stopping
        return 128 + signal.SIGINT


async def _serve(config: Config) -> int:
    async with await Node.start(config) as node:
        host, port = node.address
        version = f"{PROG} {await asyncio.to_thread(software_version)}"
        advertised = config.replicator.advertise or node.address
        async with hsr_client.registered(
            config.hsr, "replicator", config.member, advertised, version
        ):
            print(f"{PROG}: {config.member} listening on http://{host}:{port}/", flush=True)
            await stop_signal()
            logging.getLogger(__name__).info("stopping")
    return 0


async def _status(url: str) -> int:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(url.rstrip("/") + "/api/status") as response,
        ):
            if response.status != 200:
                _fail(f"{url} answered {response.status}")
                return 1
            status = await response.json()
    except (aiohttp.ClientError, TimeoutError) as error:
        _fail(f"{url}: {type(error).__name__}: {error}")
        return 1
    json.dump(status, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
