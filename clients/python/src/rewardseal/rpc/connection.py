"""Where a worker is and how to trust it, from one place: its ready file or the environment.

A trainer needs four things to call a reward worker: its address, its bearer token, its Ed25519
public key (every receipt is verified against it, R-T-5) and the digest of the contract it
serves (every descriptor names it). ``rewardseal-worker serve --ready-file PATH`` writes all four
(with the worker's key id and transport) as JSON once it serves; :class:`WorkerConnection` reads
them from that file or from environment variables, and both worker clients are built from it
(``WorkerClient.from_ready_file`` / ``from_env``, and the same on ``AsyncWorkerClient``).

The environment, read by :meth:`WorkerConnection.from_env` (:data:`ENV_READY_FILE` and the
others below): either ``REWARDSEAL_WORKER_READY_FILE`` names a ready file, or
``REWARDSEAL_WORKER_TARGET``, ``REWARDSEAL_WORKER_TOKEN``, ``REWARDSEAL_WORKER_PUBLIC_KEY`` (or
``..._PUBLIC_KEY_FILE``) and ``REWARDSEAL_CONTRACT_DIGEST`` give the values one by one. Given a
ready file, a variable that is also set must agree with it: two sources that disagree are
refused rather than one silently winning. TLS comes from ``REWARDSEAL_WORKER_TLS_CA`` (and
``..._TLS_CERT``, ``..._TLS_KEY`` for mutual TLS, ``..._TLS_SERVER_NAME``) in both cases.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import PUBLIC_KEY_SIZE, TrustSet, key_id_for
from rewardseal.rpc.tls import ClientTls

__all__ = [
    "ENV_CONTRACT_DIGEST",
    "ENV_PUBLIC_KEY",
    "ENV_PUBLIC_KEY_FILE",
    "ENV_READY_FILE",
    "ENV_TARGET",
    "ENV_TLS",
    "ENV_TOKEN",
    "FromConnection",
    "WorkerConnection",
    "decode_public_key",
    "read_public_key",
]

ENV_READY_FILE: Final = "REWARDSEAL_WORKER_READY_FILE"
"""The path of a worker's ready file (``rewardseal-worker serve --ready-file``)."""
ENV_TARGET: Final = "REWARDSEAL_WORKER_TARGET"
"""``host:port`` of the worker (gRPC)."""
ENV_TOKEN: Final = "REWARDSEAL_WORKER_TOKEN"
"""The worker's bearer token (the variable the worker itself reads for its token)."""
ENV_PUBLIC_KEY: Final = "REWARDSEAL_WORKER_PUBLIC_KEY"
"""The worker's Ed25519 public key, hex or base64."""
ENV_PUBLIC_KEY_FILE: Final = "REWARDSEAL_WORKER_PUBLIC_KEY_FILE"
"""A file holding the worker's public key (hex, base64, 32 raw bytes or a ready file)."""
ENV_CONTRACT_DIGEST: Final = "REWARDSEAL_CONTRACT_DIGEST"
"""The digest of the contract the worker serves (``sha256:...``)."""
ENV_TLS: Final = {
    "ca": "REWARDSEAL_WORKER_TLS_CA",
    "cert": "REWARDSEAL_WORKER_TLS_CERT",
    "key": "REWARDSEAL_WORKER_TLS_KEY",
    "server_name": "REWARDSEAL_WORKER_TLS_SERVER_NAME",
}
"""TLS to the worker: the CA PEM it must chain to, the client certificate and key (mutual TLS)
and the name its certificate carries when that is not the dialled host."""

_READY_FIELDS: Final = ("host", "port", "token", "contract_digest", "public_key")
_WILDCARD_HOSTS: Final = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
_TRANSPORTS: Final = frozenset({"plaintext", "tls", "mtls"})


def decode_public_key(text: str, source: str) -> bytes:
    """A raw 32-byte Ed25519 public key from hex or (url-safe) base64 text.

    Raises:
        ValidationError: naming ``source``, when the text is neither or not 32 bytes long.
    """
    text = text.strip()
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        try:
            raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=False)
        except (binascii.Error, ValueError):
            raw = b""
    if len(raw) != PUBLIC_KEY_SIZE:
        raise ValidationError(
            f"{source} is not a 32-byte Ed25519 public key in hex or base64 ({len(raw)} bytes)"
        )
    return raw


def read_public_key(path: Path | str) -> bytes:
    """The public key held by the file at ``path``: 32 raw bytes, hex or base64 text, or a
    worker's ready file (its ``public_key``).

    Raises:
        ValidationError: the file cannot be read or holds none of these.
    """
    try:
        content = Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read the key file {path}: {exc.strerror}") from None
    if len(content) == PUBLIC_KEY_SIZE:
        return content
    try:
        text = content.decode("ascii")
    except UnicodeDecodeError:
        raise ValidationError(f"the key file {path} is neither text nor 32 raw bytes") from None
    if text.lstrip().startswith("{"):
        return _banner_key(_load_ready_file(Path(path)), path)
    return decode_public_key(text, f"the key file {path}")


