"""Settings of the rewardseal verl managers from verl's ``reward_kwargs``: where the worker is,
its pinned key (R-T-5), the token, TLS, and what every descriptor of a run states; plus the two
small helpers every verl module shares (reading a config node, the ``verl_missing`` error).

Imports without verl and torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.call_rules import DEFAULT_TIMEOUT_SECONDS
from rewardseal.rpc.connection import WorkerConnection, decode_public_key
from rewardseal.rpc.tls import ClientTls

__all__ = ["DEFAULT_MAX_BATCH", "ManagerSettings", "config_get", "missing_verl"]

DEFAULT_MAX_BATCH: Final = 1024
"""Descriptors per ``ScoreEpisodes`` call (the worker refuses more than 1024)."""

_VERL_PASSED_KWARGS: Final = frozenset({"reward_router_address", "reward_model_tokenizer"})
"""Keyword arguments verl itself passes to every manager; accepted and ignored."""
_TLS_KWARGS: Final = ("tls_ca", "tls_cert", "tls_key", "tls_server_name")
"""The ``reward_kwargs`` of a TLS worker channel (:meth:`ManagerSettings.from_reward_kwargs`)."""


def missing_verl(exc: ImportError, use: str) -> RewardSealError:
    """The error (reason ``verl_missing``) for using ``use`` where verl cannot be imported."""
    return RewardSealError(
        f"verl is not installed or cannot be imported ({exc}); install verl >= 0.9 to use {use}",
        reason="verl_missing",
    )


def config_get(node: Any, key: str) -> Any:
    """``node[key]`` of a verl config node (an OmegaConf DictConfig, a dict or an object)."""
    getter = getattr(node, "get", None)
    if callable(getter):
        return getter(key)
    return getattr(node, key, None)


@dataclass(frozen=True)
class ManagerSettings:
    """Where the worker is, how to trust it, and what every descriptor of a run states."""

    target: str
    token: str
    trust: TrustSet
    reward_contract_digest: str
    policy_checkpoint_id: str
    require_certified: bool = True
    policy_update: int | None = None
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    max_batch: int = DEFAULT_MAX_BATCH
    tls: ClientTls | None = None
    """TLS for the worker channel (mutual with a client certificate); None: plaintext."""

    def __post_init__(self) -> None:
        if not self.target:
            raise ValidationError("worker_target is required (host:port of the reward worker)")
        if not self.reward_contract_digest or not self.policy_checkpoint_id:
            raise ValidationError("reward_contract_digest and policy_checkpoint_id are required")
        if self.policy_update is not None and self.policy_update < 0:
            raise ValidationError(f"policy_update must not be negative, got {self.policy_update}")
        if not 1 <= self.max_batch <= DEFAULT_MAX_BATCH:
            raise ValidationError(f"max_batch must be in [1, {DEFAULT_MAX_BATCH}]")

    @classmethod
    def from_reward_kwargs(
        cls, kwargs: Mapping[str, Any], *, env: Mapping[str, str] | None = None
    ) -> ManagerSettings:
        """Read the settings from verl's ``reward_kwargs``.

        Keys: ``worker_ready_file`` (the worker's ready file: its address, token, key and
        contract digest, so none of those four keys is given beside it; ``worker_target`` then
        replaces the file's address), or: ``worker_target``; ``token`` or ``token_env`` (the
        name of an environment variable holding it); ``worker_public_key`` (hex or base64) or
        ``worker_public_key_file`` (R-T-5: receipts are verified against this pinned key);
        ``reward_contract_digest``;
        ``policy_checkpoint_id``; optional ``require_certified`` (default True),
        ``policy_update`` (used when verl sets no ``global_steps``), ``timeout_seconds``,
        ``max_batch``, and for a TLS channel ``tls_ca`` (PEM file the worker's certificate must
        chain to), ``tls_cert`` and ``tls_key`` (the client certificate and key, for mutual
        TLS) and ``tls_server_name`` (the name the worker's certificate carries, when it is not
        the dialled host). Any other key is refused, so a misspelt setting cannot pass unnoticed.
        """
        env = os.environ if env is None else env
        known = {
            "worker_target",
            "worker_ready_file",
            "token",
            "token_env",
            "worker_public_key",
            "worker_public_key_file",
            "reward_contract_digest",
            "policy_checkpoint_id",
            "require_certified",
            "policy_update",
            "timeout_seconds",
            "max_batch",
            *_TLS_KWARGS,
        }
        unknown = sorted(set(kwargs) - known - _VERL_PASSED_KWARGS)
        if unknown:
            raise ValidationError(f"unknown reward_kwargs {unknown}; known: {sorted(known)}")
        if kwargs.get("worker_ready_file") is not None:
            connection = _connection_from_ready_file(kwargs)
        else:
            connection = _connection_from_kwargs(kwargs, env)
        policy_update = kwargs.get("policy_update")
        return cls(
            target=connection.target,
            token=connection.token,
            trust=connection.trust,
            reward_contract_digest=connection.reward_contract_digest,
            policy_checkpoint_id=str(kwargs.get("policy_checkpoint_id") or ""),
            require_certified=bool(kwargs.get("require_certified", True)),
            policy_update=None if policy_update is None else int(policy_update),
            timeout=float(kwargs.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)),
            max_batch=int(kwargs.get("max_batch", DEFAULT_MAX_BATCH)),
            tls=connection.tls,
        )


_READY_FILE_GIVES: Final = (
    "token",
    "token_env",
    "worker_public_key",
    "worker_public_key_file",
    "reward_contract_digest",
)
"""The ``reward_kwargs`` a ready file replaces (one source for each value)."""


def _connection_from_ready_file(kwargs: Mapping[str, Any]) -> WorkerConnection:
    """The worker connection of ``worker_ready_file`` (``worker_target`` may rename it)."""
    clash = [name for name in _READY_FILE_GIVES if kwargs.get(name) is not None]
    if clash:
        raise ValidationError(
            f"worker_ready_file gives the token, key and contract digest; do not also give {clash}"
        )
    return WorkerConnection.from_ready_file(
        str(kwargs["worker_ready_file"]),
        target=str(kwargs["worker_target"]) if kwargs.get("worker_target") else None,
        tls=_tls_from_kwargs(kwargs),
    )


def _connection_from_kwargs(kwargs: Mapping[str, Any], env: Mapping[str, str]) -> WorkerConnection:
    """The worker connection of the separate keys (``worker_target``, ``token``, ...)."""
    token = kwargs.get("token")
    if token is None and kwargs.get("token_env"):
        token = env.get(str(kwargs["token_env"]))
        if not token:
            raise ValidationError(f"environment variable {kwargs['token_env']!r} is not set")
    if not token:
        raise ValidationError("give token or token_env: the worker needs a bearer token")
    key_text = kwargs.get("worker_public_key")
    key_file = kwargs.get("worker_public_key_file")
    if (key_text is None) == (key_file is None):
        raise ValidationError("give exactly one of worker_public_key and worker_public_key_file")
    if key_file is not None:
        try:
            key_text = Path(str(key_file)).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValidationError(f"cannot read worker_public_key_file: {exc}") from None
        source = f"worker_public_key_file {str(key_file)!r}"
    else:
        source = "worker_public_key"
    public_key = decode_public_key(str(key_text), source)
    if not kwargs.get("worker_target"):
        raise ValidationError("worker_target is required (host:port of the reward worker)")
    if not kwargs.get("reward_contract_digest"):
        raise ValidationError("reward_contract_digest and policy_checkpoint_id are required")
    return WorkerConnection(
        target=str(kwargs["worker_target"]),
        token=str(token),
        worker_public_key=public_key,
        reward_contract_digest=str(kwargs["reward_contract_digest"]),
        tls=_tls_from_kwargs(kwargs),
    )


def _tls_from_kwargs(kwargs: Mapping[str, Any]) -> ClientTls | None:
    """The TLS settings of ``reward_kwargs`` (PEM files read now), or None when none is given."""
    given = {name: kwargs.get(name) for name in _TLS_KWARGS}
    if all(value is None for value in given.values()):
        return None

    def path(name: str) -> str | None:
        value = given[name]
        return None if value is None else str(value)

    return ClientTls.from_files(
        ca=path("tls_ca"),
        cert=path("tls_cert"),
        key=path("tls_key"),
        server_name=path("tls_server_name"),
    )
