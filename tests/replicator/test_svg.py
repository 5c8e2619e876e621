"""The topology picture: well-formed SVG, one line per edge and one circle per member, states
drawn, this member marked, and member names escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from replicator.svg import SIZE, picture
from replicator.topology import Topology, TopologyParams, compute

NS = "{http://www.w3.org/2000/svg}"


def _topology(members: Sequence[str], cost: float = 0.02) -> Topology:
    costs = {(a, b): cost for a in members for b in members if a != b}
    return compute(members, costs, TopologyParams(iterations=100))


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    assert root.get("width") == str(SIZE)
    return root


def _circles(root: ET.Element) -> dict[str, ET.Element]:
    """Each member's circle, by the member named in its title."""
    found: dict[str, ET.Element] = {}
    for circle in root.iter(f"{NS}circle"):
        title = circle.findtext(f"{NS}title")
        assert title is not None
        found[title.rsplit(": ", 1)[0]] = circle
    return found


def test_one_line_per_edge_and_one_circle_per_member() -> None:
    members = [f"m{i}" for i in range(7)]
    topology = _topology(members)
    root = _parse(picture(topology, dict.fromkeys(members, "alive"), "m0"))
    lines = list(root.iter(f"{NS}line"))
    assert len(lines) == len(topology.edges)
    assert len(list(root.iter(f"{NS}circle"))) == len(members)
    assert set(_circles(root)) == set(members)
    drawn = set()
    for line in lines:
        title = line.findtext(f"{NS}title")
        assert title is not None
        a, _, rest = title.partition(" to ")
        b = rest.split(":", 1)[0]
        drawn.add((a, b))
    assert drawn == set(topology.edges)


def test_the_title_counts_members_and_edges() -> None:
    members = ["a", "b", "c", "d"]
    topology = _topology(members)
    root = _parse(picture(topology, {}, "a"))
    title = root.findtext(f"{NS}title")
    assert title is not None
    assert f"{len(members)} members" in title
    assert f"{len(topology.edges)} edges" in title


def test_edge_costs_are_shown_in_milliseconds() -> None:
    topology = _topology(["a", "b", "c"], cost=0.012)
    root = _parse(picture(topology, {}, "a"))
    labels = [t.text for t in root.iter(f"{NS}text") if t.text and t.text.endswith(" ms")]
    assert labels.count("12 ms") == len(topology.edges)
    titles = [line.findtext(f"{NS}title") or "" for line in root.iter(f"{NS}line")]
    assert all(title.endswith(": 12.0 ms") for title in titles)


def test_states_and_this_member_are_drawn() -> None:
    members = ["a", "b", "c", "d"]
    topology = _topology(members)
    states = {"a": "alive", "b": "suspect", "c": "dead"}  # d: unknown
    circles = _circles(_parse(picture(topology, states, "b")))
    assert circles["a"].get("fill") != "white"
    assert {circles[m].get("fill") for m in "bcd"} == {"white"}  # not usable: hollow
    assert circles["b"].get("stroke") == circles["a"].get("stroke")
    assert circles["c"].get("stroke") != circles["a"].get("stroke")
    assert circles["d"].get("stroke") == circles["c"].get("stroke")
    widths = {m: float(circles[m].get("stroke-width", "0")) for m in members}
    assert widths["b"] > max(widths[m] for m in "acd")
    titles = {m: circles[m].findtext(f"{NS}title") for m in members}
    assert titles == {"a": "a: alive", "b": "b: suspect", "c": "c: dead", "d": "d: unknown"}


def test_members_sit_inside_the_picture() -> None:
    members = [f"member-{i:02d}" for i in range(12)]
    root = _parse(picture(_topology(members), {}, "member-00"))
    for circle in root.iter(f"{NS}circle"):
        x, y = float(circle.get("cx", "-1")), float(circle.get("cy", "-1"))
        assert 0 < x < SIZE
        assert 0 < y < SIZE


def test_member_names_are_escaped() -> None:
    odd = 'x<&>"y'
    members = ["a", "b", odd]
    svg = picture(_topology(members), {odd: "alive<script>"}, odd)
    assert "<&>" not in svg
    assert "&lt;&amp;&gt;" in svg
    assert "<script>" not in svg
    root = _parse(svg)
    circles = _circles(root)
    assert set(circles) == set(members)
    assert circles[odd].findtext(f"{NS}title") == f"{odd}: alive<script>"
    assert odd in [t.text for t in root.iter(f"{NS}text")]
    line_titles = [line.findtext(f"{NS}title") or "" for line in root.iter(f"{NS}line")]
    assert any(odd in title for title in line_titles)


def test_a_single_member_has_no_lines() -> None:
    root = _parse(picture(_topology(["only"]), {"only": "alive"}, "only"))
    assert list(root.iter(f"{NS}line")) == []
    assert len(list(root.iter(f"{NS}circle"))) == 1
