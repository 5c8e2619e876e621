"""bump.decision: which tunnels are bumped, which spliced and why; pins expire and stay bounded."""

from __future__ import annotations

import pytest

from harvest_cache.bump.client_hello import INCOMPLETE, NOT_TLS, ClientHello
from harvest_cache.bump.decision import Bump, Pins, Rules, Splice, decide, within
from harvest_common.config import networks

RULES = Rules(
    bump_allow=networks(["127.0.0.0/8", "10.0.0.0/8"]),
    splice_domains=("bank.example", "health.example"),
    splice_networks=networks(["192.0.2.0/24"]),
)
HELLO = ClientHello("www.example.org", ("http/1.1",), 300)


def verdict(
    hello: ClientHello | object = HELLO,
    host: str = "www.example.org",
    client: str = "127.0.0.1",
    ips: tuple[str, ...] = (),
    pins: Pins | None = None,
) -> Bump | Splice:
    return decide(hello, host, ips, client, RULES, pins or Pins(60), 1000.0)  # type: ignore[arg-type]


def test_a_tls_client_allowed_to_be_bumped_is_bumped_under_its_server_name() -> None:
    assert verdict() == Bump("www.example.org")
    # Without SNI, the CONNECT host names the server.
    assert verdict(ClientHello(None, (), 200), host="Other.Example") == Bump("other.example")


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"client": "192.168.1.5"}, "client"),
        ({"hello": NOT_TLS}, "not-tls"),
        ({"hello": INCOMPLETE}, "not-tls"),
        ({"hello": ClientHello("www.bank.example", (), 1)}, "domain"),
        ({"hello": ClientHello("health.example", (), 1)}, "domain"),
        ({"hello": ClientHello(None, (), 1), "host": "login.bank.example"}, "domain"),
        ({"host": "192.0.2.7", "hello": ClientHello(None, (), 1)}, "network"),
        ({"ips": ("192.0.2.9",)}, "network"),
    ],
)
def test_what_is_spliced_and_why(kwargs: dict[str, object], reason: str) -> None:
    assert verdict(**kwargs) == Splice(reason)  # type: ignore[arg-type]


def test_a_domain_is_not_a_suffix_of_another_word() -> None:
    assert not within("notbank.example", ("bank.example",))
    assert within("a.b.bank.example", ("bank.example",))


def test_a_refused_server_is_spliced_until_its_pin_runs_out() -> None:
    pins = Pins(60)
    pins.refused("www.example.org", 1000.0)
    assert verdict(pins=pins) == Splice("pinned")
    assert decide(HELLO, "www.example.org", (), "127.0.0.1", RULES, pins, 1060.0) == Bump(
        "www.example.org"
    )
    assert len(pins) == 0  # (forgotten once run out)


def test_pins_are_bounded() -> None:
    pins = Pins(60, limit=100)
    for i in range(1000):
        pins.refused(f"h{i}.example", 1000.0)
    assert len(pins) == 100
    assert pins.pinned("h999.example", 1001.0)
    assert not pins.pinned("h0.example", 1001.0)
