"""A server's TLS identity for its gRPC (and HTTP) listeners (R-W-10), configured once.

A server takes a :class:`ServerTls`: its certificate chain and key, and optionally the CA whose
client certificates it requires (mutual TLS). The PEM files are read once, at configuration time,
by the same reader the clients use (:func:`rewardseal.rpc.tls.read_pem`). Lives in the server
plumbing because no trainer serves TLS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from rewardseal.rpc.tls import read_pem

__all__ = ["ServerTls"]


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS identity; with ``client_ca`` set, clients must present a certificate
    issued by that CA (mutual TLS), and a client without one is refused at the handshake."""

    cert_chain: bytes = field(repr=False)
    private_key: bytes = field(repr=False)
    client_ca: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_files(
        cls, cert: Path | str, key: Path | str, client_ca: Path | str | None = None
    ) -> ServerTls:
        """Read the PEM files (``--tls-cert``, ``--tls-key``, ``--tls-client-ca``)."""
        return cls(
            cert_chain=read_pem(cert, "TLS certificate"),
            private_key=read_pem(key, "TLS private key"),
            client_ca=read_pem(client_ca, "client CA") if client_ca is not None else None,
        )

    @property
    def mutual(self) -> bool:
        """True when client certificates are required."""
        return self.client_ca is not None

    def credentials(self) -> grpc.ServerCredentials:
        """The gRPC server credentials."""
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )
