"""The import contract (docs/architecture.md): read from every module's imports, as written.

- A service (harvest_cache, gatherer, broker, replicator) imports only the foundation
  (harvest_common) and itself; the foundation imports no service.
- A pure core (wire formats, decisions, the query parser, topology, membership) imports only
  the standard library's pure parts, pure libraries and other pure cores: never a driver,
  nothing that does I/O.
- No package holds an import circle. Imports made only for type checking count: they are
  arrows a reader follows.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO

SERVICES = ("harvest_cache", "gatherer", "broker", "replicator")
FOUNDATION = "harvest_common"
PACKAGES = (*SERVICES, FOUNDATION)

# The pure cores: their modules take values and give values.
PURE = (
    "harvest_cache.http",
    "harvest_cache.hierarchy.icp",
    "harvest_cache.hierarchy.digest",
    "harvest_cache.hierarchy.peers",
    "harvest_cache.hierarchy.route",
    "harvest_cache.hierarchy.responder",
    "harvest_cache.hierarchy.health",
    "harvest_cache.hierarchy.carp",
    "harvest_cache.hierarchy.htcp",
    "harvest_cache.bump.client_hello",
    "harvest_cache.bump.decision",
    "harvest_cache.store.codec",
    "harvest_cache.store.entry",
    "harvest_cache.store.fields",
    "harvest_cache.store.interface",
    "harvest_cache.errors",
    "harvest_common.soif.codec",
    "harvest_common.soif.record",
    "harvest_common.soif.stream",
    "harvest_common.replication",
    "harvest_common.errors",
    "broker.query",
    "broker.federation.summary",
    "broker.federation.route",
    "broker.match",
    "broker.errors",
    "replicator.topology",
    "replicator.membership",
    "replicator.messages",
    "replicator.coordination",
    "replicator.links",
    "replicator.auth",
    "replicator.errors",
    "gatherer.scope",
    "gatherer.frontier",
    "gatherer.filters",
    "gatherer.urls",
    "gatherer.errors",
)
# What a pure core may not import: I/O, concurrency and the drivers' libraries.
IMPURE = (
    "asyncio",
    "socket",
    "ssl",
    "selectors",
    "subprocess",
    "threading",
    "concurrent",
    "multiprocessing",
    "sqlite3",
    "http.client",
    "urllib.request",
    "aiohttp",
    "uvloop",
    "httptools",
    "diskcache",
    "aiocache",
    "tantivy",
    "prometheus_client",
    "dns.asyncresolver",
    "dns.resolver",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    module_name(p): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))
}


def imported(name: str) -> Iterator[str]:
    """The modules (or packages) ``name`` imports, absolute, as written (a name imported from
    a package counts as its submodule when there is one)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text("utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            yield origin
            for alias in node.names:
                if f"{origin}.{alias.name}" in MODULES:
                    yield f"{origin}.{alias.name}"


def internal(target: str) -> str | None:
    """The project module ``target`` names (its longest known prefix), if any."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def top(name: str) -> str:
    return name.split(".")[0]


def is_pure(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in PURE)


ARROWS = {
    name: {t for t in (internal(i) for i in imported(name)) if t is not None and t != name}
    for name in MODULES
}


def test_every_pure_core_listed_exists() -> None:
    for prefix in PURE:
        assert any(m == prefix or m.startswith(prefix + ".") for m in MODULES), prefix


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_only_the_foundation_and_itself(service: str) -> None:
    wrong = sorted(
        f"{a} -> {b}"
        for a, targets in ARROWS.items()
        if top(a) == service
        for b in targets
        if top(b) not in (service, FOUNDATION)
    )
    assert wrong == []


def test_the_foundation_imports_no_service() -> None:
    wrong = sorted(
        f"{a} -> {b}"
        for a, targets in ARROWS.items()
        if top(a) == FOUNDATION
        for b in targets
        if top(b) != FOUNDATION
    )
    assert wrong == []


def test_a_pure_core_imports_no_driver_and_no_io() -> None:
    wrong = []
    for name in MODULES:
        if not is_pure(name):
            continue
        for target in ARROWS[name]:
            if not is_pure(target):
                wrong.append(f"{name} -> {target} (a driver)")
        for target in imported(name):
            if any(target == i or target.startswith(i + ".") for i in IMPURE):
                wrong.append(f"{name} -> {target} (I/O)")
    assert sorted(set(wrong)) == []


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(arrows):
        if start in index:
            continue
        work = [(start, iter(sorted(arrows[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(arrows[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_inside_a_package(package: str) -> None:
    within = {
        a: {b for b in targets if top(b) == package}
        for a, targets in ARROWS.items()
        if top(a) == package
    }
    assert circles(within) == []


def test_the_circle_finder_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
