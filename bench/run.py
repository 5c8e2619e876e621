#!/usr/bin/env python3
"""Load benchmark of harvest-cache against Squid, run by hand (never in CI).

    python bench/run.py [--duration 10] [--repeats 3] [--connections 64]
                        [--scenarios hit-1k,miss] [--only squid|harvest]
    python bench/run.py --calibrate       # how fast each candidate origin is on its own
    python bench/run.py --disk --memory-mb 64 [--disk-mb 2048] [--squid-store aufs|rock]

Each system is started fresh, pinned to core 0; the origin and wrk share core 1. Each scenario
is warmed, then measured ``--repeats`` times for ``--duration`` seconds; the medians are printed
with the Harvest/Squid ratios and written to bench/results/latest.json. By default both proxies
keep their cache in memory only; ``--disk`` gives both a disk store too (Squid a cache_dir) and
runs the disk scenarios instead, into bench/results/latest-disk.json. See bench/README.md.

Every process this starts runs in a session (and so a process group) of its own and is stopped
by that group's id, also on Ctrl-C or SIGTERM; only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import functools
import http.client
import json
import os
import platform
import pwd
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
LUA = BENCH / "proxy.lua"
ORIGIN_SCRIPT = BENCH / "origin.py"
VENV_PY = REPO / ".venv" / "bin" / "python"
HARVEST_BIN = REPO / ".venv" / "bin" / "harvest-cache"
DEFAULT_OUTPUT = BENCH / "results" / "latest.json"
DEFAULT_DISK_OUTPUT = BENCH / "results" / "latest-disk.json"
HOST = "127.0.0.1"
PROXY_CPU = "0"
ALL_CPUS = "0,1"
ORIGIN_CPU = "1"
CLIENT_CPU = "1"
MIB = 1024 * 1024
SIZES = {"1k": 1024, "16k": 16 * 1024, "256k": 256 * 1024, "4m": 4 * MIB}
SYSTEMS = ("squid", "harvest")
# Tools the benchmark needs and the Debian package that ships each.
PACKAGES = {"squid": "squid", "wrk": "wrk", "nginx": "nginx", "taskset": "util-linux"}


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # "hit", "miss" or "reval"
    size: str  # body size key of SIZES ("miss": 1k or 16k)
    urls: int  # distinct URLs cycled through ("miss": every URL is new)
    expect: str  # the access-log result code that shows the proxy did the expected thing
    target: float | None  # the Harvest/Squid req/s ratio the issue asks for, if any
    about: str
    pick: str = "list"  # how wrk goes through the URLs: "list" cycles, "random" at random
    restart: bool = False  # after warming, stop the proxy and start it again on its store
    # Concurrent requests for one URL may share one origin request (collapsed forwarding),
    # so fewer origin requests than requests is no fault.
    collapses: bool = False


SCENARIOS = (
    Scenario("hit-1k", "hit", "1k", 16, "HIT", 2.0, "memory hits on 16 warm 1 KiB objects"),
    Scenario("hit-16k", "hit", "16k", 16, "HIT", 3.0, "memory hits on 16 warm 16 KiB objects"),
    Scenario("hit-256k", "hit", "256k", 16, "HIT", 8.0, "memory hits on 16 warm 256 KiB objects"),
    Scenario("hit-4m", "hit", "4m", 16, "HIT", 5.0, "memory hits on 16 warm 4 MiB objects"),
    # urls 0: set from --memory-mb, a working set of half the memory tier (see parse_args).
    Scenario(
        "hit-spread",
        "hit",
        "16k",
        0,
        "HIT",
        None,
        "memory hits on 16 KiB objects filling half the memory tier, asked for at random",
        pick="random",
    ),
    Scenario(
        "reval", "reval", "1k", 256, "REFRESH", 1.5, "max-age=0 objects revalidated (304) by ETag"
    ),
    # Last: the storm fills the memory tier, and a full tier slows the admission of new objects.
    Scenario("miss", "miss", "1k", 0, "MISS", 1.5, "unique cacheable 1 KiB URLs, never repeated"),
)
# With --disk: both proxies with a disk store as well (see "Disk mode" in bench/README.md).
DISK_SCENARIOS = (
    Scenario(
        "reval-one",
        "reval",
        "1k",
        1,
        "REFRESH",
        None,
        "every connection revalidating one max-age=0 object at once (collapsible)",
        collapses=True,
    ),
    # urls 0: set from --memory-mb, a working set 4 times the memory tier (see parse_args).
    Scenario(
        "disk-hit",
        "hit",
        "16k",
        0,
        "HIT",
        None,
        "16 KiB objects, 4 x the memory tier, warmed once, asked for at random",
        pick="random",
    ),
    Scenario(
        "restart-hit",
        "hit",
        "16k",
        2048,
        "HIT",
        None,
        "2,048 warm 16 KiB objects asked for at random after a restart on the same store",
        pick="random",
        restart=True,
    ),
    # Last, as in memory mode: the storms fill the stores.
    Scenario("miss-1k", "miss", "1k", 0, "MISS", None, "unique cacheable 1 KiB URLs, stored"),
    Scenario("miss-16k", "miss", "16k", 0, "MISS", None, "unique cacheable 16 KiB URLs, stored"),
)
DISK_HIT_SET = 4  # disk-hit's working set, in memory tiers
SPREAD_SET = 0.5  # hit-spread's, likewise
RSS_SLACK_MIB = 150  # the miss storm's peak RSS may exceed the memory tier by this much


class BenchError(Exception):
    pass


def say(*parts: object) -> None:
    print(*parts, flush=True)


# -- processes ---------------------------------------------------------------------------------


class Processes:
    """Every process the benchmark starts, each the leader of a new session and process group."""

    def __init__(self) -> None:
        self.live: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], log: Path | None, cpu: str | None) -> subprocess.Popen[bytes]:
        cmd = ["taskset", "-c", cpu, *argv] if cpu is not None else argv
        out: Any = subprocess.DEVNULL
        if log is not None:
            out = log.open("ab")
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out if log is not None else subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if log is not None:
                out.close()
        self.live.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds, reap the leader."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        # Helpers the leader left behind (Squid's log daemon, say) share its group.
        deadline = time.monotonic() + grace
        while group_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            if group_pids(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
        if proc in self.live:
            self.live.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self.live)):
            self.stop(proc)


class MemoryCgroup:
    """A memory cgroup bounding a proxy's memory, page cache included, to ``limit_mb``: its
    disk writes then reuse page-cache pages, as on a cache server whose memory is in use,
    instead of taking memory the machine has never used (see "A cache server's memory" in
    bench/README.md). cgroup v2 (``memory.max``) or v1 (``memory.limit_in_bytes``)."""

    def __init__(self, name: str, limit_mb: int) -> None:
        v2 = Path("/sys/fs/cgroup")
        controllers = v2 / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split():
            self.dir, limit_file = v2 / name, "memory.max"
        elif (v2 / "memory" / "memory.limit_in_bytes").exists():
            self.dir, limit_file = v2 / "memory" / name, "memory.limit_in_bytes"
        else:
            raise BenchError(
                "no memory cgroup controller (v2 or v1) under /sys/fs/cgroup: run as root on a"
                " host with one, or pass --memory-cgroup-mb 0"
            )
        try:
            self.dir.mkdir(exist_ok=True)
            (self.dir / limit_file).write_text(str(limit_mb * MIB))
        except OSError as e:
            raise BenchError(f"cannot make memory cgroup {self.dir}: {e}") from None
        self.limit_mb = limit_mb

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run in the cgroup (the shell joins it, then becomes the command)."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.dir / "cgroup.procs"), *argv]

    def remove(self) -> None:
        """Remove the cgroup once its processes are gone (their page cache moves up)."""
        deadline = time.monotonic() + 5
        while True:
            try:
                self.dir.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    say(f"warning: memory cgroup {self.dir} left behind")
                    return
                time.sleep(0.1)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3, state, is index 0)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = _stat_fields(int(entry))
            if f is not None and int(f[2]) == pgid and f[0] != "Z":
                pids.append(int(entry))
    return pids


def cpu_seconds(pgid: int) -> float:
    """User plus system CPU time of every live process in the group."""
    ticks = 0
    for pid in group_pids(pgid):
        f = _stat_fields(pid)
        if f is not None:
            ticks += int(f[11]) + int(f[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def core_seconds() -> dict[str, tuple[float, float]]:
    """Per core: (user + nice + system, steal) seconds so far, from /proc/stat."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for line in Path("/proc/stat").read_text().splitlines():
        name, *rest = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            t = [int(x) for x in rest]
            out[name[3:]] = ((t[0] + t[1] + t[2]) / tick, t[7] / tick)
    return out


