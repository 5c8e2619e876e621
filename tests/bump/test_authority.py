"""The interception CA (`harvest-cache ca init|show|export`) and the certificates it makes."""

from __future__ import annotations

import contextlib
import datetime
import ssl
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trustme
from cryptography import x509

from harvest_cache.bump import authority
from harvest_cache.bump.certificates import Minter, template_from
from harvest_cache.cli import main
from harvest_cache.errors import AuthorityError

NOW = datetime.datetime(2026, 12, 5, 12, 0, tzinfo=datetime.UTC)


def test_init_show_and_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca_dir = tmp_path / "ca"
    assert main(["ca", "init", "--dir", str(ca_dir)]) == 0
    made = capsys.readouterr().out
    assert (ca_dir / "ca-key.pem").stat().st_mode & 0o777 == 0o600
    assert main(["ca", "show", "--dir", str(ca_dir)]) == 0
    shown = capsys.readouterr().out
    fingerprint = authority.load(ca_dir).fingerprint
    assert fingerprint in made
    assert fingerprint in shown
    assert "PRIVATE" not in made + shown
    for form in ("pem", "der"):
        out = tmp_path / f"ca.{form}"
        assert (
            main(["ca", "export", "--dir", str(ca_dir), "--format", form, "--out", str(out)]) == 0
        )
        data = out.read_bytes()
        cert = (
            x509.load_pem_x509_certificate(data)
            if form == "pem"
            else x509.load_der_x509_certificate(data)
        )
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert b"PRIVATE" not in data
    # A second init would replace what browsers trust: refused.
    assert main(["ca", "init", "--dir", str(ca_dir)]) == 1
    assert "already holds a CA" in capsys.readouterr().err


def test_a_key_others_may_read_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    authority.create(tmp_path, "t", NOW)
    (tmp_path / "ca-key.pem").chmod(0o640)
    with pytest.raises(AuthorityError, match="mode 0640"):
        authority.load(tmp_path)
    assert main(["ca", "show", "--dir", str(tmp_path)]) == 1
    assert "chmod 600" in capsys.readouterr().err


def test_no_ca_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(AuthorityError, match="harvest-cache ca init"):
        authority.load(tmp_path / "nothing")


def test_a_certificate_mimics_the_origins_names_and_validity(tmp_path: Path) -> None:
    ca = authority.create(tmp_path / "ca", "t", NOW)
    minter = Minter(ca, tmp_path / "ca" / "certificates")
    origin_ca = trustme.CA()
    begins = NOW - datetime.timedelta(days=3)
    ends = NOW + datetime.timedelta(days=40)
    origin = origin_ca.issue_cert(
        "www.example.org", "example.org", "192.0.2.1", not_before=begins, not_after=ends
    )
    der = ssl.PEM_cert_to_DER_cert(origin.cert_chain_pems[0].bytes().decode())
    template = template_from(der, "example.org", NOW)
    assert template.names == ("example.org", "www.example.org", "192.0.2.1")
    cert = x509.load_pem_x509_certificate(minter.mint(template))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["example.org", "www.example.org"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["192.0.2.1"]
    # The origin's validity, within the CA's own (which began a day before NOW).
    assert (cert.not_valid_before_utc, cert.not_valid_after_utc) == (
        ca.certificate.not_valid_before_utc,
        ends.replace(microsecond=0),
    )
    assert cert.issuer == ca.certificate.subject
    # A client trusting the CA accepts it for the name (checked by OpenSSL, as browsers do).
    context = minter.make("example.org", template, keep=True)
    client = ssl.create_default_context(cadata=ca.export("pem").decode())
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = context.wrap_bio(server_in, server_out, server_side=True)
    tls = client.wrap_bio(client_in, client_out, server_hostname="www.example.org")
    for _ in range(10):  # (bounded: a handshake takes a few round trips)
        for side in (tls, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    assert tls.version() is not None
    assert tls.getpeercert()["subject"] == ((("commonName", "example.org"),),)


def test_kept_certificates_are_read_back_and_bounded(tmp_path: Path) -> None:
    ca = authority.create(tmp_path / "ca", "t", NOW)
    directory = tmp_path / "ca" / "certificates"
    now = datetime.datetime.now(datetime.UTC)
    minter = Minter(ca, directory)
    for i in range(12):
        name = f"h{i}.example"
        minter.make(name, template_from(None, name, now), keep=True)
    assert minter.stored("h3.example", now) is not None
    assert minter.stored("never.example", now) is None
    # Near its end a certificate is made again rather than presented.
    assert minter.stored("h3.example", now + datetime.timedelta(days=6, hours=12)) is None
    assert minter.prune(5) == 7
    assert len(list(directory.glob("h*.pem"))) == 5
    # The leaf key is made once and kept private; a new minter uses the same.
    assert (directory / "key.pem").stat().st_mode & 0o777 == 0o600
    assert Minter(ca, directory).stored("h11.example", now) is not None


def test_processes_starting_at_once_share_one_leaf_key(tmp_path: Path) -> None:
    """Workers make their minters at once: each links its key into place, the first stays."""
    ca = authority.create(tmp_path / "ca", "t", NOW)
    directory = tmp_path / "ca" / "certificates"
    with ThreadPoolExecutor(8) as pool:
        minters = list(pool.map(lambda _: Minter(ca, directory), range(8)))
    template = template_from(None, "a.example", NOW)
    chains = [x509.load_pem_x509_certificates(m.mint(template)) for m in minters]
    assert {len(chain) for chain in chains} == {2}  # (the certificate, then the CA's)
    first = chains[0][0].public_key()
    assert all(chain[0].public_key() == first for chain in chains)
    assert not list(directory.glob("*.part"))