def _dial_host(host: str) -> str:
    """The host to dial for a bind address: a wildcard bind is reached on loopback, and an
    IPv6 literal needs brackets in a gRPC target."""
    host = _WILDCARD_HOSTS.get(host, host)
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True)
class WorkerConnection:
    """Everything a client needs to call one worker and trust its receipts."""

    target: str
    """``host:port`` to dial."""
    token: str
    """The bearer token every call carries."""
    worker_public_key: bytes
    """The pinned Ed25519 key every receipt must verify against (R-T-5)."""
    reward_contract_digest: str
    """The digest of the contract the worker serves; every descriptor names it."""
    tls: ClientTls | None = None
    """TLS to the worker (mutual with a client certificate); None: plaintext."""

    def __post_init__(self) -> None:
        if not self.target:
            raise ValidationError("the worker's address (host:port) is empty")
        if not self.token:
            raise ValidationError("the worker's bearer token is empty")
        if not self.reward_contract_digest:
            raise ValidationError("the contract digest is empty")
        key_id_for(self.worker_public_key)  # 32 bytes, or a SignatureError now

    @property
    def key_id(self) -> str:
        """The pinned key's id (``ed25519:sha256:...``), as the worker's banner shows it."""
        return key_id_for(self.worker_public_key)

    @property
    def trust(self) -> TrustSet:
        """A trust set of the pinned key alone."""
        return TrustSet([self.worker_public_key])

    @classmethod
    def from_ready_file(
        cls, path: Path | str, *, target: str | None = None, tls: ClientTls | None = None
    ) -> WorkerConnection:
        """Read a worker's ready file (``rewardseal-worker serve --ready-file PATH``).

        The address is the file's host and port (a wildcard bind such as ``0.0.0.0`` is dialled
        on loopback); ``target`` replaces it, for a trainer that reaches the worker by another
        name than the worker binds. A worker that serves TLS needs ``tls``; a plaintext one
        refuses it (the two could never talk).

        Raises:
            ValidationError: the file cannot be read, is not a ready file, its key id does not
                match its key, or ``tls`` does not fit its transport.
        """
        banner = _load_ready_file(Path(path))
        key = _banner_key(banner, path)
        transport = banner.get("transport", "plaintext")
        if transport not in _TRANSPORTS:
            raise ValidationError(f"{path}: unknown transport {transport!r}")
        if transport == "plaintext" and tls is not None:
            raise ValidationError(f"{path}: the worker serves plaintext; do not give TLS")
        if transport != "plaintext" and tls is None:
            raise ValidationError(
                f"{path}: the worker serves {transport}; give the CA it chains to "
                f"(tls=ClientTls.from_files(...), or {ENV_TLS['ca']})"
            )
        if transport == "mtls" and tls is not None and tls.cert_chain is None:
            raise ValidationError(f"{path}: the worker requires a client certificate (mtls)")
        return cls(
            target=target or f"{_dial_host(str(banner['host']))}:{int(banner['port'])}",
            token=str(banner["token"]),
            worker_public_key=key,
            reward_contract_digest=str(banner["contract_digest"]),
            tls=tls,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerConnection:
        """Read the connection from the environment (the module docstring names the variables).

        Raises:
            ValidationError: a variable is missing, or one disagrees with the ready file named.
        """
        env = os.environ if environ is None else environ
        tls = _tls_from_env(env)
        ready_file = env.get(ENV_READY_FILE)
        if ready_file:
            connection = cls.from_ready_file(ready_file, target=env.get(ENV_TARGET), tls=tls)
            _check_agrees(connection, env, ready_file)
            return connection
        missing = [
            name for name in (ENV_TARGET, ENV_TOKEN, ENV_CONTRACT_DIGEST) if not env.get(name)
        ]
        if not env.get(ENV_PUBLIC_KEY) and not env.get(ENV_PUBLIC_KEY_FILE):
            missing.append(f"{ENV_PUBLIC_KEY} (or {ENV_PUBLIC_KEY_FILE})")
        if missing:
            raise ValidationError(
                f"set {ENV_READY_FILE}, or every one of these (missing: {', '.join(missing)})"
            )
        return cls(
            target=env[ENV_TARGET],
            token=env[ENV_TOKEN],
            worker_public_key=_key_from_env(env),
            reward_contract_digest=env[ENV_CONTRACT_DIGEST],
            tls=tls,
        )

    def client_arguments(self) -> dict[str, Any]:
        """The keyword arguments ``WorkerClient`` / ``AsyncWorkerClient`` take for this
        connection (``token``, ``trust``, ``tls``), besides the target."""
        return {"token": self.token, "trust": self.trust, "tls": self.tls}


def _load_ready_file(path: Path) -> Mapping[str, Any]:
    """The banner of a ready file, with every field a client reads present."""
    try:
        banner = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValidationError(f"cannot read the ready file {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValidationError(f"the ready file {path} is not JSON: {exc}") from None
    if not isinstance(banner, dict):
        raise ValidationError(f"the ready file {path} is not a JSON object")
    missing = [name for name in _READY_FIELDS if banner.get(name) in (None, "")]
    if missing:
        raise ValidationError(
            f"{path} is not a worker's ready file (no {', '.join(missing)}); "
            "write one with rewardseal-worker serve --ready-file"
        )
    return banner


def _banner_key(banner: Mapping[str, Any], path: Path | str) -> bytes:
    """The public key of a ready-file banner, which must match the key id it states."""
    key = decode_public_key(str(banner["public_key"]), f"the public_key of {path}")
    stated_id = banner.get("key_id")
    if stated_id is not None and stated_id != key_id_for(key):
        raise ValidationError(f"{path}: key_id {stated_id!r} is not the id of its public_key")
    return key


def _key_from_env(env: Mapping[str, str]) -> bytes:
    """The public key of ``REWARDSEAL_WORKER_PUBLIC_KEY`` or ``..._FILE`` (exactly one)."""
    text, file = env.get(ENV_PUBLIC_KEY), env.get(ENV_PUBLIC_KEY_FILE)
    if text and file:
        raise ValidationError(f"set {ENV_PUBLIC_KEY} or {ENV_PUBLIC_KEY_FILE}, not both")
    return decode_public_key(text, ENV_PUBLIC_KEY) if text else read_public_key(str(file))


def _check_agrees(connection: WorkerConnection, env: Mapping[str, str], ready_file: str) -> None:
    """Refuse a variable set beside the ready file that says something else."""
    given: dict[str, tuple[str, str]] = {}
    if env.get(ENV_TOKEN):
        given[ENV_TOKEN] = (env[ENV_TOKEN], connection.token)
    if env.get(ENV_CONTRACT_DIGEST):
        given[ENV_CONTRACT_DIGEST] = (env[ENV_CONTRACT_DIGEST], connection.reward_contract_digest)
    disagree = [name for name, (theirs, ours) in given.items() if theirs != ours]
    key_given = env.get(ENV_PUBLIC_KEY) or env.get(ENV_PUBLIC_KEY_FILE)
    if key_given and _key_from_env(env) != connection.worker_public_key:
        disagree.append(ENV_PUBLIC_KEY if env.get(ENV_PUBLIC_KEY) else ENV_PUBLIC_KEY_FILE)
    if disagree:
        # Never print the values: one of them is a token.
        raise ValidationError(
            f"{', '.join(disagree)} disagree(s) with the ready file {ready_file}; "
            "unset them or make them agree"
        )


class FromConnection:
    """How the worker's clients are built from one :class:`WorkerConnection` (a ready file or the
    environment), and the contract digest that came with it."""

    connection: WorkerConnection | None
    """Where the client came from, when built by :meth:`connect` (None: loose arguments)."""

    if TYPE_CHECKING:  # both clients' constructors take this; connect() calls it

        def __init__(self, target: str, *, token: str, trust: TrustSet, **options: Any) -> None: ...

    @classmethod
    def connect(cls, connection: WorkerConnection, **options: Any) -> Self:
        """A client for ``connection``; ``options`` are ``timeout`` and ``retries``. Build an
        asyncio client inside the event loop that will use it (a channel belongs to one loop)."""
        client = cls(connection.target, **connection.client_arguments(), **options)
        client.connection = connection
        return client

    @classmethod
    def from_ready_file(
        cls,
        path: Path | str,
        *,
        target: str | None = None,
        tls: ClientTls | None = None,
        **options: Any,
    ) -> Self:
        """A client for the worker whose ready file is ``path`` (address, token, pinned key,
        contract digest: :meth:`WorkerConnection.from_ready_file`)."""
        return cls.connect(
            WorkerConnection.from_ready_file(path, target=target, tls=tls), **options
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Self:
        """A client for the worker the environment names (:meth:`WorkerConnection.from_env`)."""
        return cls.connect(WorkerConnection.from_env(environ), **options)

    @property
    def reward_contract_digest(self) -> str:
        """The contract digest of the connection this client was built from.

        Raises:
            ValidationError: the client was built from loose arguments, which name no contract.
        """
        if self.connection is None:
            raise ValidationError(
                "this client was built from loose arguments and names no contract digest; build "
                "it with from_ready_file, from_env or connect"
            )
        return self.connection.reward_contract_digest


def _tls_from_env(env: Mapping[str, str]) -> ClientTls | None:
    """TLS from ``REWARDSEAL_WORKER_TLS_*``, or None when none is set."""
    given = {field: env.get(name) or None for field, name in ENV_TLS.items()}
    if not any(given.values()):
        return None
    return ClientTls.from_files(**given)
