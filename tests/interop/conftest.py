"""Fixtures for comparing Harvest with Squid: a real Squid (Debian's package) as a
memory-only forward proxy on 127.0.0.1, and a raw HTTP client that talks to either proxy.

Squid runs as a child of the test process, in a process group of its own, and is stopped by
that group's id at teardown. One Squid serves a whole test module: the tests give every URL
a path of its own, so nothing one test stores can answer another's requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import no_blocking_calls
from tests.support import free_port, open_proxy, read_head, read_response, request_bytes

# Every test here fails if Harvest makes a blocking call on its event loop, as in
# tests/integration (Squid is started by a synchronous fixture: that blocks only the tests).
__all__ = ["no_blocking_calls"]

HOST = "127.0.0.1"
SQUID_START_SECONDS = 20.0
SQUID_STOP_SECONDS = 5.0

SQUID_CONF = """\
# Squid as a memory-only forward proxy for the interop tests: no cache_dir, ICP/HTCP off.
http_port {host}:{port}
workers 1
cache_mem 64 MB
maximum_object_size_in_memory 1 MB
memory_cache_mode always
cache allow all
http_access allow localhost
http_access deny all
icp_port 0
htcp_port 0
pinger_enable off
shutdown_lifetime 0 seconds
visible_hostname localhost
dns_nameservers {host}
max_filedescriptors 1024
{effective_user}pid_filename {dir}/squid.pid
cache_log {dir}/cache.log
access_log stdio:{dir}/access.log squid
buffered_logs off
cache_store_log none
netdb_filename none
logfile_rotate 0
coredump_dir {dir}
{extra}"""

# The refresh_pattern lines of Debian's stock /etc/squid/squid.conf (Squid 5.7). Without any
# refresh_pattern line Squid applies a built-in rule, under which (as observed in these tests)
# it never serves a stale copy once validation fails; with these it does, up to max_stale.
DEBIAN_REFRESH_PATTERNS = """\
refresh_pattern ^ftp:\t\t1440\t20%\t10080
refresh_pattern ^gopher:\t1440\t0%\t1440
refresh_pattern -i (/cgi-bin/|\\?) 0\t0%\t0
refresh_pattern .\t\t0\t20%\t4320
"""


def find_squid() -> str | None:
    """The squid binary: on PATH, or where Debian's package puts it (/usr/sbin)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
    return shutil.which("squid", path=path)


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"({path} unreadable: {e})"
    return "\n".join(text.splitlines()[-lines:])


@dataclasses.dataclass
class Squid:
    """A running Squid: its port, version line and files."""

    port: int
    version: str
    dir: Path
    proc: subprocess.Popen[bytes]

    @property
    def cache_log(self) -> Path:
        return self.dir / "cache.log"

    @property
    def access_log(self) -> Path:
        return self.dir / "access.log"

    def access_lines(self) -> list[str]:
        try:
            return self.access_log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []


def squid_version(squid: str) -> str:
    """The first line of ``squid -v``, e.g. "Squid Cache: Version 5.7"."""
    out = subprocess.run([squid, "-v"], capture_output=True, timeout=30, check=False)
    return out.stdout.decode(errors="replace").splitlines()[0].strip()


