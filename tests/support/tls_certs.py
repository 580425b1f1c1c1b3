"""Throwaway X.509 material for TLS and mutual-TLS tests: a CA, server and client certificates.

Every test that needs TLS makes its own CA in a temp dir (nothing is committed, nothing
expires between runs). Server certificates name ``localhost`` and ``127.0.0.1`` so a client
dialling the loopback address verifies the name without an override.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rewardseal.rpc.tls import ClientTls
from rewardseal_server.tls import ServerTls


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class TestCa:
    """A certificate authority that issues server and client certificates into ``directory``."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    directory: Path
    cert: Path
    _key: ec.EllipticCurvePrivateKey
    _name: x509.Name

    @classmethod
    def create(cls, directory: Path, name: str = "rewardseal test CA") -> TestCa:
        """A new self-signed CA whose certificate is written to ``directory/<name>.pem``."""
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .sign(key, hashes.SHA256())
        )
        path = directory / f"{name.replace(' ', '-')}.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(directory, path, key, subject)

    def issue(
        self,
        common_name: str,
        *,
        server: bool,
        names: tuple[str, ...] = ("localhost", "127.0.0.1"),
    ) -> CertFiles:
        """A leaf certificate for a server (with ``names`` as SANs) or a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            sans: list[x509.GeneralName] = []
            for name in names:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(name)))
                except ValueError:
                    sans.append(x509.DNSName(name))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        stem = self.directory / common_name.replace(" ", "-")
        files = CertFiles(stem.with_suffix(".crt"), stem.with_suffix(".key"))
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        files.key.chmod(0o600)
        return files


@dataclass(frozen=True)
class TlsWorld:
    """One CA, a server certificate and a client certificate it issued, and a second,
    unrelated CA with a client certificate of its own (for "wrong CA" attacks)."""

    ca: TestCa
    server: CertFiles
    client: CertFiles
    stranger_ca: TestCa
    stranger_client: CertFiles

    @classmethod
    def create(cls, directory: Path) -> TlsWorld:
        """Make every file under ``directory``."""
        ca = TestCa.create(directory / "ca")
        stranger = TestCa.create(directory / "stranger", name="stranger CA")
        return cls(
            ca=ca,
            server=ca.issue("rewardseal-server", server=True),
            client=ca.issue("rewardseal-client", server=False),
            stranger_ca=stranger,
            stranger_client=stranger.issue("stranger-client", server=False),
        )

    def server_tls(self, *, mutual: bool = True) -> ServerTls:
        """The server's TLS settings; mutual TLS (client CA = this CA) unless told otherwise."""
        return ServerTls.from_files(
            self.server.cert, self.server.key, self.ca.cert if mutual else None
        )

    def client_tls(self, *, with_certificate: bool = True) -> ClientTls:
        """A client that pins this CA, presenting the client certificate unless told not to."""
        if not with_certificate:
            return ClientTls.from_files(ca=self.ca.cert)
        return ClientTls.from_files(ca=self.ca.cert, cert=self.client.cert, key=self.client.key)
