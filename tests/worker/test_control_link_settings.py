"""Worker settings for the control link: the pinned organization keys, the refused admin
credential, TLS to control and the certificate poll interval; and the store's raise-only state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.tls_certs import TlsWorld

from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.tls import ClientTls
from rewardseal_worker.org_keys import parse_org_key, parse_org_keys
from rewardseal_worker.settings import DEFAULT_CERTIFICATE_POLL_SECONDS, resolve_settings
from rewardseal_worker.store import REVOCATION_VERSION, WorkerStore

KEY = SigningKey.from_seed(bytes(range(32)))
OTHER = SigningKey.from_seed(bytes(range(32, 64)))
CONTROL = "127.0.0.1:8791"
LINKED = {"REWARDSEAL_WORKER_CONTROL_TOKEN": "worker-token-" + "w" * 24}


def test_an_org_key_is_hex_a_key_file_or_controls_ready_file(tmp_path: Path) -> None:
    assert parse_org_key(KEY.public_key.hex()) == KEY.public_key
    assert parse_org_key(KEY.public_key.hex().upper()) == KEY.public_key
    key_file = tmp_path / "organization.pub"
    key_file.write_text(KEY.public_key.hex() + "\n")
    assert parse_org_key(str(key_file)) == KEY.public_key
    banner = tmp_path / "control.ready.json"
    banner.write_text(json.dumps({"port": 1, "organization_public_key": KEY.public_key.hex()}))
    assert parse_org_key(str(banner)) == KEY.public_key
    values = [KEY.public_key.hex(), str(key_file), "", OTHER.public_key.hex()]
    assert parse_org_keys(values) == (KEY.public_key, OTHER.public_key)


@pytest.mark.parametrize(
    "value", ["ab" * 31, "zz" * 32, "/nonexistent/organization.pub", "{}", "not a key"]
)
def test_anything_else_is_refused(tmp_path: Path, value: str) -> None:
    if value == "{}":
        path = tmp_path / "empty.json"
        path.write_text("{}")
        value = str(path)
    with pytest.raises(ValidationError, match="--trust-org-key"):
        parse_org_key(value)


def test_control_needs_a_pinned_key_and_refuses_the_admin_token(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="--trust-org-key"):
        resolve_settings(data_dir=tmp_path, control_target=CONTROL, env=LINKED)
    with pytest.raises(ValidationError, match="must not hold the control plane's admin"):
        resolve_settings(
            data_dir=tmp_path,
            env={"REWARDSEAL_WORKER_CONTROL_ADMIN_TOKEN": "admin-token-" + "a" * 24},
        )
    env = {**LINKED, "REWARDSEAL_WORKER_TRUST_ORG_KEYS": f"{KEY.public_key.hex()},"}
    settings = resolve_settings(data_dir=tmp_path, control_target=CONTROL, env=env)
    assert settings.trust_org_keys == (KEY.public_key,)
    assert settings.control_tls is None
    assert settings.certificate_poll_seconds == DEFAULT_CERTIFICATE_POLL_SECONDS
    assert LINKED["REWARDSEAL_WORKER_CONTROL_TOKEN"] not in repr(settings)
    # Flags win over the environment.
    flagged = resolve_settings(
        data_dir=tmp_path,
        control_target=CONTROL,
        trust_org_keys=[OTHER.public_key.hex()],
        env={**env, "REWARDSEAL_WORKER_CERTIFICATE_POLL_SECONDS": "2.5"},
    )
    assert flagged.trust_org_keys == (OTHER.public_key,)
    assert flagged.certificate_poll_seconds == 2.5


def test_tls_to_control_from_flags_or_environment(tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    base = {**LINKED, "REWARDSEAL_WORKER_TRUST_ORG_KEYS": KEY.public_key.hex()}
    settings = resolve_settings(
        data_dir=tmp_path / "a",
        control_target=CONTROL,
        control_tls_ca=world.ca.cert,
        control_tls_cert=world.client.cert,
        control_tls_key=world.client.key,
        control_tls_server_name="control.internal",
        env=base,
    )
    assert isinstance(settings.control_tls, ClientTls)
    assert settings.control_tls.server_name == "control.internal"
    assert settings.control_tls.cert_chain is not None
    from_env = resolve_settings(
        data_dir=tmp_path / "b",
        control_target=CONTROL,
        env={**base, "REWARDSEAL_WORKER_CONTROL_TLS_CA": str(world.ca.cert)},
    )
    assert from_env.control_tls is not None
    assert from_env.control_tls.cert_chain is None
    with pytest.raises(ValidationError, match="go together"):
        resolve_settings(
            data_dir=tmp_path / "c",
            control_target=CONTROL,
            control_tls_ca=world.ca.cert,
            control_tls_cert=world.client.cert,
            env=base,
        )


def test_worker_state_only_rises(store_url: str) -> None:
    store = WorkerStore(store_url)
    try:
        assert store.state_value(REVOCATION_VERSION) is None
        assert store.raise_state_value(REVOCATION_VERSION, 5) == 5
        assert store.raise_state_value(REVOCATION_VERSION, 3) == 5
        assert store.state_value(REVOCATION_VERSION) == 5
        assert store.raise_state_value(REVOCATION_VERSION, 9) == 9
        with pytest.raises(ValidationError):
            store.raise_state_value(REVOCATION_VERSION, -1)
    finally:
        store.close()
    reopened = WorkerStore(store_url)
    try:
        assert reopened.state_value(REVOCATION_VERSION) == 9
    finally:
        reopened.close()
