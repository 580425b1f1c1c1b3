"""TLS and mutual TLS for a client's gRPC links (R-W-10), configured once.

A client takes a :class:`ClientTls` (the CA it pins the server to, optionally the name the
server's certificate must carry, and optionally its own certificate and key for mutual TLS). It
reads PEM files once, at configuration time (:func:`read_pem`, also the servers' reader in
:mod:`rewardseal_server.tls`), so a missing or unreadable file is a clear start-up error rather
than a failed call later.

:func:`channel` and :func:`aio_channel` build the one kind of channel every client uses:
plaintext when no TLS is configured, TLS otherwise. A TLS channel never falls back to plaintext.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from rewardseal.core.errors import ValidationError

__all__ = ["ClientTls", "aio_channel", "blocking_channel", "read_pem"]

ChannelOptions = Sequence[tuple[str, int | str]]


def read_pem(path: Path | str, what: str) -> bytes:
    """The PEM file at ``path`` (named ``what`` in errors); ValidationError if unreadable or not
    PEM."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read the {what} {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ValidationError(f"the {what} {path} is not a PEM file")
    return data


@dataclass(frozen=True)
class ClientTls:
    """What a client trusts (``ca``: the server's CA, or its self-signed certificate, pinned)
    and, for mutual TLS, who it is (``cert_chain`` and ``private_key``)."""

    ca: bytes | None = field(default=None, repr=False)
    """PEM roots the server's certificate must chain to; None means the system roots."""
    cert_chain: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)
    server_name: str | None = None
    """The name the server's certificate must carry when it differs from the dialled host."""

    def __post_init__(self) -> None:
        if (self.cert_chain is None) != (self.private_key is None):
            raise ValidationError("a client certificate needs its private key, and the reverse")

    @classmethod
    def from_files(
        cls,
        ca: Path | str | None = None,
        cert: Path | str | None = None,
        key: Path | str | None = None,
        server_name: str | None = None,
    ) -> ClientTls:
        """Read the PEM files (``--tls-ca``, ``--tls-cert``, ``--tls-key``)."""
        return cls(
            ca=read_pem(ca, "CA certificate") if ca is not None else None,
            cert_chain=read_pem(cert, "client certificate") if cert is not None else None,
            private_key=read_pem(key, "client private key") if key is not None else None,
            server_name=server_name or None,
        )

    def credentials(self) -> grpc.ChannelCredentials:
        """The gRPC channel credentials."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca,
            private_key=self.private_key,
            certificate_chain=self.cert_chain,
        )

    def options(self) -> list[tuple[str, int | str]]:
        """Channel options this configuration adds (the expected server name)."""
        if self.server_name is None:
            return []
        return [("grpc.ssl_target_name_override", self.server_name)]


def blocking_channel(
    target: str, tls: ClientTls | None, options: ChannelOptions = ()
) -> grpc.Channel:
    """A blocking channel to ``target``: TLS when ``tls`` is given, plaintext otherwise."""
    if tls is None:
        return grpc.insecure_channel(target, options=list(options))
    return grpc.secure_channel(target, tls.credentials(), options=[*options, *tls.options()])


def aio_channel(
    target: str, tls: ClientTls | None, options: ChannelOptions = ()
) -> grpc.aio.Channel:
    """An asyncio channel to ``target``: TLS when ``tls`` is given, plaintext otherwise."""
    if tls is None:
        return grpc.aio.insecure_channel(target, options=list(options))
    return grpc.aio.secure_channel(target, tls.credentials(), options=[*options, *tls.options()])
