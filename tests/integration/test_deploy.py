"""deploy/: the Prometheus configuration and alerts (with promtool), the Grafana dashboard's
metrics against a real scrape, and the example configurations."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.config import load as load_broker
from gatherer.config import RootNode
from gatherer.config import load as load_gatherer
from harvest_cache.cli import main
from replicator.cli import main as replicator_main
from replicator.config import load as load_replicator
from tests.support import MakeCache, Origin, free_port, free_udp_port, proxy_client, static

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail(
            "promtool is missing (Debian's prometheus package; scripts/test.sh installs it)"
        )
    return subprocess.run(
        [tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


async def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(promtool, *args, cwd=cwd)


async def test_the_prometheus_configuration_and_rules_are_valid() -> None:
    here = DEPLOY / "prometheus"
    for args in (("check", "config", "prometheus.yml"), ("check", "rules", "alerts.yml")):
        result = await run(*args, cwd=here)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout


async def test_every_alert_has_a_passing_unit_test() -> None:
    here = DEPLOY / "prometheus"
    result = await run("test", "rules", "alerts_test.yml", cwd=here)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = (here / "alerts.yml").read_text()
    tests = (here / "alerts_test.yml").read_text()
    alerts = re.findall(r"- alert: (\w+)", rules)
    assert len(alerts) >= 5
    assert all(f"alertname: {name}" in tests for name in alerts)


@pytest.mark.parametrize("name", ["harvest-cache", "harvest-broker", "harvest-gatherer"])
async def test_every_dashboard_query_parses(tmp_path: Path, name: str) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / f"{name}.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    # Grafana's variables as Prometheus would see them once substituted.
    exprs = [e.replace("$__rate_interval", "1m").replace("$instance", ".*") for e in exprs]
    records = [{"record": f"q{i}", "expr": e} for i, e in enumerate(exprs)]
    rules = {"groups": [{"name": name, "rules": records}]}  # (JSON is YAML)
    await asyncio.to_thread((tmp_path / "rules.yml").write_text, json.dumps(rules))
    result = await run("check", "rules", "rules.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


async def test_the_compose_prometheus_configuration_is_valid(tmp_path: Path) -> None:
    # Mounted next to the alerts in the container: checked the same way here.
    await asyncio.to_thread(shutil.copy, DEPLOY / "compose" / "prometheus.yml", tmp_path)
    await asyncio.to_thread(shutil.copy, DEPLOY / "prometheus" / "alerts.yml", tmp_path)
    result = await run("check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "path",
    sorted((DEPLOY / "examples").glob("*.toml")) + sorted((DEPLOY / "compose").glob("*.toml")),
    ids=lambda p: p.name,
)
async def test_example_configurations_are_valid(path: Path) -> None:
    assert await asyncio.to_thread(main, ["--config", str(path), "--check-config"]) == 0


def test_example_gatherer_configuration_is_valid() -> None:
    config = load_gatherer(DEPLOY / "examples" / "gatherer.cf")
    assert config.http_proxy == "http://127.0.0.1:3128"
    assert [node.url for node in config.root_nodes if isinstance(node, RootNode)] == [
        "http://www.example.edu/",
        "ftp://ftp.example.edu/pub/docs/",
    ]
    # Runs nightly, as harvest-gather.timer starts them; registered at the mirrors' HSR.
    assert config.gather_interval == 86400
    assert config.hsr.url == "http://mirror-a.example.org:8501"


def test_the_mirror_examples_are_valid_and_agree() -> None:
    mirrors = DEPLOY / "examples" / "mirrors"
    assert sorted(p.name for p in mirrors.glob("*.toml")) == [
        "broker-a.toml",
        "broker-b.toml",
        "replicator-a.toml",
        "replicator-b.toml",
    ]
    for side, other in (("a", "b"), ("b", "a")):
        broker = load_broker(mirrors / f"broker-{side}.toml")
        path = mirrors / f"replicator-{side}.toml"
        assert replicator_main(["check-config", str(path)]) == 0
        replicator = load_replicator(path)
        # The replicator is its broker's member, holds its admin token, and reaches it.
        assert replicator.member == broker.broker.member == f"mirror-{side}"
        assert replicator.replicator.broker_token == broker.broker.admin_token
        assert replicator.replicator.broker == f"http://127.0.0.1:{broker.broker.listen.port}"
        assert [g.collection for g in replicator.groups] == ["hsr", "cs-papers"]
        for group in replicator.groups:
            assert [str(seed) for seed in group.seeds] == [f"mirror-{other}.example.org:8502"]
    secrets = {load_replicator(mirrors / f"replicator-{s}.toml").replicator.secret for s in "ab"}
    assert len(secrets) == 1  # the groups' shared secret
    # A collects cs-papers from its gatherer; B only mirrors it.
    assert [c.name for c in load_broker(mirrors / "broker-a.toml").collections] == ["cs-papers"]
    assert load_broker(mirrors / "broker-b.toml").collections == ()


def dashboard_metrics() -> set[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "harvest-cache.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    variables = [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    names: set[str] = set()
    for text in exprs + variables:
        names.update(re.findall(r"\b(?:harvest_cache|process)_[a-z_]+\b", text))
    return names


async def test_every_metric_the_dashboard_uses_is_in_a_real_scrape(
    origin: Origin, make_cache: MakeCache, tmp_path: Path
) -> None:
    parent = await make_cache(
        server={"name": "parent"},
        cache={"dir": str(tmp_path / "parent")},
        log={"access_log": "none"},
    )
    child = await make_cache(
        hierarchy={
            "digests": False,
            "peers": [
                {
                    "name": "parent",
                    "host": "127.0.0.1",
                    "http_port": parent.address[1],
                    "icp_port": free_port(),  # nobody answers: the peer is queried, times out
                    "role": "parent",
                },
                {  # (the same cache again, as a one-member cache array: the array's numbers)
                    "name": "array-member",
                    "host": "127.0.0.1",
                    "http_port": parent.address[1],
                    "icp_port": 0,
                    "carp": True,
                },
            ],
            "icp_timeout_max": 0.05,
        },
        icp={"port": free_port()},
        htcp={"port": free_udp_port()},  # (its counters are on the dashboard too)
    )
    origin.route("/d", static(b"d", {"Cache-Control": "max-age=60"}))
    async with proxy_client(child) as client:
        response, _ = await client.get(origin.url("/d"))
    assert response.status == 200
    assert child.admin is not None
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{child.admin.address[1]}/metrics") as scrape,
    ):
        text = await scrape.text()
    exposed: set[str] = set()
    for family in text_string_to_metric_families(text):
        exposed.add(family.name)
        if family.type == "counter":  # (a family without samples yet still names them)
            exposed.add(f"{family.name}_total")
        exposed.update(sample.name for sample in family.samples)
    used = dashboard_metrics()
    assert len(used) >= 12
    assert used <= exposed, f"not exported: {sorted(used - exposed)}"
