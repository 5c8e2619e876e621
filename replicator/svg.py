"""A picture of a group's update topology (SVG), for the status page. Pure.

Members sit on a circle in id order, each edge is drawn with its measured cost; members that
are not usable (suspect, dead) are drawn hollow, so a glance shows who floods to whom and
which links the topology avoided."""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape

from replicator.topology import Topology

SIZE = 480
_RADIUS = 180
_NODE = 9


def picture(topology: Topology, states: Mapping[str, str], me: str) -> str:
    """``topology`` as an SVG document; ``states`` maps member ids to their state names."""
    members = topology.members
    centre = SIZE / 2
    where: dict[str, tuple[float, float]] = {}
    for i, member in enumerate(members):
        angle = 2 * math.pi * i / max(len(members), 1) - math.pi / 2
        where[member] = (centre + _RADIUS * math.cos(angle), centre + _RADIUS * math.sin(angle))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SIZE}" height="{SIZE}"'
        f' viewBox="0 0 {SIZE} {SIZE}" font-family="sans-serif" font-size="11">',
        f"<title>update topology: {len(members)} members, {len(topology.edges)} edges,"
        f" total cost {topology.total_cost:.3g} s</title>",
    ]
    for a, b in sorted(topology.edges):
        (x1, y1), (x2, y2) = where[a], where[b]
        cost = topology.costs[a, b]
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
            f' stroke="#4a6fa5" stroke-width="2"><title>{escape(a)} to {escape(b)}:'
            f" {cost * 1000:.1f} ms</title></line>"
        )
        parts.append(
            f'<text x="{(x1 + x2) / 2:.1f}" y="{(y1 + y2) / 2:.1f}" fill="#333"'
            f' text-anchor="middle">{cost * 1000:.0f} ms</text>'
        )
    for member in members:
        x, y = where[member]
        state = states.get(member, "unknown")
        fill = "#2e8b57" if state == "alive" else "white"
        stroke = "#b22222" if state not in ("alive", "suspect") else "#2e8b57"
        width = 3 if member == me else 1.5
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{_NODE}" fill="{fill}" stroke="{stroke}"'
            f' stroke-width="{width}"><title>{escape(member)}: {escape(state)}</title></circle>'
        )
        dy = -14 if y < centre else 22
        parts.append(
            f'<text x="{x:.1f}" y="{y + dy:.1f}" text-anchor="middle">{escape(member)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)
