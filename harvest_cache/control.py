"""``harvest-cache purge URL`` and ``harvest-cache reload``: commands to a running cache.

Both read the configuration (``--config``, like the cache itself) to find it: PURGE goes to
the proxy's listener (so ``access.purge`` decides, loopback by default), reload to the admin
listener with ``admin.token``. Exit status 0 on success, 1 if the cache said no or could
not be reached, 2 for a bad configuration.
"""

from __future__ import annotations

import argparse
import http.client
import sys
from pathlib import Path

from harvest_cache.config import load
from harvest_common.config import Address
from harvest_common.errors import ConfigError

_TIMEOUT = 30.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harvest-cache", description="Commands to a running cache.")
    sub = p.add_subparsers(dest="command", required=True)
    purge = sub.add_parser("purge", help="drop a URL's object from the cache (PURGE)")
    purge.add_argument("url", help="the absolute http:// URL")
    purge.add_argument("--config", type=Path, help="the cache's TOML configuration")
    purge.add_argument("--listen", metavar="HOST:PORT", help="the cache's proxy address")
    reload = sub.add_parser("reload", help="make the cache read its configuration again")
    reload.add_argument("--config", type=Path, help="the cache's TOML configuration")
    reload.add_argument("--admin-listen", metavar="HOST:PORT", help="the admin address")
    return p


def _say(message: str) -> None:
    print(f"harvest-cache: {message}", file=sys.stderr)


def _exchange(
    address: Address, method: str, target: str, headers: dict[str, str]
) -> tuple[int, str]:
    conn = http.client.HTTPConnection(address.host, address.port, timeout=_TIMEOUT)
    try:
        conn.request(method, target, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8", "replace").strip()
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    overrides: dict[str, dict[str, str]] = {}
    if args.command == "purge" and args.listen:
        overrides["server"] = {"listen": args.listen}
    if args.command == "reload" and args.admin_listen:
        overrides["admin"] = {"listen": args.admin_listen}
    try:
        config = load(args.config, overrides)
    except ConfigError as e:
        for problem in e.problems:
            _say(problem)
        return 2
    try:
        if args.command == "purge":
            status, text = _exchange(config.server.listen, "PURGE", args.url, {})
            ok = status == 200
        else:
            admin = config.admin.listen
            if admin is None:
                _say("admin.listen is none: the cache has no admin listener to ask")
                return 1
            token = {"Authorization": f"Bearer {config.admin.token}"}
            status, text = _exchange(admin, "POST", "/cachemgr/reload", token)
            ok = status == 200
    except OSError as e:
        _say(f"cannot reach the cache: {e}")
        return 1
    print(f"{status} {text}")
    return 0 if ok else 1
