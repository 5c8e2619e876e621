"""The cache's certificate authority, for intercepting CONNECT tunnels (Squid's ``ssl_bump``).

Made once by ``harvest-cache ca init``: an ECDSA P-256 key and a self-signed certificate
that may sign server certificates and nothing below them (path length 0). The key file is
readable by its owner alone; the cache refuses to start with a key others may read, and never
logs it. Browsers and operating systems are given the certificate (``ca export``), in PEM or
DER.
"""

from __future__ import annotations

import datetime
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harvest_cache.errors import AuthorityError

CERTIFICATE_FILE = "ca.pem"
KEY_FILE = "ca-key.pem"
# Long enough that browsers' stores need not be refreshed often; a new CA is a new install.
_YEARS = 10


@dataclass(frozen=True, slots=True)
class Authority:
    """The CA: its certificate and key, and the certificate as the files hold it."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the certificate, as browsers show it (colon-separated hex)."""
        return self.certificate.fingerprint(hashes.SHA256()).hex(":").upper()

    def export(self, form: str) -> bytes:
        """The certificate as ``pem`` or ``der`` (never the key)."""
        encoding = {"pem": serialization.Encoding.PEM, "der": serialization.Encoding.DER}
        if form not in encoding:
            raise AuthorityError(f"unknown export form {form!r}: pem or der")
        return self.certificate.public_bytes(encoding[form])

    def describe(self) -> str:
        cert = self.certificate
        return "\n".join(
            (
                f"subject:     {cert.subject.rfc4514_string()}",
                f"valid:       {cert.not_valid_before_utc:%Y-%m-%d} to"
                f" {cert.not_valid_after_utc:%Y-%m-%d}",
                f"SHA-256:     {self.fingerprint}",
            )
        )


def create(directory: Path, name: str, now: datetime.datetime) -> Authority:
    """Make a new CA in ``directory`` (created 0700 if need be); AuthorityError if one is
    there already (replacing it would break every browser that trusts it)."""
    key_path, cert_path = directory / KEY_FILE, directory / CERTIFICATE_FILE
    if key_path.exists() or cert_path.exists():
        raise AuthorityError(f"{directory} already holds a CA: remove it first to make another")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Harvest"),
            # (a common name holds 64 characters at most)
            x509.NameAttribute(NameOID.COMMON_NAME, f"Harvest cache {name} CA"[:64]),
        ]
    )
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=365 * _YEARS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        key_bytes = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        # (made 0600 from the start: no moment when others may read it)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key_bytes)
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    except OSError as e:
        raise AuthorityError(f"cannot write the CA to {directory}: {e.strerror}") from None
    return Authority(certificate, key)


def load(directory: Path) -> Authority:
    """The CA in ``directory``, its key's mode checked; AuthorityError saying what is wrong."""
    key_path, cert_path = directory / KEY_FILE, directory / CERTIFICATE_FILE
    try:
        mode = stat.S_IMODE(key_path.stat().st_mode)
        if mode & 0o077:
            raise AuthorityError(
                f"{key_path} has mode {mode:04o}: others may read the CA's key"
                f" (chmod 600 {key_path})"
            )
        key_bytes = key_path.read_bytes()
        cert_bytes = cert_path.read_bytes()
    except FileNotFoundError as e:
        raise AuthorityError(
            f"no CA in {directory} ({Path(e.filename).name} is missing):"
            " make one with `harvest-cache ca init`"
        ) from None
    except OSError as e:
        raise AuthorityError(f"cannot read the CA in {directory}: {e.strerror}") from None
    try:
        key = serialization.load_pem_private_key(key_bytes, password=None)
        certificate = x509.load_pem_x509_certificate(cert_bytes)
    except ValueError:
        raise AuthorityError(f"{directory} holds no readable CA key and certificate") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise AuthorityError(f"{key_path} is not an ECDSA key")
    if certificate.public_key() != key.public_key():
        raise AuthorityError(f"{cert_path} and {key_path} do not belong together")
    return Authority(certificate, key)
