"""HTTPS through harvest-cache and Squid (Debian's squid-openssl, ``ssl_bump``), in one run.

Both proxies get the same TLS origin (nginx on loopback, a CA of the run's own that both
trust), a memory tier of the same size, access logs on, and intercept CONNECT tunnels with a
CA of their own (Squid: ``ssl-bump`` with ``generate-host-certificates``, peek at step 1 then
stare and bump, so that its certificates mimic the origin's as harvest's do, made by
``security_file_certgen``; harvest: ``bump.enabled``). Scenarios:

  bumped-hit   32 tunnels, each sending GET for one 1 KiB object again and again (a hit)
               over keep-alive inside the tunnel;
  new-tunnel   8 clients each opening tunnels one after another: CONNECT, a full TLS
               handshake with the proxy (its certificate for the origin made already), one
               GET (a hit), close;
  https-miss   wrk, 64 connections: absolute-form ``GET https://...`` for URLs never asked
               before (each a miss the proxy fetches over its pooled TLS connections).

The clients (bench/tls_client.py, wrk) and nginx run on core 1, the proxy on core 0. Reported:
requests a second, proxy CPU microseconds a request, client latency; runs alternate between
the two systems. Also the time harvest takes to mint a server certificate (in process).

    .venv/bin/python bench/https.py [--rounds 2] [--repeats 2] [--duration 5]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import run as base
import trustme

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harvest_cache.bump import authority  # noqa: E402
from harvest_cache.bump.certificates import Minter, template_from  # noqa: E402

CLIENT = Path(__file__).with_name("tls_client.py")
OBJECT = 1024
NGINX_TLS = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 8192; multi_accept on; }}
http {{
    access_log off;
    default_type application/octet-stream;
    keepalive_timeout 300s;
    keepalive_requests 10000000;
    ssl_session_cache shared:TLS:10m;
    server {{
        listen {host}:{port} ssl backlog=4096;
        ssl_certificate {dir}/origin.pem;
        ssl_certificate_key {dir}/origin.key;
        root {dir}/www;
        location /obj/ {{ add_header Cache-Control "max-age=3600"; }}
        location /miss/ {{
            add_header Cache-Control "max-age=3600";
            try_files /miss.bin =404;
        }}
    }}
}}
"""
SQUID_BUMP = """\
sslcrtd_program /usr/lib/squid/security_file_certgen -s {dir}/ssl_db -M 16MB
sslcrtd_children 4 startup=1 idle=1
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump stare all
ssl_bump bump all
tls_outgoing_options cafile={origin_ca}
"""
HARVEST_BUMP = """
[upstream]
tls_ca_file = "{origin_ca}"

[bump]
enabled = true
ca_dir = "{ca_dir}"

[access]
connect_ports = ["1-65535"]
"""


class TlsOrigin:
    """nginx with TLS on loopback, its certificate for ``localhost`` from the run's own CA.
    (A name, not 127.0.0.1: Squid mimics no IP address names into its certificates; both
    proxies find it in /etc/hosts.)"""

    def __init__(self, procs: base.Processes, workdir: Path) -> None:
        self.dir = workdir / "origin"
        (self.dir / "www" / "obj").mkdir(parents=True)
        self.ca = trustme.CA()
        self.ca_file = self.dir / "origin-ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        leaf = self.ca.issue_cert("localhost")
        leaf.cert_chain_pems[0].write_to_path(str(self.dir / "origin.pem"))
        leaf.private_key_pem.write_to_path(str(self.dir / "origin.key"))
        (self.dir / "www" / "obj" / "1k").write_bytes(os.urandom(OBJECT))
        (self.dir / "www" / "miss.bin").write_bytes(os.urandom(OBJECT))
        self.port = base.free_port()
        conf = self.dir / "nginx.conf"
        conf.write_text(NGINX_TLS.format(dir=self.dir, host=base.HOST, port=self.port))
        nginx = base.find_tool("nginx") or "nginx"
        argv = [nginx, "-p", str(self.dir), "-e", str(self.dir / "error.log"), "-c", str(conf)]
        self.proc = procs.start(argv, self.dir / "nginx.log", base.ORIGIN_CPU)
        base.wait_listening(self.port, self.proc, 15)
        for path in (self.dir, *self.dir.rglob("*")):  # (Squid's helpers run as proxy)
            os.chmod(path, 0o755 if path.is_dir() else 0o644)

    @property
    def target(self) -> str:
        return f"localhost:{self.port}"


