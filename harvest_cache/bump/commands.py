"""``harvest-cache ca init|show|export``: the interception CA, made and handed to clients.

The CA lives where the configuration says (``bump.ca_dir``, else ``ca`` in the cache's
directory), or in ``--dir``. Exit status 0 on success, 1 if the CA cannot be made or read,
2 for a bad configuration.
"""

from __future__ import annotations

import argparse
import datetime
import socket
import sys
from pathlib import Path

from harvest_cache.bump import authority
from harvest_cache.config import ca_directory, load
from harvest_cache.errors import AuthorityError
from harvest_common.errors import ConfigError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harvest-cache ca", description="The certificate authority for interception."
    )
    sub = p.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="make the CA (once; its key is readable by you alone)")
    show = sub.add_parser("show", help="print the CA's subject, validity and fingerprint")
    export = sub.add_parser("export", help="write the CA's certificate for browsers and OSes")
    export.add_argument(
        "--format", choices=("pem", "der"), default="pem", help="PEM (default) or DER"
    )
    export.add_argument("--out", type=Path, help="file to write (default: standard output)")
    for command in (init, show, export):
        command.add_argument("--config", type=Path, help="the cache's TOML configuration")
        command.add_argument("--dir", type=Path, help="the CA's directory (default: from it)")
    return p


def _say(message: str) -> None:
    print(f"harvest-cache ca: {message}", file=sys.stderr)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        config = load(args.config)
    except ConfigError as e:
        for problem in e.problems:
            _say(problem)
        return 2
    directory = args.dir if args.dir is not None else ca_directory(config)
    try:
        if args.command == "init":
            name = config.server.name or socket.gethostname()
            made = authority.create(directory, name, datetime.datetime.now(datetime.UTC))
            print(f"made the CA in {directory}\n{made.describe()}")
            return 0
        ca = authority.load(directory)
        if args.command == "show":
            print(f"{directory}\n{ca.describe()}")
            return 0
        exported = ca.export(args.format)
        if args.out is None:
            sys.stdout.buffer.write(exported)
        else:
            args.out.write_bytes(exported)
        return 0
    except AuthorityError as e:
        _say(str(e))
        return 1
    except OSError as e:
        _say(f"cannot write {args.out}: {e.strerror}")
        return 1
