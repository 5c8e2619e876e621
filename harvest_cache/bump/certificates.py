"""Server certificates the CA makes for intercepted tunnels, one per server name, and the TLS
contexts that present them.

A certificate mimics the origin's (Squid's ``sslcrtd`` "mimic"): the same names (DNS and IP
subject alternative names) and validity, within the CA's own, so that a browser judges it as
it would the origin's. All share one key (made once, 0600, beside the CA), which spares a key
generation per name. Each is kept in memory (bounded, the least recently used forgotten
first) and as a file in the CA directory's ``certificates`` (bounded too), so a restart
mints nothing again.

Minting, file work and context loading are blocking: the driver runs ``Minter`` methods in a
thread.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harvest_cache.bump.authority import Authority
from harvest_cache.errors import AuthorityError

_KEY_FILE = "key.pem"
# Without the origin's certificate (it could not be had), one of this long.
_DEFAULT_LIFETIME = datetime.timedelta(days=7)
# A certificate this close to its end is made again rather than presented.
_RENEW_BEFORE = datetime.timedelta(days=1)
_UNSAFE = re.compile(r"[^a-z0-9._-]")


@dataclass(frozen=True, slots=True)
class Template:
    """What a server certificate says: its names and its validity."""

    names: tuple[str, ...]  # the first is the subject's common name
    not_before: datetime.datetime
    not_after: datetime.datetime


def template_from(der: bytes | None, name: str, now: datetime.datetime) -> Template:
    """The template mimicking the origin's certificate ``der`` (None: one for ``name``)."""
    if der is None:
        return Template((name,), now - datetime.timedelta(hours=1), now + _DEFAULT_LIFETIME)
    cert = x509.load_der_x509_certificate(der)
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names += [n.lower() for n in san.get_values_for_type(x509.DNSName)]
        names += [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        pass
    if name not in names:
        names.insert(0, name)  # (verified against the name, so it was covered by a wildcard)
    else:
        names.remove(name)
        names.insert(0, name)
    return Template(tuple(names[:100]), cert.not_valid_before_utc, cert.not_valid_after_utc)


def file_name(server_name: str) -> str:
    """The certificate file for ``server_name`` (IPv6 colons and anything odd made safe)."""
    return _UNSAFE.sub("_", server_name.lower())[:200] + ".pem"


class Minter:
    """Makes and loads server certificates signed by ``authority`` in ``directory``."""

    def __init__(self, authority: Authority, directory: Path) -> None:
        self.authority = authority
        self.directory = directory
        self._key_path = directory / _KEY_FILE
        self._key = self._leaf_key()
        self._chain_tail = authority.certificate.public_bytes(serialization.Encoding.PEM)

    def _leaf_key(self) -> ec.EllipticCurvePrivateKey:
        """The key every server certificate shares: read, or made (by one process of
        several starting at once: each links its own into place, the first one stays)."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                data = self._key_path.read_bytes()
            except FileNotFoundError:
                pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
                partial = self.directory / f"{uuid.uuid4().hex}.key.part"
                fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(pem)
                try:
                    os.link(partial, self._key_path)  # (whole, or not at all)
                except FileExistsError:
                    pass
                finally:
                    partial.unlink()
                data = self._key_path.read_bytes()
        except OSError as e:
            raise AuthorityError(f"cannot use {self.directory}: {e.strerror}") from None
        try:
            loaded = serialization.load_pem_private_key(data, password=None)
        except ValueError:
            raise AuthorityError(f"{self._key_path} holds no readable key") from None
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise AuthorityError(f"{self._key_path} is not an ECDSA key")
        return loaded

    def mint(self, template: Template) -> bytes:
        """The PEM chain (server certificate, then the CA's) for ``template``."""
        ca = self.authority.certificate
        not_before = max(template.not_before, ca.not_valid_before_utc)
        not_after = min(template.not_after, ca.not_valid_after_utc)
        alternatives: list[x509.GeneralName] = []
        for name in template.names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        common = template.names[0][:64]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
            .issuer_name(ca.subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.authority.key.public_key()),
                critical=False,
            )
            .sign(self.authority.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM) + self._chain_tail

    def stored(self, server_name: str, now: datetime.datetime) -> ssl.SSLContext | None:
        """The context of the certificate kept on disk for ``server_name``, if it is there
        and not near its end."""
        path = self.directory / file_name(server_name)
        try:
            first = x509.load_pem_x509_certificate(path.read_bytes())
        except (OSError, ValueError):
            return None
        if first.not_valid_after_utc - _RENEW_BEFORE < now:
            return None
        return self._context(path)

    def make(self, server_name: str, template: Template, *, keep: bool) -> ssl.SSLContext:
        """A context presenting a new certificate for ``template``; kept on disk for
        ``server_name`` if ``keep``."""
        chain = self.mint(template)
        partial = self.directory / f"{uuid.uuid4().hex}.part"
        partial.write_bytes(chain)
        if not keep:
            try:
                return self._context(partial)
            finally:
                partial.unlink()
        path = self.directory / file_name(server_name)
        os.replace(partial, path)
        return self._context(path)

    def _context(self, chain: Path) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(chain, self._key_path)
        # Inside the tunnel the cache speaks HTTP/1.1 alone; a browser offering h2 takes it.
        context.set_alpn_protocols(["http/1.1"])
        return context

    def prune(self, keep: int) -> int:
        """Remove the least recently written certificate files beyond ``keep``; how many."""
        files = sorted(
            (p for p in self.directory.glob("*.pem") if p.name != _KEY_FILE),
            key=lambda p: p.stat().st_mtime,
        )
        extra = files[: max(0, len(files) - keep)]
        for path in extra:
            path.unlink(missing_ok=True)
        return len(extra)