def reset_peak_rss(pgid: int) -> bool:
    """Reset VmHWM to the current RSS (``echo 5 > /proc/PID/clear_refs``) in the whole group."""
    ok = True
    for pid in group_pids(pgid):
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


def peak_rss_mib(pgid: int) -> float:
    """Sum of VmHWM over the group's processes (an upper bound of their joint peak)."""
    kib = 0
    for pid in group_pids(pgid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    kib += int(line.split()[1])
    return kib / 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"exited with status {proc.returncode} before listening")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.1)
    raise BenchError(f"not listening on {HOST}:{port} after {timeout:.0f} s")


def tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in text[-lines:])


# -- tools -------------------------------------------------------------------------------------


def find_tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin", "/usr/local/sbin"):
        if os.access(f"{d}/{name}", os.X_OK):
            return f"{d}/{name}"
    return None


def ensure_tools(names: list[str]) -> dict[str, str]:
    """Install missing tools with apt-get (``apt-get update`` once first); return their paths."""
    missing = [n for n in names if find_tool(n) is None]
    if missing:
        apt_install(sorted({PACKAGES[n] for n in missing}), what=", ".join(missing))
    paths = {}
    for n in names:
        p = find_tool(n)
        if p is None:
            raise BenchError(f"{n} is still missing after apt-get install")
        paths[n] = p
    return paths


def apt_install(packages: list[str], what: str) -> None:
    """Install Debian ``packages`` with apt-get (``apt-get update`` first); ``what`` names what
    is missing, for the error when not root."""
    if os.geteuid() != 0:
        raise BenchError(f"missing {what}; install them or run as root")
    say(f"installing {' '.join(packages)} with apt-get ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        check=True,
        env=env,
        timeout=1200,
    )


def version_of(argv: list[str], any_status: bool = False) -> str:
    """First line a version command prints; "unknown" if it fails (wrk -v exits 1 anyway)."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (out.stdout + out.stderr).strip().splitlines()
    return lines[0].strip() if lines and (out.returncode == 0 or any_status) else "unknown"


# -- the origin --------------------------------------------------------------------------------

NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections 8192;
    multi_accept on;
}}
http {{
    access_log off;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 10000000;
    open_file_cache max=64 inactive=600s;
    etag on;
    server {{
        listen {host}:{port} backlog=4096;
        root {dir}/www;
        location /obj/ {{
            add_header Cache-Control "max-age=3600";
        }}
        location /miss/ {{
            add_header Cache-Control "max-age=3600";
            try_files /miss.bin =404;
        }}
        location /miss16k/ {{
            add_header Cache-Control "max-age=3600";
            try_files /miss16k.bin =404;
        }}
        location /reval/ {{
            add_header Cache-Control "max-age=0";
            try_files /reval.bin =404;
        }}
{extra_locations}        location = /__stats {{
            stub_status;
        }}
    }}
}}
"""


class Origin:
    """nginx serving static files, or bench/origin.py; both count the requests they answer."""

    def __init__(
        self,
        kind: str,
        procs: Processes,
        workdir: Path,
        cpu: str,
        extra_locations: str = "",
        extra_files: dict[str, bytes] | None = None,
    ) -> None:
        """``extra_locations``: nginx ``location`` blocks added to the server (for other
        benchmarks, e.g. bench/hierarchy.py); ``extra_files``: files written below nginx's
        document root, by path relative to it. Both are for nginx only."""
        if kind != "nginx" and (extra_locations or extra_files):
            raise BenchError("extra locations and files need the nginx origin")
        self.kind = kind
        self.port = free_port()
        self.dir = workdir / f"origin-{kind}"
        self.dir.mkdir(parents=True)
        self.log = self.dir / "origin.log"
        if kind == "nginx":
            www = self.dir / "www"
            (www / "obj").mkdir(parents=True)
            for name, size in SIZES.items():
                (www / "obj" / name).write_bytes(os.urandom(size))
            (www / "miss.bin").write_bytes(os.urandom(1024))
            (www / "miss16k.bin").write_bytes(os.urandom(SIZES["16k"]))
            (www / "reval.bin").write_bytes(os.urandom(1024))
            for rel, body in (extra_files or {}).items():
                (www / rel).parent.mkdir(parents=True, exist_ok=True)
                (www / rel).write_bytes(body)
            conf = self.dir / "nginx.conf"
            conf.write_text(
                NGINX_CONF.format(
                    dir=self.dir, host=HOST, port=self.port, extra_locations=extra_locations
                )
            )
            nginx = find_tool("nginx") or "nginx"
            argv = [nginx, "-p", str(self.dir), "-e", str(self.dir / "error.log"), "-c", str(conf)]
            self.version = version_of([nginx, "-v"])
        else:
            argv = [str(VENV_PY), str(ORIGIN_SCRIPT), "--listen", f"{HOST}:{self.port}"]
            self.version = "bench/origin.py (asyncio on uvloop)"
        self.proc = procs.start(argv, self.log, cpu)
        try:
            wait_listening(self.port, self.proc, 15)
        except BenchError as e:
            raise BenchError(f"origin ({kind}) {e}\n{tail(self.log)}") from None

    @property
    def hostport(self) -> str:
        return f"{HOST}:{self.port}"

    def requests_served(self) -> int:
        """Requests answered so far, counting this query (so subtract 1 from a difference)."""
        conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        try:
            conn.request("GET", "/__stats")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        if self.kind == "nginx":  # stub_status: "... accepts handled requests\n A H R"
            return int(text.splitlines()[2].split()[2])
        return int(text.split()[1])

    def etag(self, path: str) -> str:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            return resp.getheader("ETag") or ""
        finally:
            conn.close()


# -- the proxies -------------------------------------------------------------------------------

SQUID_CONF = """\
# Squid as a {about} forward proxy: one worker, ICP/HTCP off.
http_port {host}:{port}
workers 1
cache_mem {memory_mb} MB
maximum_object_size_in_memory {max_in_memory}
maximum_object_size 64 MB
{cache_dir}memory_cache_mode always
cache allow all
http_access allow localhost
http_access deny all
icp_port 0
htcp_port 0
pinger_enable off
dns_nameservers {host}
visible_hostname localhost
max_filedescriptors {max_fds}
cache_effective_user proxy
pid_filename {dir}/squid.pid
cache_log {dir}/cache.log
{access_log}
cache_store_log none
netdb_filename none
logfile_rotate 0
coredump_dir {dir}
shutdown_lifetime 0 seconds
"""