def squid_proxy(procs: base.Processes, workdir: Path, origin: TlsOrigin, memory_mb: int) -> Any:
    """Squid with ssl-bump on its http_port and its own CA (RSA, as its helper makes RSA)."""
    directory = workdir / "squid-tls"
    directory.mkdir()
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    ca_pem = directory / "squid-ca.pem"
    ca_pem.write_bytes(ca.cert_pem.bytes() + ca.private_key_pem.bytes())
    (directory / "squid-ca-cert.pem").write_bytes(ca.cert_pem.bytes())
    ssl_db = directory / "ssl_db"
    subprocess.run(
        ["/usr/lib/squid/security_file_certgen", "-c", "-s", str(ssl_db), "-M", "16MB"],
        check=True,
        capture_output=True,
    )
    proxy_user = pwd.getpwnam("proxy")
    for path in (directory, *directory.rglob("*")):
        os.chown(path, proxy_user.pw_uid, proxy_user.pw_gid)
    options = f"ssl-bump tls-cert={ca_pem} generate-host-certificates=on"
    options += " dynamic_cert_mem_cache_size=16MB"
    proxy = base.Proxy(
        "squid",
        procs,
        workdir,
        memory_mb,
        True,
        None,
        extra_conf=SQUID_BUMP.format(dir=directory, origin_ca=origin.ca_file),
        port_options=options,
    )
    proxy.client_ca = directory / "squid-ca-cert.pem"
    return proxy


def harvest_proxy(
    procs: base.Processes, workdir: Path, origin: TlsOrigin, memory_mb: int, cmd: list[str]
) -> Any:
    ca_dir = workdir / "harvest-ca"
    authority.create(ca_dir, "bench", datetime.datetime.now(datetime.UTC))
    extra = HARVEST_BUMP.format(origin_ca=origin.ca_file, ca_dir=ca_dir)
    proxy = base.Proxy("harvest", procs, workdir, memory_mb, True, cmd, extra_conf=extra)
    proxy.client_ca = ca_dir / authority.CERTIFICATE_FILE
    return proxy


def tls_client(
    procs: base.Processes,
    proxy: Any,
    origin: TlsOrigin,
    mode: str,
    connections: int,
    seconds: float,
) -> dict[str, Any]:
    argv = [
        str(base.VENV_PY),
        str(CLIENT),
        "--proxy",
        str(proxy.port),
        "--target",
        origin.target,
        "--path",
        "/obj/1k",
        "--size",
        str(OBJECT),
        "--ca",
        str(proxy.client_ca),
        "--mode",
        mode,
        "--connections",
        str(connections),
        "--seconds",
        str(seconds),
    ]
    if mode == "tunnels":
        argv.append("--no-tickets")
    proc = procs.start(argv, None, base.CLIENT_CPU)
    try:
        out, _ = proc.communicate(timeout=seconds + 60)
    finally:
        procs.stop(proc)
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("TLSJSON "):
            result: dict[str, Any] = json.loads(line[len("TLSJSON ") :])
            return result
    raise base.BenchError(f"tls_client printed nothing:\n{out.decode(errors='replace')[-2000:]}")


def measure(
    procs: base.Processes,
    proxy: Any,
    origin: TlsOrigin,
    scenario: str,
    args: argparse.Namespace,
    tag: str,
) -> dict[str, Any]:
    cpu_before = base.cpu_seconds(proxy.pgid)
    if scenario == "https-miss":
        lua = ["unique", f"https://{origin.target}", origin.target, f"/miss/{tag}-", "0", "-"]
        wrk_args = argparse.Namespace(threads=1, connections=64)
        raw = base.run_wrk(procs, proxy.port, lua, wrk_args, args.duration)
        requests, seconds = raw["requests"], raw["duration_us"] / 1e6
        errors = sum(v for v in raw["errors"].values())
        latency = {k: v / 1000 for k, v in raw["latency_us"].items() if k in ("p50", "p90", "p99")}
    else:
        mode, connections = ("keep-alive", 32) if scenario == "bumped-hit" else ("tunnels", 8)
        raw = tls_client(procs, proxy, origin, mode, connections, args.duration)
        requests, seconds, errors = raw["requests"], raw["seconds"], raw["errors"]
        latency = raw["latency_ms"]
    cpu = base.cpu_seconds(proxy.pgid) - cpu_before
    return {
        "requests": requests,
        "errors": errors,
        "rps": round(requests / seconds, 1),
        "proxy_cpu_us": round(1e6 * cpu / max(requests, 1), 2),
        "latency_ms": {k: round(v, 3) for k, v in latency.items()},
    }


