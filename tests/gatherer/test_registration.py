"""The gatherer at the Harvest Server Registry: the ``HSR-*`` headers and the ``[hsr]`` table
(the same settings, checked as every Harvest server checks them), what the registration says
the gatherer gathers, and ``harvest-gather serve`` registering at a real broker on loopback,
found in its ``/api/hsr`` and renewed."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gatherer.config import load
from gatherer.config.build import HSR_HEADERS
from gatherer.errors import ConfigError
from gatherer.registration import MAX_LISTED, gathers, registered
from harvest_common.hsr_client import HsrSettings
from harvest_common.soif import Record, decode
from tests.gatherer.test_cli import answering, started, stops_cleanly, write_config
from tests.gatherer.test_config import load_text
from tests.replicator.test_cli import serving
from tests.support import free_port

DOCS = Path(__file__).parents[2] / "docs" / "gatherer-configuration.md"
POLL = 200  # polls of /api/hsr, 50 ms apart: 10 s at most


# -- the settings, in both forms ---------------------------------------------------------------


def test_the_hsr_headers_and_the_hsr_table_give_the_same_settings(tmp_path: Path) -> None:
    harvest = load_text(
        tmp_path,
        "HSR-URL: http://hsr.example.org:8501/\n"
        "HSR-Description: The campus web\n"
        "hsr-administrator: webmaster@example.edu\n"
        "HSR-Renew: 3600\n",
    )
    toml = load_text(
        tmp_path,
        'gatherer_name = "Harvest Gatherer"\n'
        "[hsr]\n"
        'url = "http://hsr.example.org:8501/"\n'
        'description = "The campus web"\n'
        'administrator = "webmaster@example.edu"\n'
        "renew = 3600\n",
        "gatherer.toml",
    )
    assert (
        harvest.hsr
        == toml.hsr
        == HsrSettings(
            url="http://hsr.example.org:8501",
            description="The campus web",
            administrator="webmaster@example.edu",
            renew=3600.0,
        )
    )
    assert load_text(tmp_path, "# no HSR\n").hsr == HsrSettings()  # none: not registered


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        (
            "gatherer.cf",
            "HSR-URL: ftp://hsr.example\n",
            "gatherer.cf:1: HSR-URL: expected an http:// or https:// URL, got 'ftp://hsr.example'",
        ),
        (
            "gatherer.cf",
            "Gatherer-Name: G\nHSR-Renew: 5\n",
            "gatherer.cf:2: HSR-Renew: must be between 60 and 100000000.0, got 5.0",
        ),
        (
            "gatherer.cf",
            "HSR-Renew: soon\n",
            "gatherer.cf:1: HSR-Renew: expected a number, got 'soon'",
        ),
        ("gatherer.cf", "HSR-URL:\n", "gatherer.cf:1: HSR-URL: missing value"),
        (
            "gatherer.toml",
            '[hsr]\nurl = "nowhere"\n',
            "gatherer.toml: hsr.url: expected an http:// or https:// URL, got 'nowhere'",
        ),
        (
            "gatherer.toml",
            '[hsr]\nrenew = "3600"\n',
            "gatherer.toml: hsr.renew: expected a number, got '3600'",
        ),
        ("gatherer.toml", '[hsr]\ncolour = "red"\n', "gatherer.toml: hsr.colour: unknown key"),
        ("gatherer.toml", "hsr = 3\n", "gatherer.toml: hsr: expected a table ([hsr]), got 3"),
        ("gatherer.toml", 'hsr_url = "http://x.example"\n', "gatherer.toml: hsr_url: unknown key"),
    ],
    ids=[
        "url-scheme",
        "renew-too-often",
        "renew-not-a-number",
        "url-empty",
        "toml-url",
        "toml-renew-a-string",
        "toml-unknown-key",
        "toml-not-a-table",
        "toml-top-level-key",
    ],
)
def test_a_bad_hsr_setting_is_reported_where_it_is(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text, name)
    assert caught.value.problems == [f"{tmp_path}/{problem}"]


def test_the_docs_describe_every_hsr_header_and_key() -> None:
    docs = DOCS.read_text()
    for header in HSR_HEADERS:
        assert f"| `{header.name}` | `{header.field}` |" in docs


# -- what the registration says ----------------------------------------------------------------


def test_the_registration_names_the_roots_leaves_and_their_hosts(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        "<RootNodes>\n"
        "http://WWW.Example.edu/  Depth=2\n"
        "ftp://ftp.example.edu:2121/pub/\n"
        "file:///srv/docs/\n"
        "|list-roots.sh Depth=1\n"
        "</RootNodes>\n"
        "<LeafNodes>\n"
        "http://www.example.edu/faq.html\n"
        "http://[2001:db8::1]:8080/hot.html\n"
        "</LeafNodes>\n",
    )
    assert dict(gathers(config)) == {
        "Root-URLs": "http://WWW.Example.edu/\nftp://ftp.example.edu:2121/pub/\nfile:///srv/docs/",
        "Leaf-URLs": "http://www.example.edu/faq.html\nhttp://[2001:db8::1]:8080/hot.html",
        # Programs' URLs are known only when gathering; a FILE URL names no host.
        "Hosts": "[2001:db8::1]:8080\nftp.example.edu:2121\nwww.example.edu",
    }
    assert gathers(load_text(tmp_path, "# nothing to gather\n")) == ()


def test_each_list_stops_at_its_bound(tmp_path: Path) -> None:
    leaves = "".join(f"http://h{n}.example/\n" for n in range(MAX_LISTED + 5))
    config = load_text(tmp_path, f"<LeafNodes>\n{leaves}</LeafNodes>\n")
    listed = dict(gathers(config))
    assert listed["Leaf-URLs"].splitlines() == [f"http://h{n}.example/" for n in range(MAX_LISTED)]
    assert len(listed["Hosts"].splitlines()) == MAX_LISTED


# -- registering at a real HSR -----------------------------------------------------------------


async def registrations(
    session: aiohttp.ClientSession, hsr: str, name: str, *, seen: int = 1
) -> list[dict[str, Any]]:
    """The gatherer ``name`` in the HSR's list each time it changed (its Last-Seen), until
    ``seen`` versions of it were seen (bounded)."""
    versions: list[dict[str, Any]] = []
    for _ in range(POLL):
        async with session.get(f"{hsr}/api/hsr", params={"type": "gatherer"}) as response:
            assert response.status == 200
            servers = (await response.json())["servers"]
        found = [s for s in servers if s["name"] == name]
        if found and (not versions or found[0]["last_seen"] != versions[-1]["last_seen"]):
            versions.append(found[0])
            if len(versions) >= seen:
                return versions
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name}: {len(versions)} registrations seen, not {seen}")


async def test_serve_registers_the_gatherer_at_its_hsr_and_renews_it(tmp_path: Path) -> None:
    broker = tmp_path / "broker.toml"
    broker.write_text(
        f'[broker]\nlisten = "127.0.0.1:0"\ndata_dir = "{tmp_path / "hsr"}"\nname = "HSR"\n'
    )
    async with (
        serving("broker", broker, tmp_path / "broker.log") as (_, hsr),
        aiohttp.ClientSession() as session,
    ):
        port = free_port()
        root = "http://www.example.edu/"
        config = write_config(
            tmp_path,
            root,
            headers=f"HSR-URL: {hsr}\nHSR-Description: The campus web\nHSR-Renew: 60",
        )
        listen = f"127.0.0.1:{port}"
        async with started("serve", "-c", str(config), "--listen", listen, cwd=tmp_path) as gd:
            await answering(session, f"http://{listen}")
            (found,) = await registrations(session, hsr, "CLI Gatherer")
            assert found["url"] == f"http://{listen}/"  # where brokers pull from
            assert (found["host"], found["port"]) == ("127.0.0.1", port)
            assert found["description"] == "The campus web"
            assert found["software_version"].startswith("harvest-gather ")
            async with session.get(
                f"{hsr}/api/objects/{found['oid']}", params={"format": "soif"}
            ) as response:
                (record,) = decode(await response.read())
            assert isinstance(record, Record)
            assert record.text("Root-URLs") == root
            assert record.text("Hosts") == "www.example.edu"
            assert record.text("Time-to-Live") == "120"  # two renewal periods
            # Brokers find the gatherers of a host by searching the registry.
            query = {"type": "gatherer", "q": "Hosts: www.example.edu"}
            async with session.get(f"{hsr}/api/hsr", params=query) as response:
                listed = (await response.json())["servers"]
            assert [s["url"] for s in listed] == [found["url"]]
            await stops_cleanly(gd, signal.SIGTERM)

        # Renewed every `renew` seconds (shortened here: the configuration allows 60 at least),
        # each time pushing the expiry on.
        loaded = await asyncio.to_thread(load, config)
        often = replace(loaded, hsr=HsrSettings(url=hsr, renew=0.2), name="Renewed")
        async with registered(often, ("0.0.0.0", port), "test"):
            renewals = await registrations(session, hsr, "Renewed", seen=3)
        expiries = [r["expires"] for r in renewals]
        assert expiries == sorted(expiries)
        assert len(set(expiries)) == 3
        # On a wildcard address the gatherer is registered under Gatherer-Host.
        assert {r["url"] for r in renewals} == {f"http://gatherer.test:{port}/"}