def _accepting(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        try:
            s.connect((HOST, port))
        except OSError:
            return False
        return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_squid(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM Squid's process group, SIGKILL it after SQUID_STOP_SECONDS; reap the leader."""
    pgid = proc.pid  # started with start_new_session: it leads its own group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(SQUID_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        proc.wait(SQUID_STOP_SECONDS)
    # Anything the leader left in its group (it starts no helpers in this configuration).
    deadline = time.monotonic() + SQUID_STOP_SECONDS
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def running_squid(extra_conf: str = "") -> Iterator[Squid]:
    """Start a fresh Squid on a free port, configured by SQUID_CONF plus ``extra_conf`` (where
    ``$SQUID_DIR`` names its working directory); stop it (and remove its files) afterwards."""
    squid = find_squid()
    if squid is None:
        pytest.fail(
            "squid is not installed (Debian: apt-get install squid; scripts/test.sh does it):"
            " the interop tests compare Harvest with it and cannot run without it"
        )
    version = squid_version(squid)
    workdir = Path(tempfile.mkdtemp(prefix="harvest-interop-squid-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        os.chmod(workdir, 0o755)
        effective_user = ""
        if os.geteuid() == 0:
            # Squid drops root for cache_effective_user, which must own its log directory.
            try:
                user = pwd.getpwnam("proxy")
            except KeyError:
                pytest.fail("running as root, but there is no user 'proxy' for Squid to become")
            os.chown(workdir, user.pw_uid, user.pw_gid)
            effective_user = "cache_effective_user proxy\n"
        port = free_port()
        conf = workdir / "squid.conf"
        extra_conf = extra_conf.replace("$SQUID_DIR", str(workdir))  # (Squid's user owns it)
        conf.write_text(
            SQUID_CONF.format(
                host=HOST, port=port, dir=workdir, effective_user=effective_user, extra=extra_conf
            )
        )
        if "cache_dir" in extra_conf:
            # A disk cache needs its directories made first (squid -z), as a service's would.
            made = subprocess.run(
                [squid, "-N", "-z", "-f", str(conf)], capture_output=True, timeout=60, check=False
            )
            if made.returncode != 0:
                pytest.fail(f"squid -z failed:\n{made.stdout.decode()}{made.stderr.decode()}")
        with (workdir / "stderr.log").open("wb") as out:
            proc = subprocess.Popen(
                [squid, "-N", "-f", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + SQUID_START_SECONDS
        while not _accepting(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                why = "exited" if proc.poll() is not None else "did not listen in time"
                pytest.fail(
                    f"Squid {why} (port {port}).\n--- cache.log ---\n"
                    f"{tail(workdir / 'cache.log')}\n--- stderr ---\n"
                    f"{tail(workdir / 'stderr.log')}"
                )
            time.sleep(0.05)
        yield Squid(port, version, workdir, proc)
    finally:
        if proc is not None:
            stop_squid(proc)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def squid() -> Iterator[Squid]:
    """A Squid for the whole test module (every test uses URL paths of its own)."""
    with running_squid() as running:
        yield running


@pytest.fixture(scope="module")
def stock_squid() -> Iterator[Squid]:
    """Another Squid, with the refresh_pattern lines of Debian's stock configuration."""
    with running_squid(DEBIAN_REFRESH_PATTERNS) as running:
        yield running


# -- a raw HTTP/1.1 client for either proxy ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reply:
    """One response as a client of the proxy saw it."""

    status: int
    fields: tuple[tuple[str, str], ...]
    body: bytes

    def get(self, name: str) -> str | None:
        values = [v for n, v in self.fields if n.lower() == name.lower()]
        return ", ".join(values) if values else None

    def __repr__(self) -> str:
        return f"<Reply {self.status} {list(self.fields)!r} body={self.body[:60]!r}>"


async def send(
    port: int,
    method: str,
    url: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    *,
    until_close: bool = False,
    within: float = 10.0,
) -> Reply:
    """One request (absolute form) on a new connection to the proxy at 127.0.0.1:``port``.

    Only the given fields and Host (and Content-Length for a body) are sent, so that the
    scenarios control exactly what the caches see (no Accept-Encoding slipped in). The body
    is read as the response frames it; with ``until_close`` the request asks the proxy to
    close and the body is whatever follows the head until it does, so a response whose
    Content-Length is wrong is seen as it is instead of hanging the read.
    """
    fields = list(headers or [])
    if until_close:
        fields.append(("Connection", "close"))
    reader, writer = await open_proxy(port)
    try:
        writer.write(request_bytes(method, url, headers=fields, body=body))
        await writer.drain()
        if until_close:
            async with asyncio.timeout(within):
                status, _, got = await read_head(reader)
                rest = await reader.read(-1)
            return Reply(status, tuple(got), rest)
        raw = await read_response(reader, method=method, within=within)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return Reply(raw.status, tuple(raw.fields), raw.body)