def mint_ms(workdir: Path, count: int = 200) -> dict[str, float]:
    """harvest's time to make a server certificate and a context presenting it (median)."""
    ca = authority.create(workdir / "mint-ca", "bench", datetime.datetime.now(datetime.UTC))
    minter = Minter(ca, workdir / "mint-ca" / "certificates")
    now = datetime.datetime.now(datetime.UTC)
    times = []
    for i in range(count):
        name = f"n{i}.mint.test"
        began = time.perf_counter()
        minter.make(name, template_from(None, name, now), keep=True)
        times.append((time.perf_counter() - began) * 1000)
    return {
        "median_ms": round(statistics.median(times), 3),
        "p90_ms": round(sorted(times)[int(0.9 * count)], 3),
    }


SCENARIOS = ("bumped-hit", "new-tunnel", "https-miss")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--memory-mb", type=int, default=256)
    p.add_argument("--harvest-cmd", help="command that starts harvest-cache")
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "https.json")
    args = p.parse_args(argv)
    scenarios = args.scenarios.split(",")
    harvest_cmd = base.harvest_command(args.harvest_cmd)
    procs = base.Processes()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {"squid": {}, "harvest": {}}
    with tempfile.TemporaryDirectory(prefix="harvest-https-") as tmp, base.terminated_as_exit():
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # Squid runs as the proxy user and writes below it
        try:
            origin = TlsOrigin(procs, workdir)
            report: dict[str, Any] = {"mint": mint_ms(workdir)}
            base.say(f"harvest mints a certificate in {report['mint']['median_ms']} ms (median)")
            for number in range(args.rounds):
                order = ("squid", "harvest") if number % 2 == 0 else ("harvest", "squid")
                for system in order:
                    where = workdir / f"round{number}-{system}"
                    where.mkdir()
                    if system == "squid":
                        proxy = squid_proxy(procs, where, origin, args.memory_mb)
                    else:
                        assert harvest_cmd is not None
                        proxy = harvest_proxy(procs, where, origin, args.memory_mb, harvest_cmd)
                    try:
                        tls_client(procs, proxy, origin, "keep-alive", 1, 0.5)  # (warm)
                        for scenario in scenarios:
                            for repeat in range(args.repeats):
                                tag = f"{number}{system[0]}{repeat}"
                                result = measure(procs, proxy, origin, scenario, args, tag)
                                runs[system].setdefault(scenario, []).append(result)
                                base.say(
                                    f"  {system:8} {scenario:11} {result['rps']:>10,.0f} /s"
                                    f" {result['proxy_cpu_us']:>8.1f} us  {result['latency_ms']}"
                                    f" errors {result['errors']}"
                                )
                    finally:
                        proxy.stop()
        finally:
            procs.stop_all()
    summary = {}
    for scenario in scenarios:
        row = {}
        for system in ("squid", "harvest"):
            done = runs[system].get(scenario, [])
            row[system] = {
                "rps": statistics.median(r["rps"] for r in done),
                "proxy_cpu_us": statistics.median(r["proxy_cpu_us"] for r in done),
                "rps_range": [min(r["rps"] for r in done), max(r["rps"] for r in done)],
                "cpu_range": [
                    min(r["proxy_cpu_us"] for r in done),
                    max(r["proxy_cpu_us"] for r in done),
                ],
                "latency_p50_ms": statistics.median(r["latency_ms"]["p50"] for r in done),
            }
        row["harvest_over_squid_rps"] = round(row["harvest"]["rps"] / row["squid"]["rps"], 2)
        row["squid_over_harvest_cpu"] = round(
            row["squid"]["proxy_cpu_us"] / row["harvest"]["proxy_cpu_us"], 2
        )
        summary[scenario] = row
        base.say(f"{scenario}: {json.dumps(row)}")
    report["summary"] = summary
    report["runs"] = runs
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    base.say(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