HARVEST_TOML = """\
# harvest-cache as a {about} forward proxy, sized like Squid's cache_mem{and_dir}.
[server]
listen = "{host}:{port}"

[cache]
dir = "{dir}/cache"
memory_mb = {memory_mb}
disk_mb = {disk_mb}
{memory_max}
[log]
access_log = "{access_log}"
level = "warning"
"""
MEMORY_ONLY_LIMIT = """\
# Squid's maximum_object_size_in_memory is 8 MB: keep 4 MiB objects in memory here too.
memory_max_object_kb = 8192
"""
# With a disk store both keep what they ship with: 512 KiB objects at most in memory.
DISK_LIMIT = "# memory_max_object_kb: its default (512), as Squid's in memory.\n"
SQUID_STORES = ("aufs", "rock")


class Proxy:
    def __init__(
        self,
        system: str,
        procs: Processes,
        workdir: Path,
        memory_mb: int,
        access_log: bool,
        harvest_cmd: list[str] | None,
        icp_port: int | None = None,
        extra_conf: str = "",
        workers: int = 1,
        disk_mb: int = 0,
        squid_store: str = "aufs",
        port_options: str = "",
        cgroup: MemoryCgroup | None = None,
    ) -> None:
        """``port_options``: Squid's options of its http_port (bench/https.py's ssl-bump).
        ``icp_port``: answer ICP queries from 127.0.0.0/8 on this UDP port (default: ICP
        off, as in this benchmark); ``extra_conf``: lines appended to the configuration (Squid
        directives, or TOML for harvest-cache); ``workers``: processes, then on every core
        (Squid's ``workers``, harvest-cache's ``--workers``). All three are for other
        benchmarks (bench/icp.py, bench/workers.py). ``disk_mb``: a disk store of this size
        besides the memory tier (0: memory only), for Squid a ``cache_dir`` of type
        ``squid_store`` (aufs or rock) made with ``squid -z`` first. ``cgroup``: run in
        this memory cgroup."""
        self.system = system
        self.icp_port = icp_port
        self.procs = procs
        self.port = free_port()
        self.admin_port: int | None = None  # harvest-cache's, for its metrics
        self.dir = workdir / system
        self.dir.mkdir(parents=True)
        self.log = self.dir / "stderr.log"
        self.access_log = self.dir / "access.log" if access_log else None
        self.disk_mb = disk_mb
        about = "memory-only" if not disk_mb else f"memory and disk ({disk_mb} MB)"
        if system == "squid":
            squid = find_tool("squid") or "squid"
            self.version = version_of([squid, "-v"])
            log_line = (
                f"access_log daemon:{self.access_log} squid" if access_log else "access_log none"
            )
            if squid_store not in SQUID_STORES:
                raise BenchError(f"unknown Squid store {squid_store!r}: aufs or rock")
            cache_dir = ""
            if disk_mb and squid_store == "aufs":
                cache_dir = f"cache_dir aufs {self.dir}/cache_dir {disk_mb} 16 256\n"
            elif disk_mb:
                cache_dir = f"cache_dir rock {self.dir}/rock {disk_mb}\n"
            conf = self.dir / "squid.conf"
            text = SQUID_CONF.format(
                about=about if not disk_mb else f"{about}, {squid_store}",
                host=HOST,
                port=self.port,
                memory_mb=memory_mb,
                max_in_memory="512 KB" if disk_mb else "8 MB",
                cache_dir=cache_dir,
                dir=self.dir,
                access_log=log_line,
                max_fds=resource.getrlimit(resource.RLIMIT_NOFILE)[1],
            )
            text = text.replace("workers 1\n", f"workers {workers}\n")
            if port_options:
                listen = f"http_port {HOST}:{self.port}\n"
                text = text.replace(listen, f"{listen[:-1]} {port_options}\n")
            if icp_port:  # on the wildcard address: Squid drops ICP from its own socket's IP
                text = text.replace(
                    "icp_port 0\n",
                    f"icp_port {icp_port}\nicp_access allow localhost\nicp_access deny all\n",
                )
            conf.write_text(text + extra_conf)
            with contextlib.suppress(KeyError):  # Squid drops root for this user
                user = pwd.getpwnam("proxy")
                os.chown(self.dir, user.pw_uid, user.pw_gid)
            # -N runs one process whatever `workers` says; SMP needs the master in front.
            argv = [squid, "-N" if workers == 1 else "--foreground", "-f", str(conf)]
            self.error_log = self.dir / "cache.log"
            if disk_mb:
                self._make_swap_dirs(squid, conf)
        else:
            if harvest_cmd is None:
                raise BenchError(
                    f"{HARVEST_BIN.relative_to(REPO)} does not exist and harvest_cache.cli is not"
                    " importable: the proxy is not built yet"
                )
            conf = self.dir / "harvest.toml"
            text = HARVEST_TOML.format(
                about=about,
                and_dir=" and cache_dir" if disk_mb else "",
                host=HOST,
                port=self.port,
                memory_mb=memory_mb,
                disk_mb=disk_mb,
                memory_max=DISK_LIMIT if disk_mb else MEMORY_ONLY_LIMIT,
                dir=self.dir,
                access_log=self.access_log or "none",
            )
            if icp_port:
                text += f'\n[icp]\nport = {icp_port}\nallow = ["127.0.0.0/8"]\n'
            if "[admin]" not in extra_conf and has_admin_listener(tuple(harvest_cmd)):
                # On as shipped, but on a port of its own: the default, 3129, clashes with any
                # other harvest-cache on the host (another benchmark's, a test's).
                self.admin_port = free_port()
                text += f'\n[admin]\nlisten = "{HOST}:{self.admin_port}"\n'
            conf.write_text(text + extra_conf)
            argv = [
                *harvest_cmd,
                "--config",
                str(conf),
                "--listen",
                f"{HOST}:{self.port}",
                "--cache-dir",
                str(self.dir / "cache"),
                "--memory-mb",
                str(memory_mb),
                "--disk-mb",
                str(disk_mb),
            ]
            self.version = version_of([*harvest_cmd, "--version"])
            self.error_log = self.log
        if workers > 1:
            argv = [*argv, "--workers", str(workers)] if system == "harvest" else argv
        self.argv = argv
        self.cpu = PROXY_CPU if workers == 1 else ALL_CPUS
        self.cgroup = cgroup
        self.start()

    def start(self) -> None:
        """Start the proxy (again, after ``restart``'s stop) and wait until it serves."""
        log_from = self.error_log.stat().st_size if self.error_log.exists() else 0
        argv = self.argv if self.cgroup is None else self.cgroup.wrap(self.argv)
        self.proc = self.procs.start(argv, self.log, self.cpu)
        try:
            wait_listening(self.port, self.proc, 30)
            if self.system == "squid" and self.disk_mb:
                self._wait_rebuilt(log_from)
        except BenchError as e:
            self.stop()
            raise BenchError(f"{e}\n{tail(self.log)}\n{tail(self.error_log)}") from None

    def restart(self, grace: float = 30.0) -> tuple[float, bool]:
        """Stop the proxy with SIGTERM as an operator would, and start it again on the same
        configuration, port and store. Returns the seconds it took to stop, and whether it
        stopped by itself within ``grace`` (else it was killed, so not a graceful restart)."""
        began = time.monotonic()
        self.procs.stop(self.proc, grace=grace)
        took = time.monotonic() - began
        graceful = self.proc.returncode != -signal.SIGKILL
        self.start()
        return took, graceful

    def _make_swap_dirs(self, squid: str, conf: Path) -> None:
        """``squid -z``: create the cache_dir (aufs: its 16 x 256 directories; rock: its
        database file) before Squid first starts, as an operator does once."""
        proc = self.procs.start([squid, "-z", "-N", "-f", str(conf)], self.log, PROXY_CPU)
        try:
            proc.wait(300)
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"squid -z did not finish in 300 s\n{tail(self.dir / 'cache.log')}"
            ) from None
        finally:
            self.procs.stop(proc)
        if proc.returncode != 0:
            raise BenchError(
                f"squid -z exited with status {proc.returncode}\n{tail(self.log)}\n"
                f"{tail(self.dir / 'cache.log')}"
            )

    def _wait_rebuilt(self, log_from: int, timeout: float = 120.0) -> None:
        """Wait until Squid has indexed its cache_dir: it accepts requests before that, and
        answers those for objects not yet indexed as misses."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"exited with status {self.proc.returncode} while rebuilding")
            with contextlib.suppress(OSError), self.error_log.open("rb") as f:
                f.seek(log_from)
                if b"Finished rebuilding storage from disk" in f.read():
                    return
            time.sleep(0.1)
        raise BenchError(f"its cache_dir was not rebuilt within {timeout:.0f} s")

    @property
    def pgid(self) -> int:
        return self.proc.pid

    def get(self, url: str, expect_len: int) -> None:
        """One request through the proxy; raise unless it is a 200 of the expected length."""
        conn = http.client.HTTPConnection(HOST, self.port, timeout=30)
        try:
            conn.request("GET", url)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise BenchError(f"GET {url} through {self.system}: {e!r}") from None
        finally:
            conn.close()
        if resp.status != 200 or len(body) != expect_len:
            raise BenchError(
                f"GET {url} through {self.system}: status {resp.status}, {len(body)} bytes"
                f" (expected 200, {expect_len} bytes)"
            )

    def disk_skips(self) -> int:
        """Objects harvest-cache kept off its disk tier so far, its writer being too far
        behind (its metric); 0 for Squid, which has no such counter."""
        if self.admin_port is None:
            return 0
        for line in scrape_metrics(self.admin_port).splitlines():
            if line.startswith("harvest_cache_store_disk_skips_total "):
                return int(float(line.split()[1]))
        return 0

    def log_offset(self) -> int:
        if self.access_log is None:
            return 0
        try:
            return self.access_log.stat().st_size
        except FileNotFoundError:
            return 0

    def log_codes(self, start: int, since: float) -> Counter[str]:
        """Result codes (TCP_MEM_HIT, TCP_MISS, ...) of the requests that ended at ``since``
        or later, read from byte ``start`` on.

        Waits for the log to stop growing first (Squid writes it through a helper process, and
        a proxy may buffer it); the time filter keeps out warm-up lines written late.
        """
        codes: Counter[str] = Counter()
        if self.access_log is None:
            return codes
        last, stable_since = -1, time.monotonic()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            size = self.log_offset()
            if size != last:
                last, stable_since = size, time.monotonic()
            elif time.monotonic() - stable_since > 1.0:
                break
            time.sleep(0.2)
        with self.access_log.open("rb") as f:
            f.seek(start)
            for line in f:
                parts = line.split(maxsplit=4)
                if len(parts) < 4:
                    continue
                try:
                    if float(parts[0]) < since:
                        continue
                except ValueError:
                    pass
                codes[parts[3].split(b"/")[0].decode(errors="replace")] += 1
        return codes

    def stop(self) -> None:
        self.procs.stop(self.proc, grace=10)


def scrape_metrics(admin_port: int) -> str:
    """The text a harvest-cache's admin listener serves at /metrics."""
    conn = http.client.HTTPConnection(HOST, admin_port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def write_report(report: dict[str, Any], output: Path) -> None:
    """Name the systems that could not run, then write ``report`` as JSON to ``output``."""
    for system, res in report["systems"].items():
        if res["status"] != "ok":
            say(f"\n{system}: COULD NOT RUN ({res['status'].splitlines()[0]})")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    say(f"\nwrote {output}")


class Session:
    """A benchmark's processes and work directory, for a ``with`` block: on the way out every
    process it started is stopped and the directory removed (unless ``keep``), however the
    block ends. A BenchError or Ctrl-C ends it quietly, reported, with ``status`` 2 or 130."""

    def __init__(self, prefix: str, keep: bool) -> None:
        self.procs = Processes()
        self.workdir = Path(tempfile.mkdtemp(prefix=prefix))
        os.chmod(self.workdir, 0o755)  # Squid runs as the proxy user and writes below it
        self.keep = keep
        self.status = 0

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: Any
    ) -> bool:
        if isinstance(error, BenchError):
            say(f"error: {error}")
            self.status = 2
        elif isinstance(error, KeyboardInterrupt):
            say("\ninterrupted: stopping everything this started")
            self.status = 130
        self.procs.stop_all()
        if self.keep:
            say(f"work dir kept: {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return isinstance(error, BenchError | KeyboardInterrupt)


@functools.cache
def has_admin_listener(harvest_cmd: tuple[str, ...]) -> bool:
    """Whether this harvest-cache build has an admin listener (an ``[admin]`` section)."""
    try:
        ref = subprocess.run(
            [*harvest_cmd, "--config-reference"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "## [admin]" in ref


def harvest_command(explicit: str | None) -> list[str] | None:
    if explicit:
        return explicit.split()
    if os.access(HARVEST_BIN, os.X_OK):
        return [str(HARVEST_BIN)]
    probe = subprocess.run(
        [str(VENV_PY), "-c", "import harvest_cache.cli"],
        capture_output=True,
        cwd=REPO,
        timeout=60,
    )
    if probe.returncode == 0:
        return [
            str(VENV_PY),
            "-c",
            "import sys; from harvest_cache.cli import main; sys.exit(main())",
        ]
    return None


# -- wrk ---------------------------------------------------------------------------------------


@dataclass
class Run:
    requests: int
    seconds: float
    rps: float
    mibps: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int]
    origin_requests: int
    proxy_cpu_percent: float
    # The proxy's CPU time per request answered (user + system, microseconds): steadier on a
    # shared machine than req/s.
    proxy_cpu_us: float
    client_cpu_percent: float
    origin_cpu_percent: float
    others_core0_percent: float  # processes other than the proxy on its core
    others_core1_percent: float  # processes other than wrk and the origin on theirs
    steal_percent: float  # time the hypervisor took from both cores
    # Objects the proxy did not store on its disk tier, its writer being too far behind
    # (harvest-cache's metric): misses that cost less than storing them would.
    disk_skips: int = 0


def run_wrk(
    procs: Processes,
    target_port: int,
    lua_args: list[str],
    args: argparse.Namespace,
    duration: float,
) -> dict[str, Any]:
    """Run wrk once; its result has ``cpu_seconds`` added (user + system time wrk used)."""
    argv = [
        "wrk",
        f"-t{args.threads}",
        f"-c{args.connections}",
        f"-d{duration:g}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(LUA),
        f"http://{HOST}:{target_port}/",
        "--",
        *lua_args,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = procs.start(argv, None, CLIENT_CPU)
    try:
        out, _ = proc.communicate(timeout=duration + 60)
    finally:
        procs.stop(proc)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk is the only child reaped since
    text = out.decode(errors="replace")
    for line in text.splitlines():
        if line.startswith("WRKJSON "):
            result: dict[str, Any] = json.loads(line[len("WRKJSON ") :])
            result["cpu_seconds"] = (after.ru_utime + after.ru_stime) - (
                before.ru_utime + before.ru_stime
            )
            return result
    raise BenchError(f"wrk printed no summary (status {proc.returncode}):\n{text[-2000:]}")


def hit_prefix(scn: Scenario, tag: str) -> str:
    """A hit scenario's URLs up to their number (``n``), below the origin."""
    return f"/obj/{scn.size}?r={tag}&n="


def lua_args(scn: Scenario, origin: Origin, tag: str, absolute: bool, inm: str = "-") -> list[str]:
    base = f"http://{origin.hostport}" if absolute else "-"
    if scn.kind == "hit":
        return [scn.pick, base, origin.hostport, hit_prefix(scn, tag), str(scn.urls), inm]
    if scn.kind == "miss":  # /miss/ answers 1 KiB, /miss16k/ 16 KiB
        path = "/miss/" if scn.size == "1k" else f"/miss{scn.size}/"
        return ["unique", base, origin.hostport, f"{path}{tag}-", "0", inm]
    return ["list", base, origin.hostport, f"/reval/{tag}-", str(scn.urls), inm]


def warm(proxy: Proxy, urls: list[str], size: int, clients: int = 8, limit: float = 600) -> float:
    """Fetch every URL once through the proxy, ``clients`` keep-alive connections at a time
    (threads; many objects warm in seconds, not minutes); raise unless each answer is a 200
    of ``size`` bytes, or if it takes over ``limit`` seconds. Returns the seconds it took."""
    began = time.monotonic()
    stop = threading.Event()
    failures: list[str] = []

    def fetch(part: list[str]) -> None:
        conn = http.client.HTTPConnection(HOST, proxy.port, timeout=30)
        try:
            for url in part:
                if stop.is_set():
                    return
                for attempt in (1, 2):  # once more on a new connection if the proxy closed it
                    try:
                        conn.request("GET", url)
                        resp = conn.getresponse()
                        body = resp.read()
                        break
                    except (OSError, http.client.HTTPException) as e:
                        conn.close()
                        if attempt == 2:
                            raise BenchError(f"GET {url} through {proxy.system}: {e!r}") from None
                if resp.status != 200 or len(body) != size:
                    raise BenchError(
                        f"GET {url} through {proxy.system}: status {resp.status}, {len(body)}"
                        f" bytes (expected 200, {size} bytes)"
                    )
        except Exception as e:  # any failure ends the warming, reported by the caller
            failures.append(str(e) if isinstance(e, BenchError) else f"warming: {e!r}")
            stop.set()
        finally:
            conn.close()

    threads = [
        threading.Thread(target=fetch, args=(urls[i::clients],), daemon=True)
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join(max(0.0, began + limit - time.monotonic()))
        if any(t.is_alive() for t in threads):
            raise BenchError(f"warming {len(urls)} URLs through {proxy.system} took over {limit} s")
    finally:
        stop.set()
    if failures:
        raise BenchError(failures[0])
    return time.monotonic() - began


def settle(proxy: Proxy, limit: float = 30.0) -> float:
    """Wait until the proxy is idle (under 10% of a core over half a second), e.g. done with
    writing what warming left to write to its disk store; at most ``limit`` seconds. Returns
    the seconds waited."""
    began = time.monotonic()
    last = cpu_seconds(proxy.pgid)
    while time.monotonic() - began < limit:
        time.sleep(0.5)
        now = cpu_seconds(proxy.pgid)
        if now - last < 0.05:
            break
        last = now
    return time.monotonic() - began


def to_run(
    raw: dict[str, Any],
    origin_requests: int,
    cpu: float,
    client_cpu: float,
    origin_cpu: float,
    cores: tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]] | None = None,
) -> Run:
    seconds = raw["duration_us"] / 1e6
    lat = raw["latency_us"]

    def task(core: str) -> float:
        return cores[1][core][0] - cores[0][core][0] if cores else 0.0

    def steal(core: str) -> float:
        return cores[1][core][1] - cores[0][core][1] if cores else 0.0

    return Run(
        requests=raw["requests"],
        seconds=round(seconds, 3),
        rps=round(raw["requests"] / seconds, 1),
        mibps=round(raw["bytes"] / seconds / MIB, 2),
        p50_ms=round(lat["p50"] / 1000, 3),
        p99_ms=round(lat["p99"] / 1000, 3),
        errors={k: v for k, v in raw["errors"].items() if v},
        origin_requests=origin_requests,
        proxy_cpu_percent=round(100 * cpu / seconds, 1),
        proxy_cpu_us=round(1e6 * cpu / max(raw["requests"], 1), 2),
        client_cpu_percent=round(100 * client_cpu / seconds, 1),
        origin_cpu_percent=round(100 * origin_cpu / seconds, 1),
        others_core0_percent=round(max(0.0, 100 * (task(PROXY_CPU) - cpu) / seconds), 1),
        others_core1_percent=round(
            max(0.0, 100 * (task(CLIENT_CPU) - client_cpu - origin_cpu) / seconds), 1
        ),
        steal_percent=round(100 * sum(steal(c) for c in cores[1]) / seconds, 1) if cores else 0,
    )


# -- one system --------------------------------------------------------------------------------


@dataclass
class ScenarioResult:
    scenario: str
    runs: list[Run]
    rps: float
    mibps: float
    p50_ms: float
    p99_ms: float
    peak_rss_mib: float
    origin_requests_per_request: float
    proxy_cpu_percent: float
    proxy_cpu_us: float
    client_cpu_percent: float
    origin_cpu_percent: float
    log_codes: dict[str, int]
    disk_skips: int = 0  # summed over the runs
    checks: list[str] = field(default_factory=list)


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def disturbances(runs: list[Any]) -> list[str]:
    """What disturbed ``runs`` (with their ``others_core*_percent`` and ``steal_percent``):
    other processes over 5% of a core, or the hypervisor stealing over 5%."""
    problems = []
    for core, pct in ((PROXY_CPU, "others_core0_percent"), (CLIENT_CPU, "others_core1_percent")):
        busy = [getattr(r, pct) for r in runs if getattr(r, pct) > 5]
        if busy:
            problems.append(
                f"other processes took up to {max(busy):.0f}% of core {core} in {len(busy)} run(s)"
            )
    stolen = [r.steal_percent for r in runs if r.steal_percent > 5]
    if stolen:
        problems.append(f"the hypervisor stole up to {max(stolen):.0f}% in {len(stolen)} run(s)")
    return problems


def check(scn: Scenario, res: ScenarioResult, logged: bool) -> list[str]:
    """Problems that make a scenario's numbers suspect (empty when they look sane)."""
    problems = []
    errors = sum(sum(r.errors.values()) for r in res.runs)
    requests = sum(r.requests for r in res.runs)
    if errors:
        problems.append(f"{errors} wrk errors in {requests} requests")
    if scn.kind == "hit" and res.origin_requests_per_request > 0.01:
        problems.append(
            f"origin saw {res.origin_requests_per_request:.3f} requests per hit (expected 0)"
        )
    if scn.kind != "hit" and scn.collapses and res.origin_requests_per_request == 0:
        problems.append("origin saw no requests (expected some: every request is stale)")
    elif scn.kind != "hit" and not scn.collapses and res.origin_requests_per_request < 0.99:
        problems.append(
            f"origin saw {res.origin_requests_per_request:.3f} requests per request (expected 1)"
        )
    if res.disk_skips > 0.01 * requests:
        problems.append(
            f"{res.disk_skips} objects ({100 * res.disk_skips / max(requests, 1):.0f}% of the"
            " requests) were not stored on disk: its writer fell behind"
        )
    problems += disturbances(res.runs)
    if res.proxy_cpu_percent < 80:
        problems.append(
            f"the proxy used {res.proxy_cpu_percent:.0f}% of its core: the client or the origin"
            " may be the bottleneck"
        )
    if res.client_cpu_percent + res.origin_cpu_percent >= 90:
        problems.append(
            f"wrk and the origin used {res.client_cpu_percent + res.origin_cpu_percent:.0f}% of"
            f" core {CLIENT_CPU}: the client may be the bottleneck"
        )
    if logged:
        total = sum(res.log_codes.values())
        good = sum(n for code, n in res.log_codes.items() if scn.expect in code)
        if total == 0:
            problems.append("nothing in the access log")
        elif good < 0.99 * total:
            problems.append(f"only {good}/{total} logged requests are *{scn.expect}*")
        # Requests in flight when wrk stops are answered and logged but not counted by wrk.
        if total and abs(total - requests) > 0.01 * requests + 1024 * len(res.runs):
            problems.append(f"access log has {total} lines for {requests} requests")
    return problems


def bench_system(
    system: str,
    args: argparse.Namespace,
    procs: Processes,
    workdir: Path,
    origin: Origin,
    scenarios: list[Scenario],
    harvest_cmd: list[str] | None,
) -> dict[str, Any]:
    say(f"\n=== {system} ===")
    cgroup = None
    if args.memory_cgroup_mb:
        cgroup = MemoryCgroup(f"harvest-bench-{os.getpid()}-{system}", args.memory_cgroup_mb)
    try:
        proxy = Proxy(
            system,
            procs,
            workdir,
            args.memory_mb,
            args.access_log == "on",
            harvest_cmd,
            disk_mb=args.disk_mb if args.disk else 0,
            squid_store=args.squid_store,
            cgroup=cgroup,
        )
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        raise
    out: dict[str, Any] = {
        "status": "ok",
        "version": proxy.version,
        "command": proxy.argv,
        "scenarios": {},
    }
    width = max(9, *(len(s.name) for s in scenarios))
    try:
        proxy.get(f"http://{origin.hostport}/obj/1k?probe=1", SIZES["1k"])
        rss_resettable = True
        for scn in scenarios:
            tag = f"{system[0]}{time.time_ns() % 10**12:x}"
            size = SIZES[scn.size]
            log_start = proxy.log_offset()
            notes: list[str] = []
            if scn.kind == "hit" and scn.pick == "random":  # many objects: once each, 8 at a time
                prefix = f"http://{origin.hostport}{hit_prefix(scn, tag)}"
                urls = [f"{prefix}{n}" for n in range(scn.urls)]
                took = warm(proxy, urls, size)
                idle = settle(proxy)
                say(
                    f"  {scn.name:{width}} warmed {len(urls):,} objects"
                    f" ({len(urls) * size / MIB:,.0f} MiB) in {took:.1f} s, idle {idle:.1f} s later"
                )
            elif scn.kind == "hit":  # twice: the second fetch must already be a hit
                for _ in range(2):
                    for n in range(scn.urls):
                        proxy.get(f"http://{origin.hostport}{hit_prefix(scn, tag)}{n}", size)
            elif scn.kind == "reval":
                for n in range(scn.urls):
                    proxy.get(f"http://{origin.hostport}/reval/{tag}-{n}", size)
            if scn.restart:
                stopped, graceful = proxy.restart()
                say(
                    f"  {scn.name:{width}} restarted: stopped in {stopped:.1f} s"
                    + ("" if graceful else " (KILLED: it did not stop on SIGTERM)")
                )
                if not graceful:
                    notes.append("the proxy did not stop on SIGTERM and was killed")
            rss_resettable = reset_peak_rss(proxy.pgid) and rss_resettable
            measured_since = time.time()
            runs: list[Run] = []
            for r in range(args.repeats):
                run_tag = f"{tag}r{r}" if scn.kind == "miss" else tag
                before = origin.requests_served()
                cpu_before = cpu_seconds(proxy.pgid)
                skips_before = proxy.disk_skips()
                origin_cpu = cpu_seconds(origin.proc.pid)
                cores_before = core_seconds()
                raw = run_wrk(
                    procs, proxy.port, lua_args(scn, origin, run_tag, True), args, args.duration
                )
                cpu = cpu_seconds(proxy.pgid) - cpu_before
                origin_cpu = cpu_seconds(origin.proc.pid) - origin_cpu
                cores = (cores_before, core_seconds())
                served = origin.requests_served() - before - 1
                if proxy.proc.poll() is not None:
                    raise BenchError(f"{system} died during {scn.name}\n{tail(proxy.error_log)}")
                run = to_run(raw, served, cpu, raw["cpu_seconds"], origin_cpu, cores)
                run.disk_skips = proxy.disk_skips() - skips_before
                runs.append(run)
                say(
                    f"  {scn.name:{width}} run {r + 1}/{args.repeats}: {run.rps:11,.0f} req/s"
                    f" {run.mibps:9,.1f} MiB/s  p50 {run.p50_ms:7.2f} ms  p99 {run.p99_ms:7.2f} ms"
                    f"  cpu {run.proxy_cpu_percent:3.0f}% ({run.proxy_cpu_us:.1f} us/req)"
                    f" (wrk {run.client_cpu_percent:.0f}%, origin {run.origin_cpu_percent:.0f}%,"
                    f" others {run.others_core0_percent:.0f}%/{run.others_core1_percent:.0f}%,"
                    f" steal {run.steal_percent:.0f}%)"
                    + (f"  errors {run.errors}" if run.errors else "")
                    + (f"  not stored on disk {run.disk_skips:,}" if run.disk_skips else "")
                )
            requests = sum(r.requests for r in runs)
            res = ScenarioResult(
                scenario=scn.name,
                runs=runs,
                rps=median([r.rps for r in runs]),
                mibps=median([r.mibps for r in runs]),
                p50_ms=median([r.p50_ms for r in runs]),
                p99_ms=median([r.p99_ms for r in runs]),
                peak_rss_mib=round(peak_rss_mib(proxy.pgid), 1),
                origin_requests_per_request=round(
                    sum(r.origin_requests for r in runs) / max(requests, 1), 4
                ),
                proxy_cpu_percent=median([r.proxy_cpu_percent for r in runs]),
                proxy_cpu_us=median([r.proxy_cpu_us for r in runs]),
                client_cpu_percent=median([r.client_cpu_percent for r in runs]),
                origin_cpu_percent=median([r.origin_cpu_percent for r in runs]),
                log_codes=dict(proxy.log_codes(log_start, measured_since).most_common()),
                disk_skips=sum(r.disk_skips for r in runs),
            )
            res.checks = notes + check(scn, res, proxy.access_log is not None)
            for problem in res.checks:
                say(f"  WARNING {scn.name}: {problem}")
            out["scenarios"][scn.name] = asdict(res)
        out["peak_rss_per_scenario"] = rss_resettable
    finally:
        proxy.stop()
        if cgroup is not None:
            cgroup.remove()
        if args.disk and not args.keep:  # a round's stores can take gigabytes
            for store in ("cache", "cache_dir", "rock"):
                shutil.rmtree(proxy.dir / store, ignore_errors=True)
    return out


# Run fields whose medians a scenario's result holds, under the same names.
MEDIANS = (
    "rps",
    "mibps",
    "p50_ms",
    "p99_ms",
    "proxy_cpu_percent",
    "proxy_cpu_us",
    "client_cpu_percent",
    "origin_cpu_percent",
)


def merge_rounds(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """One system's result over several rounds: every run of a scenario pooled, its medians
    taken over all of them, its peak memory the highest of any round."""
    failed = [o for o in outs if o["status"] != "ok"]
    if len(outs) == 1 or failed:
        return failed[0] if failed else outs[0]
    merged = dict(outs[0], rounds=len(outs), scenarios={})
    merged["peak_rss_per_scenario"] = all(o["peak_rss_per_scenario"] for o in outs)
    for name in outs[0]["scenarios"]:
        parts = [o["scenarios"][name] for o in outs]
        runs = [run for part in parts for run in part["runs"]]
        codes: collections.Counter[str] = collections.Counter()
        for part in parts:
            codes.update(part["log_codes"])
        one = dict(parts[0], runs=runs, log_codes=dict(codes.most_common()))
        for key in MEDIANS:
            one[key] = median([run[key] for run in runs])
        one["peak_rss_mib"] = max(part["peak_rss_mib"] for part in parts)
        requests = sum(run["requests"] for run in runs)
        origin = sum(run["origin_requests"] for run in runs)
        one["origin_requests_per_request"] = round(origin / max(requests, 1), 4)
        one["disk_skips"] = sum(part.get("disk_skips", 0) for part in parts)
        one["checks"] = sorted({c for part in parts for c in part["checks"]})
        merged["scenarios"][name] = one
    return merged


# -- calibration of the origin -----------------------------------------------------------------


def calibrate(args: argparse.Namespace, procs: Processes, workdir: Path) -> dict[str, Any]:
    """wrk straight at each candidate origin, with no proxy between.

    With the origin on core 0 this is the ceiling of the client on core 1 for every scenario;
    with the origin on core 1 beside wrk (the layout of the real runs) it is the most misses
    and revalidations (If-None-Match answered 304) that client and origin can feed a proxy.
    """
    rows: dict[str, Any] = {}
    shared = [s for s in SCENARIOS if s.kind != "hit"]
    sized = [s for s in SCENARIOS if s.urls or s.kind != "hit"]  # (not hit-spread: --memory-mb's)
    for kind in ("nginx", "python"):
        for layout, cpu, scenarios in (
            ("own core", PROXY_CPU, sized),
            ("core of wrk", CLIENT_CPU, shared),
        ):
            origin = Origin(kind, procs, workdir / f"{kind}-{cpu}", cpu)
            try:
                inm = origin.etag("/reval/x")
                for scn in scenarios:
                    extra = inm if scn.kind == "reval" else "-"
                    raw = run_wrk(
                        procs,
                        origin.port,
                        lua_args(scn, origin, "cal", False, extra),
                        args,
                        args.duration,
                    )
                    run = to_run(raw, 0, 0.0, raw["cpu_seconds"], 0.0)
                    key = f"{kind} on {layout}: {scn.name}"
                    rows[key] = asdict(run)
                    say(
                        f"  {key:32} {run.rps:9,.0f} req/s {run.mibps:8,.0f} MiB/s"
                        f"  p50 {run.p50_ms:6.2f} ms  p99 {run.p99_ms:6.2f} ms"
                        + (f"  errors {run.errors}" if run.errors else "")
                    )
            finally:
                procs.stop(origin.proc)
    return rows


# -- report ------------------------------------------------------------------------------------


def ratios(results: dict[str, Any], scenarios: list[Scenario], memory_mb: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sq = results.get("squid", {}).get("scenarios", {})
    hv = results.get("harvest", {}).get("scenarios", {})
    for scn in scenarios:
        if scn.name not in sq or scn.name not in hv:
            continue
        s, h = sq[scn.name], hv[scn.name]
        r = {
            "rps": round(h["rps"] / s["rps"], 2) if s["rps"] else None,
            "mibps": round(h["mibps"] / s["mibps"], 2) if s["mibps"] else None,
            "p50": round(h["p50_ms"] / s["p50_ms"], 2) if s["p50_ms"] else None,
            "p99": round(h["p99_ms"] / s["p99_ms"], 2) if s["p99_ms"] else None,
            "rss": round(h["peak_rss_mib"] / s["peak_rss_mib"], 2) if s["peak_rss_mib"] else None,
            "target_rps": scn.target,
        }
        if scn.target is not None:
            r["meets_target"] = r["rps"] is not None and r["rps"] >= scn.target
        if scn.kind == "miss":
            r["rss_limit_mib"] = memory_mb + RSS_SLACK_MIB
            r["meets_rss_limit"] = h["peak_rss_mib"] <= memory_mb + RSS_SLACK_MIB
        out[scn.name] = r
    return out


def table(report: dict[str, Any], scenarios: list[Scenario], out: TextIO) -> None:
    w = max(9, *(len(s.name) for s in scenarios))
    head = (
        f"{'scenario':{w}} {'system':8} {'req/s':>10} {'MiB/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'RSS MiB':>8} {'cpu0%':>5} {'us/req':>7} {'cpu1%':>5} {'orig/req':>8}  log"
    )
    print("\n" + head, file=out)
    print("-" * len(head), file=out)
    results = report["systems"]
    for scn in scenarios:
        for system in SYSTEMS:
            sys_res = results.get(system)
            if sys_res is None:
                continue
            if sys_res["status"] != "ok":
                print(f"{scn.name:{w}} {system:8} could not run: see above", file=out)
                continue
            r = sys_res["scenarios"].get(scn.name)
            if r is None:
                continue
            codes = r["log_codes"]
            total = sum(codes.values())
            log = (
                ", ".join(f"{c} {100 * n / total:.1f}%" for c, n in list(codes.items())[:2])
                if total
                else "-"
            )
            print(
                f"{scn.name:{w}} {system:8} {r['rps']:10,.0f} {r['mibps']:9,.1f}"
                f" {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['peak_rss_mib']:8.1f}"
                f" {r['proxy_cpu_percent']:5.0f} {r['proxy_cpu_us']:7.1f}"
                f" {r['client_cpu_percent'] + r['origin_cpu_percent']:5.0f}"
                f" {r['origin_requests_per_request']:8.3f}  {log}"
                + ("  SUSPECT" if r["checks"] else ""),
                file=out,
            )
        ratio = report["ratios"].get(scn.name)
        if ratio:
            line = (
                f"{scn.name:{w}} {'H/S':8} {ratio['rps']:9.2f}x {ratio['mibps']:8.2f}x"
                f" {ratio['p50']:7.2f}x {ratio['p99']:7.2f}x {ratio['rss']:7.2f}x "
            )
            if "meets_target" in ratio:
                verdict = "meets" if ratio["meets_target"] else "MISSES"
                line += f"  target req/s >= {scn.target:g}x: {verdict};"
            if "meets_rss_limit" in ratio:
                line += f" RSS <= {ratio['rss_limit_mib']} MiB: " + (
                    "meets" if ratio["meets_rss_limit"] else "MISSES"
                )
            print(line.rstrip(" ;"), file=out)
    out.flush()


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="harvest-cache against Squid under wrk load.")
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run (10)")
    p.add_argument("--repeats", type=int, default=3, help="runs per scenario; medians kept (3)")
    p.add_argument("--connections", type=int, default=64, help="wrk connections (64)")
    p.add_argument("--threads", type=int, default=1, help="wrk threads, all on core 1 (1)")
    p.add_argument(
        "--scenarios",
        help="comma-separated subset of: " + ", ".join(s.name for s in SCENARIOS) + " (all);"
        " with --disk: " + ", ".join(s.name for s in DISK_SCENARIOS) + " (all)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="passes of every system in turn, their runs pooled (1): Squid's and Harvest's"
        " runs then alternate in time",
    )
    p.add_argument("--only", choices=SYSTEMS, help="benchmark one system only")
    p.add_argument("--memory-mb", type=int, default=512, help="memory tier of both (512)")
    p.add_argument(
        "--access-log",
        choices=("on", "off"),
        default="on",
        help="access logs of both proxies (on, as both ship)",
    )
    p.add_argument("--origin", choices=("nginx", "python"), default="nginx", help="(nginx)")
    p.add_argument("--harvest-cmd", help="command that starts harvest-cache (default: the venv's)")
    p.add_argument(
        "--disk",
        action="store_true",
        help="disk mode: both proxies with a disk store as well (harvest-cache's disk tier,"
        " a Squid cache_dir), running the disk scenarios",
    )
    p.add_argument("--disk-mb", type=int, help="with --disk: the disk store of both (2048)")
    p.add_argument(
        "--squid-store", choices=SQUID_STORES, help="with --disk: Squid's cache_dir type (aufs)"
    )
    p.add_argument(
        "--memory-cgroup-mb",
        type=int,
        help="run each proxy in a memory cgroup of this many MiB, page cache included (with"
        ' --disk 1024, else 0: none); see "A cache server\'s memory" in bench/README.md',
    )
    p.add_argument(
        "--output",
        type=Path,
        help=f"JSON results file ({DEFAULT_OUTPUT.relative_to(REPO)};"
        f" with --disk {DEFAULT_DISK_OUTPUT.relative_to(REPO)})",
    )
    p.add_argument("--keep", action="store_true", help="keep the work dir (configs, logs)")
    p.add_argument("--calibrate", action="store_true", help="measure the candidate origins instead")
    args = p.parse_args(argv)
    if not args.disk and (args.disk_mb is not None or args.squid_store is not None):
        p.error("--disk-mb and --squid-store need --disk")
    args.disk_mb = 2048 if args.disk_mb is None else args.disk_mb
    args.squid_store = args.squid_store or "aufs"
    if args.memory_cgroup_mb is None:
        args.memory_cgroup_mb = max(1024, 4 * args.memory_mb) if args.disk else 0
    if args.memory_cgroup_mb and args.memory_cgroup_mb < 2 * args.memory_mb + 256:
        p.error("--memory-cgroup-mb must be at least twice --memory-mb plus 256 (or 0: none)")
    if args.output is None:
        args.output = DEFAULT_DISK_OUTPUT if args.disk else DEFAULT_OUTPUT
    catalogue = DISK_SCENARIOS if args.disk else SCENARIOS
    mode = " with --disk" if args.disk else " without --disk"
    names = [n.strip() for n in (args.scenarios or "").split(",") if n.strip()]
    names = names or [s.name for s in catalogue]
    known = {s.name for s in catalogue}
    if unknown := [n for n in names if n not in known]:
        p.error(
            f"unknown scenario(s){mode} {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    args.scenario_list = [s for s in catalogue if s.name in names]
    spread = int(SPREAD_SET * args.memory_mb * MIB) // SIZES["16k"]
    args.scenario_list = [
        replace(s, urls=spread) if s.name == "hit-spread" else s for s in args.scenario_list
    ]
    if args.disk:
        if args.disk_mb < 64 or args.memory_mb < 1:
            p.error("need --disk-mb >= 64 and --memory-mb >= 1")
        working_set = DISK_HIT_SET * args.memory_mb
        if "disk-hit" in names and working_set > 0.75 * args.disk_mb:
            p.error(
                f"disk-hit's working set, {DISK_HIT_SET} x --memory-mb = {working_set} MiB, must"
                f" fit in three quarters of --disk-mb ({args.disk_mb}) with room for the rest:"
                " use --memory-mb 64 (a 256 MiB set), or a larger --disk-mb"
            )
        objects = working_set * MIB // SIZES["16k"]
        args.scenario_list = [
            replace(s, urls=objects) if s.name == "disk-hit" else s for s in args.scenario_list
        ]
    if args.duration <= 0 or args.duration > 600 or args.repeats < 1 or args.connections < 1:
        p.error("need 0 < --duration <= 600, --repeats >= 1, --connections >= 1")
    if args.rounds < 1:
        p.error("need --rounds >= 1")
    if args.threads < 1 or args.threads > args.connections:
        p.error("need 1 <= --threads <= --connections")
    return args


@contextlib.contextmanager
def terminated_as_exit() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into SystemExit so that every ``finally`` runs.

    SIGINT raises KeyboardInterrupt even where the shell started this with SIGINT ignored.
    """

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        say("warning: fewer than 2 cores; the pinning below assumes cores 0 and 1")
    else:  # keep this harness (idle during runs, busy between them) off the proxy's core
        os.sched_setaffinity(0, {int(CLIENT_CPU)})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    with Session("harvest-bench-", args.keep) as session, terminated_as_exit():
        procs, workdir = session.procs, session.workdir
        status = 0
        needs = ["wrk", "taskset"]
        if args.calibrate or args.origin == "nginx":
            needs.append("nginx")
        if not args.calibrate and args.only != "harvest":
            needs.append("squid")
        tools = ensure_tools(needs)
        if args.calibrate:
            say(f"calibrating origins: wrk on core {CLIENT_CPU}, {args.duration:g} s each")
            rows = calibrate(args, procs, workdir)
            out = args.output.with_name("calibrate.json")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(rows, indent=2) + "\n")
            say(f"\nwrote {out}")
            return 0
        systems = [args.only] if args.only else list(SYSTEMS)
        harvest_cmd = harvest_command(args.harvest_cmd) if "harvest" in systems else None
        origin = Origin(args.origin, procs, workdir, ORIGIN_CPU)
        say(
            f"origin {origin.version} on {origin.hostport}, core {ORIGIN_CPU}; proxies on"
            f" core {PROXY_CPU}; wrk -t{args.threads} -c{args.connections} on core"
            f" {CLIENT_CPU}; {args.repeats} x {args.duration:g} s per scenario;"
            f" access logs {args.access_log}; memory tiers {args.memory_mb} MB"
            + (
                f"; disk stores {args.disk_mb} MB (Squid {args.squid_store})"
                if args.disk
                else ", no disk stores"
            )
            + (
                f"; each proxy in a {args.memory_cgroup_mb} MiB memory cgroup"
                if args.memory_cgroup_mb
                else ""
            )
        )
        report: dict[str, Any] = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {
                "cpu": _cpu_model(),
                "cores": os.cpu_count(),
                "kernel": platform.release(),
                "python": platform.python_version(),
            },
            "settings": {
                "duration_s": args.duration,
                "repeats": args.repeats,
                "rounds": args.rounds,
                "connections": args.connections,
                "wrk_threads": args.threads,
                "memory_mb": args.memory_mb,
                "disk_mb": args.disk_mb if args.disk else 0,
                **({"squid_store": args.squid_store} if args.disk else {}),
                "memory_cgroup_mb": args.memory_cgroup_mb,
                "access_log": args.access_log,
                "origin": origin.version,
                "cores": {"proxy": PROXY_CPU, "origin": ORIGIN_CPU, "wrk": CLIENT_CPU},
                "wrk": version_of([tools["wrk"], "-v"], any_status=True),
                "harvest_commit": version_of(["git", "-C", str(REPO), "rev-parse", "HEAD"])
                + " (plus uncommitted changes, if any)",
            },
            "scenarios": {s.name: s.about for s in args.scenario_list},
            "systems": {},
            "ratios": {},
        }
        passes: dict[str, list[dict[str, Any]]] = {system: [] for system in systems}
        for round_ in range(args.rounds):
            where = workdir  # (a fresh directory for each round's proxies)
            if args.rounds > 1:
                say(f"\n##### round {round_ + 1}/{args.rounds}")
                where = workdir / f"round-{round_ + 1}"
            for system in systems:
                try:
                    passes[system].append(
                        bench_system(
                            system, args, procs, where, origin, args.scenario_list, harvest_cmd
                        )
                    )
                except BenchError as e:
                    status = 1
                    say(f"\n*** {system} COULD NOT RUN: {e}")
                    passes[system].append({"status": f"could not run: {e}"})
        for system, outs in passes.items():
            report["systems"][system] = merge_rounds(outs)
        report["ratios"] = ratios(report["systems"], args.scenario_list, args.memory_mb)
        table(report, args.scenario_list, sys.stdout)
        write_report(report, args.output)
        return status
    return session.status


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
