"""Nothing the suite does leaves loopback (tests/loopback.py): the namespace the test command
makes is in force, a run outside one is refused, and the caches and gatherers the tests start
ask only resolvers on loopback."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harvest_common.config import Address
from harvest_common.dns import DNSConfig
from tests.loopback import (
    ANY_NETWORK,
    SystemResolverUsed,
    interface_flags,
    loopback_resolver_problem,
    outside_loopback,
)
from tests.support import REPO, MakeCache, cache_argv, cache_config, program_config, write_config

# A test address (RFC 5737) that nothing here may reach.
ELSEWHERE = "192.0.2.1"
# A pure test module, quick to run, for the runs in namespaces of the test's own.
PURE = "tests/http/test_dates.py"
RUN_SECONDS = 60


def test_the_suite_runs_in_a_namespace_holding_only_loopback() -> None:
    # (asserted first: with another interface present, the probes below would leave)
    assert outside_loopback() is None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        with pytest.raises(OSError, match="unreachable") as sent:
            udp.sendto(b"x", (ELSEWHERE, 53))
        assert sent.value.errno == errno.ENETUNREACH
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        with pytest.raises(OSError, match="unreachable") as connected:
            tcp.connect((ELSEWHERE, 80))
        assert connected.value.errno == errno.ENETUNREACH
    with pytest.raises(socket.gaierror):  # the system's resolver is out of reach too
        socket.getaddrinfo("harvest.example", 80)


def test_loopback_down_is_reported() -> None:
    assert interface_flags("lo") & 0x9 == 0x9  # IFF_LOOPBACK and IFF_UP, here
    down = outside_loopback(lambda name: 0x8)  # IFF_LOOPBACK without IFF_UP
    assert down == "the loopback interface is down (ip link set lo up)"


def run_pytest_in_new_namespace(setup: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest on PURE in a network namespace made here, after the shell commands ``setup``."""
    script = f'{setup}\nexec "$0" -m pytest -q -p no:cacheprovider {PURE}'
    environment = {k: v for k, v in os.environ.items() if k != ANY_NETWORK} | env
    return subprocess.run(
        ["unshare", "--net", "sh", "-ec", script, sys.executable],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
    )


def test_a_run_with_another_interface_is_refused_at_once() -> None:
    veth = "ip link add harvest0 type veth peer name harvest1\nip link set lo up"
    run = run_pytest_in_new_namespace(veth)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "network interfaces harvest0, harvest1, lo: only lo may be present" in run.stderr
    assert "run ./scripts/test.sh" in run.stderr
    assert " passed" not in run.stdout  # refused before any test ran


def test_a_run_with_loopback_down_is_refused_and_the_variable_lets_pure_tests_run() -> None:
    refused = run_pytest_in_new_namespace("true")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout + refused.stderr
    assert "the loopback interface is down" in refused.stderr
    allowed = run_pytest_in_new_namespace("true", **{ANY_NETWORK: "1"})
    assert allowed.returncode == pytest.ExitCode.OK, allowed.stdout + allowed.stderr
    assert " passed" in allowed.stdout


# -- resolvers ------------------------------------------------------------------------------


def test_the_fixtures_caches_ask_only_a_resolver_on_loopback(tmp_path: Path) -> None:
    assert loopback_resolver_problem(cache_config(tmp_path).dns) is None
    raw = program_config(tmp_path, "127.0.0.1:0", "127.0.0.1:0", "token")
    path = tmp_path / "program.toml"
    write_config(path, raw)
    assert cache_argv(path)[-2:] == ["--config", str(path)]  # (checked, then accepted)


LOCAL = (Address("127.0.0.1", 9),)


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (DNSConfig(nameservers=(), hosts_file=None), "the system's resolver (/etc/resolv.conf)"),
        (
            DNSConfig(nameservers=(*LOCAL, Address(ELSEWHERE, 53)), hosts_file=None),
            f"holds {ELSEWHERE}:53, which is not on loopback",
        ),
        (DNSConfig(nameservers=LOCAL), "dns.hosts_file is the system's /etc/hosts"),
    ],
)
def test_a_resolver_off_loopback_is_named(config: DNSConfig, problem: str) -> None:
    found = loopback_resolver_problem(config)
    assert found is not None
    assert problem in found


async def test_a_cache_started_with_the_system_resolver_is_refused(make_cache: MakeCache) -> None:
    with pytest.raises(SystemResolverUsed, match=r"dns\.nameservers is empty"):
        await make_cache(dns={"nameservers": []})
    with pytest.raises(SystemResolverUsed, match="not on loopback"):
        await make_cache(dns={"nameservers": [f"{ELSEWHERE}:53"]})


async def test_a_cache_program_with_the_system_resolver_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cache.toml"
    raw = program_config(tmp_path, "127.0.0.1:0", "127.0.0.1:0", "token")
    del raw["dns"]
    await asyncio.to_thread(write_config, path, raw)
    with pytest.raises(SystemResolverUsed, match=r"dns\.nameservers is empty"):
        await asyncio.to_thread(cache_argv, path)
