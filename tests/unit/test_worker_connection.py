"""WorkerConnection: address, token, pinned key and contract digest from a ready file or the
environment, and every way those sources can be wrong or disagree."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from rewardseal.core.errors import SignatureError, ValidationError
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.connection import (
    ENV_CONTRACT_DIGEST,
    ENV_PUBLIC_KEY,
    ENV_PUBLIC_KEY_FILE,
    ENV_READY_FILE,
    ENV_TARGET,
    ENV_TLS,
    ENV_TOKEN,
    WorkerConnection,
    read_public_key,
)
from rewardseal.rpc.tls import ClientTls
from rewardseal.rpc.worker_client import AsyncWorkerClient, WorkerClient

KEY = SigningKey.from_seed(b"\x01" * 32)
OTHER = SigningKey.from_seed(b"\x02" * 32)
DIGEST = "sha256:" + "ab" * 32


def pem(tmp_path: Path) -> Path:
    """A file ClientTls accepts as a CA (read only, never dialled here)."""
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nMA==\n-----END CERTIFICATE-----\n")
    return path


def banner(**changes: Any) -> dict[str, Any]:
    """A ready-file banner as ``WorkerApp.banner()`` writes it."""
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": 8790,
        "transport": "plaintext",
        "token": "worker-token",
        "contract_digest": DIGEST,
        "oracle_tier": 2,
        "key_id": KEY.key_id,
        "public_key": KEY.public_key.hex(),
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def ready(tmp_path: Path, **changes: Any) -> Path:
    path = tmp_path / "ready.json"
    path.write_text(json.dumps(banner(**changes)))
    return path


def test_ready_file_gives_all_four(tmp_path: Path) -> None:
    connection = WorkerConnection.from_ready_file(ready(tmp_path))
    assert connection.target == "127.0.0.1:8790"
    assert connection.token == "worker-token"
    assert connection.worker_public_key == KEY.public_key
    assert connection.key_id == KEY.key_id
    assert connection.reward_contract_digest == DIGEST
    assert KEY.key_id in connection.trust
    assert len(connection.trust) == 1


@pytest.mark.parametrize(
    ("host", "target"),
    [("0.0.0.0", "127.0.0.1:8790"), ("::", "[::1]:8790"), ("::1", "[::1]:8790")],
)
def test_wildcard_and_ipv6_hosts_are_dialled_sensibly(
    tmp_path: Path, host: str, target: str
) -> None:
    assert WorkerConnection.from_ready_file(ready(tmp_path, host=host)).target == target


def test_target_override_for_a_worker_reached_by_another_name(tmp_path: Path) -> None:
    connection = WorkerConnection.from_ready_file(ready(tmp_path), target="reward-worker:50051")
    assert connection.target == "reward-worker:50051"


def test_a_key_id_that_is_not_its_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="is not the id of its public_key"):
        WorkerConnection.from_ready_file(ready(tmp_path, key_id=OTHER.key_id))


@pytest.mark.parametrize("missing", ["token", "public_key", "contract_digest", "port"])
def test_a_file_that_is_not_a_ready_file_is_refused_naming_what_lacks(
    tmp_path: Path, missing: str
) -> None:
    changes: dict[str, Any] = {missing: None}
    with pytest.raises(ValidationError, match=f"no {missing}"):
        WorkerConnection.from_ready_file(ready(tmp_path, **changes))


def test_unreadable_and_non_json_ready_files(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cannot read the ready file"):
        WorkerConnection.from_ready_file(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValidationError, match="not JSON"):
        WorkerConnection.from_ready_file(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ValidationError, match="not a JSON object"):
        WorkerConnection.from_ready_file(tmp_path / "list.json")


def test_a_short_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="32-byte"):
        WorkerConnection.from_ready_file(ready(tmp_path, public_key="abcd", key_id=None))
    with pytest.raises(SignatureError):
        WorkerConnection("h:1", "t", b"short", DIGEST)


def test_transport_and_tls_must_fit(tmp_path: Path) -> None:
    tls = ClientTls.from_files(ca=pem(tmp_path))
    with pytest.raises(ValidationError, match="serves plaintext"):
        WorkerConnection.from_ready_file(ready(tmp_path), tls=tls)
    with pytest.raises(ValidationError, match="serves tls; give the CA"):
        WorkerConnection.from_ready_file(ready(tmp_path, transport="tls"))
    with pytest.raises(ValidationError, match="requires a client certificate"):
        WorkerConnection.from_ready_file(ready(tmp_path, transport="mtls"), tls=tls)
    assert WorkerConnection.from_ready_file(ready(tmp_path, transport="tls"), tls=tls).tls is tls


def test_env_with_loose_values(tmp_path: Path) -> None:
    env = {
        ENV_TARGET: "w:1",
        ENV_TOKEN: "t",
        ENV_PUBLIC_KEY: base64.b64encode(KEY.public_key).decode(),
        ENV_CONTRACT_DIGEST: DIGEST,
    }
    connection = WorkerConnection.from_env(env)
    assert (connection.target, connection.token, connection.worker_public_key) == (
        "w:1",
        "t",
        KEY.public_key,
    )
    key_file = tmp_path / "worker.pub"
    key_file.write_text(KEY.public_key.hex() + "\n")
    from_file = {**env, ENV_PUBLIC_KEY_FILE: str(key_file)}
    del from_file[ENV_PUBLIC_KEY]
    assert WorkerConnection.from_env(from_file).worker_public_key == KEY.public_key
    with pytest.raises(ValidationError, match="not both"):
        WorkerConnection.from_env({**env, ENV_PUBLIC_KEY_FILE: str(key_file)})


def test_env_names_every_missing_variable() -> None:
    with pytest.raises(ValidationError) as caught:
        WorkerConnection.from_env({ENV_TOKEN: "t"})
    for name in (ENV_READY_FILE, ENV_TARGET, ENV_CONTRACT_DIGEST, ENV_PUBLIC_KEY):
        assert name in caught.value.message
    assert ENV_TOKEN + "," not in caught.value.message


def test_env_ready_file_and_agreeing_variables(tmp_path: Path) -> None:
    path = ready(tmp_path)
    env = {ENV_READY_FILE: str(path), ENV_TOKEN: "worker-token", ENV_CONTRACT_DIGEST: DIGEST}
    assert WorkerConnection.from_env(env).target == "127.0.0.1:8790"
    assert WorkerConnection.from_env({**env, ENV_TARGET: "w:9"}).target == "w:9"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (ENV_TOKEN, "another-token"),
        (ENV_CONTRACT_DIGEST, "sha256:" + "cd" * 32),
        (ENV_PUBLIC_KEY, OTHER.public_key.hex()),
    ],
)
def test_env_variable_that_disagrees_with_the_ready_file_is_refused(
    tmp_path: Path, name: str, value: str
) -> None:
    env = {ENV_READY_FILE: str(ready(tmp_path)), name: value}
    with pytest.raises(ValidationError, match=f"{name} disagree") as caught:
        WorkerConnection.from_env(env)
    assert value not in caught.value.message  # a token is never echoed


def test_env_tls(tmp_path: Path) -> None:
    ca = pem(tmp_path)
    env = {ENV_READY_FILE: str(ready(tmp_path, transport="tls")), ENV_TLS["ca"]: str(ca)}
    connection = WorkerConnection.from_env(env)
    assert connection.tls is not None
    assert connection.tls.ca == ca.read_bytes()


def test_read_public_key_forms(tmp_path: Path) -> None:
    raw = tmp_path / "raw.pub"
    raw.write_bytes(KEY.public_key)
    text = tmp_path / "b64.pub"
    text.write_text(base64.urlsafe_b64encode(KEY.public_key).decode().rstrip("="))
    # A TLS worker's ready file still gives its key: reading a key needs no transport.
    for path in (raw, text, ready(tmp_path, transport="mtls")):
        assert read_public_key(path) == KEY.public_key
    binary = tmp_path / "binary.pub"
    binary.write_bytes(b"\xff" * 40)
    with pytest.raises(ValidationError, match="neither text nor 32 raw bytes"):
        read_public_key(binary)


def test_clients_carry_the_digest_and_loose_clients_say_they_have_none(tmp_path: Path) -> None:
    path = ready(tmp_path)
    with WorkerClient.from_ready_file(path, timeout=3.0) as client:
        assert client.reward_contract_digest == DIGEST
        assert client.connection is not None
        assert client.connection.key_id == KEY.key_id
    loose = WorkerClient(
        "127.0.0.1:1", token="t", trust=WorkerConnection.from_ready_file(path).trust
    )
    with loose, pytest.raises(ValidationError, match="names no contract digest"):
        _ = loose.reward_contract_digest


async def test_async_client_from_env(tmp_path: Path) -> None:
    client = AsyncWorkerClient.from_env({ENV_READY_FILE: str(ready(tmp_path))}, retries=0)
    async with client:
        assert client.reward_contract_digest == DIGEST
