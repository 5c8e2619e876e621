"""Five members replicating the server registry, as real processes on loopback with a
throttling relay on every link (tests/replicator/cluster.py): convergence after a burst of
changes at several members, a member killed and restarted, a partition healed, a slow link
leaving the topology, unauthenticated and corrupted traffic refused, and what people and
Prometheus read. The tests share one group and leave it whole for the next."""

from __future__ import annotations

import asyncio
import random
import secrets
import signal
import time
import xml.etree.ElementTree as ET
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs

import pytest
import pytest_asyncio

from harvest_common.replication.wire import ChangeList
from replicator import auth
from tests.replicator.cluster import GROUP, SECRET, Cluster, until
from tests.support import promtool_check

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

SIZE = 5
TIMING = {
    # Quick, but not so quick that a member slowed by the machine's load (ten processes on
    # two cores, and the test suite) is taken for dead.
    "probe_interval": 0.5,
    "probe_timeout": 0.25,
    "suspicion_timeout": 2.0,
    "reconnect_interval": 1.0,
    "measure_interval": 0.5,
    "anti_entropy_interval": 2.0,
    "long_poll": 5.0,
    "request_timeout": 5.0,
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    group = Cluster(tmp_path_factory.mktemp("cluster"), SIZE, TIMING)
    try:
        await group.start()
        rng = random.Random(1994)
        for relay in group.relays.values():
            relay.delay = rng.uniform(0.002, 0.010)
            relay.rate = 20e6
        await until(lambda: _all_alive(group), 30, "every member alive everywhere")
        yield group
    finally:
        await group.close()


async def _alive_at(cluster: Cluster, index: int) -> set[str]:
    status = await cluster.status(cluster.members[index])
    (group,) = status["groups"]
    return {m["id"] for m in group["members"] if m["state"] == "alive"}


async def _all_alive(cluster: Cluster) -> bool:
    everyone = {m.id for m in cluster.members}
    views = await asyncio.gather(*(_alive_at(cluster, i) for i in range(cluster.size)))
    return all(view == everyone for view in views)


async def _topology(cluster: Cluster, index: int) -> dict[str, Any] | None:
    async with cluster.http.get(f"{cluster.members[index].url}/topology/{GROUP}") as response:
        assert response.status == 200
        answer: dict[str, Any] | None = await response.json()
        return answer


async def test_every_member_gets_a_burst_of_changes_made_at_several_members(
    cluster: Cluster,
) -> None:
    before = await cluster.count(cluster.members[1])
    await asyncio.gather(
        *(
            cluster.register(cluster.members[i], f"burst-{i}-{n}")
            for i in (0, 2, 4)
            for n in range(25)
        )
    )
    await cluster.converged(cluster.members, within=30)

    async def searchable() -> bool:
        counts = await asyncio.gather(*(cluster.count(m) for m in cluster.members))
        return counts == [before + 75] * SIZE

    await until(searchable, 10, "every registration listed by every member")


async def test_the_members_agree_on_one_two_connected_topology(cluster: Cluster) -> None:
    async def agreed() -> bool:
        views = await asyncio.gather(*(_topology(cluster, i) for i in range(SIZE)))
        return (
            all(v is not None and v == views[0] for v in views)
            and len(views[0]["topology"]["members"] if views[0] else []) == SIZE
        )

    await until(agreed, 30, "one topology at every member")
    topology = await _topology(cluster, 0)
    assert topology is not None
    assert topology["topology"]["connectivity"] >= 2
    degrees = {m: 0 for m in topology["topology"]["members"]}
    for edge in topology["topology"]["edges"]:
        degrees[edge["a"]] += 1
        degrees[edge["b"]] += 1
        assert edge["cost"] > 0
    assert all(2 <= d <= 4 for d in degrees.values())


async def test_a_slow_link_drops_out_of_the_topology(cluster: Cluster) -> None:
    topology = await _topology(cluster, 0)
    assert topology is not None
    edge = topology["topology"]["edges"][0]
    a, b = int(edge["a"][1:]), int(edge["b"][1:])
    slow = cluster.link(a, b)
    saved = [relay.delay for relay in slow]
    for relay in slow:
        relay.delay = 0.25
    try:

        async def avoided() -> bool:
            now = await _topology(cluster, 0)
            return now is not None and all(
                {e["a"], e["b"]} != {edge["a"], edge["b"]} for e in now["topology"]["edges"]
            )

        await until(avoided, 30, f"the slow link {edge['a']}-{edge['b']} left the topology")
    finally:
        for relay, delay in zip(slow, saved, strict=True):
            relay.delay = delay
    # Changes still reach everyone.
    await cluster.register(cluster.members[a], "after-slow-link")
    await cluster.converged(cluster.members, within=30)


async def test_requests_not_signed_with_the_group_secret_are_refused(cluster: Cluster) -> None:
    target = cluster.members[1]
    listed = ChangeList(GROUP, 0, 99, ()).to_json()
    path = f"/replication/{GROUP}/notify"
    async with cluster.http.post(f"{target.url}{path}", json=listed) as response:
        assert response.status == 401
    body = b'{"type": "join", "sender": "intruder", "address": "127.0.0.1:9", "incarnation": 0}'
    forged = auth.sign_request(
        b"not-the-secret-at-all",
        "intruder",
        "POST",
        f"/replication/{GROUP}/membership",
        body,
        time.time(),
        secrets.token_hex(16),
    )
    forged["Content-Type"] = "application/json"
    async with cluster.http.post(
        f"{target.url}/replication/{GROUP}/membership", data=body, headers=forged
    ) as response:
        assert response.status == 401
    # A correct signature made long ago is refused too.
    stale = auth.sign_request(
        SECRET.encode(), "m0", "GET", "/replication/probe", b"", time.time() - 3600, "1" * 32
    )
    async with cluster.http.get(f"{target.url}/replication/probe", headers=stale) as response:
        assert response.status == 401
    status = await cluster.status(target)
    assert "intruder" not in {m["id"] for m in status["groups"][0]["members"]}
    async with cluster.http.get(f"{target.url}/metrics") as response:
        text = await response.text()
    assert _sample(text, "harvest_replicator_refused_requests_total") >= 3


async def test_a_corrupted_transfer_is_refused_and_nothing_of_it_applied(
    cluster: Cluster,
) -> None:
    victim = cluster.members[3]
    into = [relay for (i, _), relay in cluster.relays.items() if i == victim.index]
    for relay in into:
        relay.corrupt = True
    name = "corrupted-on-the-way"
    try:
        await cluster.register(cluster.members[0], name, size=6000)
        others = [m for m in cluster.members if m is not victim]
        await cluster.converged(others, within=30)
        await until(lambda: _auth_errors(cluster, victim.url), 30, "a transfer refused")
        assert sum(relay.corrupted for relay in into) > 0
        assert not await _holds(cluster, victim.broker_url, name)
    finally:
        for relay in into:
            relay.corrupt = False
    await cluster.converged(cluster.members, within=30)
    await until(lambda: _holds(cluster, victim.broker_url, name), 10, "the object listed")


async def _auth_errors(cluster: Cluster, url: str) -> bool:
    async with cluster.http.get(f"{url}/metrics") as response:
        text = await response.text()
    return _sample(text, 'harvest_replicator_peer_errors_total{kind="auth"}') > 0


async def _holds(cluster: Cluster, broker_url: str, name: str) -> bool:
    async with cluster.http.get(f"{broker_url}/api/hsr") as response:
        servers = (await response.json())["servers"]
    return any(s["name"] == name for s in servers)


async def test_a_partition_heals_and_both_sides_converge(cluster: Cluster) -> None:
    cluster.partition({0, 1}, cut=True)
    try:
        await cluster.register(cluster.members[0], "west-side")
        await cluster.register(cluster.members[3], "east-side")
        await cluster.converged(cluster.members[:2], within=30)
        await cluster.converged(cluster.members[2:], within=30)

        async def split() -> bool:
            return await _alive_at(cluster, 0) == {"m0", "m1"}

        await until(split, 30, "the west side sees only itself")
        assert not await _holds(cluster, cluster.members[0].broker_url, "east-side")
    finally:
        cluster.partition({0, 1}, cut=False)
    await cluster.converged(cluster.members, within=60)
    await until(lambda: _all_alive(cluster), 60, "every member alive again")
    for index, name in ((0, "east-side"), (4, "west-side")):
        url = cluster.members[index].broker_url
        await until(lambda: _holds(cluster, url, name), 10, f"{name} listed")  # noqa: B023


async def test_a_killed_member_catches_up_when_it_comes_back(cluster: Cluster) -> None:
    victim = cluster.members[2]
    await cluster.stop_member(victim, signal.SIGKILL)
    others = [m for m in cluster.members if m is not victim]

    async def dead() -> bool:
        status = await cluster.status(cluster.members[0])
        states = {m["id"]: m["state"] for m in status["groups"][0]["members"]}
        return states.get(victim.id) == "dead"

    await until(dead, 30, f"{victim.id} declared dead")
    await asyncio.gather(*(cluster.register(others[n % 4], f"missed-{n}") for n in range(20)))
    await cluster.converged(others, within=30)
    await cluster.start_member(victim)
    await cluster.converged(cluster.members, within=60)
    await until(
        lambda: _holds(cluster, victim.broker_url, "missed-19"), 10, "the missed changes listed"
    )
    await until(lambda: _all_alive(cluster), 60, "the restarted member alive everywhere")


async def test_metrics_pass_promtool_and_report_lag_topology_and_states(
    cluster: Cluster,
) -> None:
    # A change replicated first, so that the transfer counters have samples however the
    # module's tests are ordered or chosen.
    await cluster.register(cluster.members[1], "metered")
    await cluster.converged(cluster.members, within=30)
    async with cluster.http.get(f"{cluster.members[0].url}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    await promtool_check(text)
    assert _sample(text, f'harvest_replicator_members{{group="{GROUP}",state="alive"}}') == SIZE
    assert _sample(text, f'harvest_replicator_topology_edges{{group="{GROUP}"}}') >= SIZE
    for name in (
        "harvest_replicator_lag_sequence_numbers",
        "harvest_replicator_lag_seconds",
        "harvest_replicator_received_bytes_total",
        "harvest_replicator_sent_bytes_total",
        "harvest_replicator_anti_entropy_rounds_total",
        "harvest_replicator_link_rtt_seconds",
    ):
        assert f"\n{name}" in text, name


async def test_mirrors_are_listed_and_a_user_is_redirected_to_a_healthy_one(
    cluster: Cluster,
) -> None:
    member = cluster.members[1]
    async with cluster.http.get(f"{member.url}/mirrors/{GROUP}") as response:
        mirrors = (await response.json())["mirrors"]
    assert {m["id"] for m in mirrors if m["healthy"]} == {m.id for m in cluster.members}
    brokers = {m.broker_url for m in cluster.members}
    assert {m["public_url"] for m in mirrors} == brokers
    async with cluster.http.get(
        f"{member.url}/redirect/{GROUP}?q=Title%3A+cache", allow_redirects=False
    ) as response:
        assert response.status == 302
        location = response.headers["Location"]
    where, _, query = location.partition("/?")
    assert where in brokers
    assert parse_qs(query) == {"q": ["Title: cache"]}


async def test_the_status_page_draws_the_topology(cluster: Cluster) -> None:
    member = cluster.members[4]
    ns = "{http://www.w3.org/2000/svg}"
    # The topology may change while it is drawn (a loaded machine makes false suspicions):
    # the picture is judged against a topology that was the same before and after it.
    for _ in range(10):
        before = await _topology(cluster, 4)
        async with cluster.http.get(f"{member.url}/topology/{GROUP}.svg") as response:
            assert response.status == 200
            assert response.content_type == "image/svg+xml"
            picture = ET.fromstring(await response.text())
        if before is not None and before == await _topology(cluster, 4):
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError("the topology kept changing for 10 tries")
    assert len(picture.findall(f"{ns}circle")) == SIZE
    assert len(picture.findall(f"{ns}line")) == len(before["topology"]["edges"])
    async with cluster.http.get(f"{member.url}/") as response:
        page = await response.text()
    assert "<svg" in page
    assert all(m.id in page for m in cluster.members)


def _sample(text: str, name: str) -> float:
    """The value of the sample named exactly ``name`` (with labels), summed over lines."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or (line.startswith(name + "{") and "{" not in name):
            total += float(line.rsplit(" ", 1)[1])
    return total
