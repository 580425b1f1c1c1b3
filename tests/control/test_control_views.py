"""The operator views of ``rewardseal-control``: the audit log of a scripted series of admin
commands (every action, in order, with the acting role; paged), certificate states in
``certificates list`` and ``certificates show``, ``keys register`` from hex, base64 or a ready
file, and ``revocations show``."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.protobuf import json_format
from support.builders import make_facts
from support.control import (
    ADMIN,
    CLIENT_TOKEN,
    TRAINER,
    WORKER,
    ControlStack,
    calibration_summary,
    start_control,
    stop_control,
)
from support.control_cli import cli, table_rows
from support.integrity_specs import spec, write_spec

from rewardseal.core.contract import contract_digest
from rewardseal.core.key_possession import sign_registration
from rewardseal.core.receipts import build_receipt, seal_receipt
from rewardseal.core.signing import SigningKey
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RewardCertificate
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.settings import ADMIN_TOKEN_ENV, TOKEN_ENV
from rewardseal_kit.mockmed import mockmed_contract
from rewardseal_server.serving import write_ready_file

CONTRACT = mockmed_contract()
DIGEST = contract_digest(CONTRACT)
WORKER_KEYS = [SigningKey.from_seed(bytes([n]) * 32) for n in range(1, 4)]


@pytest.fixture(autouse=True)
def no_token_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ADMIN_TOKEN_ENV, TOKEN_ENV, "REWARDSEAL_CONTROL_TARGET"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlStack]:
    stack = await start_control(f"sqlite:///{tmp_path / 'control.sqlite'}")
    await stack.stub().RegisterContract(
        pb.RegisterContractRequest(contract=CONTRACT, reward_contract_digest=DIGEST),
        metadata=TRAINER,
    )
    yield stack
    await stop_control(stack)


def write_calibration(path: Path) -> Path:
    document = json_format.MessageToDict(
        calibration_summary(DIGEST),
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    path.write_text(json.dumps(document))
    return path


async def issue(
    control: ControlStack, tmp_path: Path, certificate_id: str, issued_at: int, expiry: int
) -> None:
    calibration = write_calibration(tmp_path / "calibration.json")
    code, _, err = await cli(
        control,
        "certificates",
        "issue",
        "--contract",
        DIGEST,
        "--calibration",
        str(calibration),
        "--issued-at-update",
        str(issued_at),
        "--expiry",
        str(expiry),
        "--certificate-id",
        certificate_id,
        "--reason",
        f"calibrated {certificate_id}",
    )
    assert (code, err) == (0, "")


async def register(control: ControlStack, value: str, name: str) -> dict[str, object]:
    code, out, err = await cli(
        control,
        "keys",
        "register",
        "--public-key",
        value,
        "--role",
        "worker",
        "--name",
        name,
        "--reason",
        f"enrol {name}",
        "--json",
    )
    assert (code, err) == (0, ""), err
    return dict(json.loads(out)["key"])


# --- keys register: hex, base64, ready file ---


async def test_keys_register_takes_hex_base64_and_a_ready_file(
    control: ControlStack, tmp_path: Path
) -> None:
    hex_key, b64_key, file_key = WORKER_KEYS
    by_hex = await register(control, hex_key.public_key.hex(), "by-hex")
    # Base64 as Health and JSON renderings of bytes show it (standard alphabet, padded).
    by_base64 = await register(control, base64.b64encode(b64_key.public_key).decode(), "by-b64")
    ready = tmp_path / "worker.ready.json"
    write_ready_file(ready, {"key_id": file_key.key_id, "public_key": file_key.public_key.hex()})
    by_file = await register(control, str(ready), "by-file")
    assert [by_hex["key_id"], by_base64["key_id"], by_file["key_id"]] == [
        k.key_id for k in WORKER_KEYS
    ]
    # URL-safe base64 without padding names the same key as the hex did (already registered).
    again = base64.urlsafe_b64encode(hex_key.public_key).decode().rstrip("=")
    assert (await register(control, again, "by-hex"))["key_id"] == hex_key.key_id


@pytest.mark.parametrize("value", ["ab" * 31, "not a key", "/nonexistent/worker.ready.json"])
async def test_keys_register_refuses_anything_else_in_one_line(
    control: ControlStack, value: str
) -> None:
    code, out, err = await cli(
        control, "keys", "register", "--public-key", value, "--role", "worker"
    )
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert "--public-key" in err
    assert "64 hex characters, base64" in err


# --- the audit log ---


async def test_audit_lists_every_admin_action_in_order_with_the_acting_role(
    control: ControlStack, tmp_path: Path
) -> None:
    key = WORKER_KEYS[0]
    await register(control, key.public_key.hex(), "worker-a")
    await issue(control, tmp_path, "cert.audit.0001", 0, 50)
    await issue(control, tmp_path, "cert.audit.0002", 0, 50)
    code, _, err = await cli(
        control, "certificates", "revoke", "cert.audit.0001", "--reason", "leaked"
    )
    assert (code, err) == (0, "")
    code, _, err = await cli(control, "keys", "retire", key.key_id, "--reason", "host gone")
    assert (code, err) == (0, "")
    code, _, err = await cli(
        control,
        "integrity",
        "system",
        "create",
        "--spec",
        str(write_spec(tmp_path / "s.json", spec())),
    )
    assert (code, err) == (0, "")
    # The worker credential registers its own WORKER key: audited with its role.
    await control.stub().RegisterIssuerKey(
        sign_registration(
            pb.RegisterIssuerKeyRequest(
                key=IssuerKey(
                    public_key=WORKER_KEYS[1].public_key,
                    role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER,
                ),
                reason="worker start",
            ),
            WORKER_KEYS[1],
            control.clock.now,
        ),
        metadata=WORKER,
    )

    code, out, err = await cli(control, "audit", "--json")
    assert (code, err) == (0, "")
    entries = json.loads(out)["entries"]
    expected = [
        ("control.startup", "issuer_key.register", control.key.key_id),
        ("admin", "issuer_key.register", key.key_id),
        ("admin", "certificate.issue", "cert.audit.0001"),
        ("admin", "certificate.issue", "cert.audit.0002"),
        ("admin", "certificate.revoke", "cert.audit.0001"),
        ("admin", "issuer_key.retire", key.key_id),
        ("admin", "integrity.revision.create", entries[6]["target"]),
        ("worker", "issuer_key.register", WORKER_KEYS[1].key_id),
    ]
    assert [(e["actor"], e["action"], e["target"]) for e in entries] == expected
    assert [int(e["id"]) for e in entries] == sorted(int(e["id"]) for e in entries)
    assert entries[4]["reason"] == "leaked"
    assert entries[2]["details"]["reward_contract_digest"] == DIGEST
    assert all(e["at"].endswith("Z") for e in entries)

    # The table: one row per entry, the same order.
    code, out, _ = await cli(control, "audit")
    rows = table_rows(out)
    assert rows[0][:4] == ["ID", "AT", "ACTOR", "ACTION"]
    assert [row[3] for row in rows[1:]] == [action for _, action, _ in expected]

    # Filtered by action, and paged: two at a time, the next page by its token.
    code, out, _ = await cli(control, "audit", "--action", "certificate.issue", "--json")
    assert [e["target"] for e in json.loads(out)["entries"]] == [
        "cert.audit.0001",
        "cert.audit.0002",
    ]
    seen: list[str] = []
    token = ""
    for _ in range(10):
        extra = ["--page-token", token] if token else []
        code, out, _ = await cli(control, "audit", "--page-size", "3", "--json", *extra)
        page = json.loads(out)
        assert len(page["entries"]) <= 3
        seen += [e["action"] for e in page["entries"]]
        token = page["next_page_token"]
        if not token:
            break
    assert seen == [action for _, action, _ in expected]
    code, out, _ = await cli(control, "audit", "--page-size", "3")
    assert out.strip().splitlines()[-1].startswith("more: --page-token ")


async def test_audit_is_for_the_admin_credential_only(control: ControlStack) -> None:
    code, out, err = await cli(control, "audit", token=CLIENT_TOKEN)
    assert (code, out) == (1, "")
    assert "permission_denied" in err
    assert "admin credential" in err
    code, _, err = await cli(control, "audit", "--page-size", "0")
    assert code == 2
    assert "--page-size" in err
    code, _, err = await cli(control, "audit", "--page-token", "garbage!")
    assert code == 1
    assert "page_token" in err


# --- certificate states ---


async def record_receipt_at(control: ControlStack, policy_update: int) -> None:
    worker = WORKER_KEYS[2]
    await control.stub().RegisterIssuerKey(
        pb.RegisterIssuerKeyRequest(
            key=IssuerKey(public_key=worker.public_key, role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER),
            reward_contract_digests=[DIGEST],
        ),
        metadata=ADMIN,
    )
    envelope = seal_receipt(
        build_receipt(
            make_facts(policy_update=policy_update, episode_id="episode.state.0001"),
            contract=CONTRACT,
            certificate=None,
            issuer_key_id=worker.key_id,
        ),
        worker,
    )
    answer = await control.stub().RecordReceipts(
        pb.RecordReceiptsRequest(receipts=[envelope]), metadata=TRAINER
    )
    assert answer.results[0].recorded


async def test_certificate_states_in_list_and_show(control: ControlStack, tmp_path: Path) -> None:
    await issue(control, tmp_path, "cert.state.current", 0, 50)
    await issue(control, tmp_path, "cert.state.expired", 0, 5)
    await issue(control, tmp_path, "cert.state.later", 100, 50)
    await issue(control, tmp_path, "cert.state.revoked", 0, 50)
    code, _, _ = await cli(control, "certificates", "revoke", "cert.state.revoked", "--reason", "x")
    assert code == 0
    # Before any receipt, states are told at policy update 0.
    code, out, _ = await cli(control, "certificates", "list", "--json")
    states = {i: s["state"] for i, s in json.loads(out)["states"].items()}
    assert states["cert.state.expired"] == "current"
    assert states["cert.state.later"] == "not yet valid"
    # Where training is, as control's receipts say: update 10.
    await record_receipt_at(control, 10)
    code, out, _ = await cli(control, "certificates", "list")
    assert code == 0
    header, *rows = table_rows(out)
    assert header[:5] == ["CERTIFICATE", "ID", "STATE", "AT", "UPDATE"]
    by_id = {row[0]: row for row in rows}
    expected = {
        "cert.state.current": "current",
        "cert.state.expired": "expired",
        "cert.state.later": "not yet valid",
        "cert.state.revoked": "revoked",
    }
    for certificate_id, state in expected.items():
        row = by_id[certificate_id]
        words = len(state.split())
        assert " ".join(row[1 : 1 + words]) == state
        assert row[1 + words] == "10"
    code, out, _ = await cli(control, "certificates", "list", "--json")
    document = json.loads(out)
    listed = {i: s["state"] for i, s in document["states"].items()}
    assert listed == expected
    # The certificates themselves as before: each parses as a RewardCertificate.
    for entry in document["certificates"]:
        json_format.ParseDict(entry, RewardCertificate())
    # --at-update moves the reference point.
    code, out, _ = await cli(control, "certificates", "list", "--at-update", "120", "--json")
    listed = {i: s["state"] for i, s in json.loads(out)["states"].items()}
    assert listed["cert.state.later"] == "current"
    assert listed["cert.state.current"] == "expired"
    assert listed["cert.state.revoked"] == "revoked"
    # show: every field and the same state.
    for certificate_id, state in expected.items():
        code, out, err = await cli(control, "certificates", "show", certificate_id, "--json")
        assert (code, err) == (0, "")
        shown = json.loads(out)
        assert shown["state"] == state
        assert shown["state_at_policy_update"] == 10
        assert shown["certificate"]["certificate_id"] == certificate_id
        assert shown["revoked"] == (state == "revoked")
    code, out, _ = await cli(control, "certificates", "show", "cert.state.later")
    fields = {row[0]: row[1:] for row in table_rows(out)[1:]}
    assert fields["state"][:3] == ["not", "yet", "valid"]
    assert fields["current"][-3:] == ["100", "..", "149"]
    code, out, err = await cli(control, "certificates", "show", "cert.unknown")
    assert (code, out) == (1, "")
    assert "not_found" in err


async def test_revocations_show_version_expiry_and_entries(
    control: ControlStack, tmp_path: Path
) -> None:
    await issue(control, tmp_path, "cert.revoked.0001", 0, 50)
    code, _, _ = await cli(
        control, "certificates", "revoke", "cert.revoked.0001", "--reason", "leak"
    )
    assert code == 0
    code, out, _ = await cli(control, "revocations", "show")
    first, header, row = out.strip().splitlines()
    assert first.startswith("revocation list version 2, issued ")
    assert ", expires " in first
    # "REVOKES": a certificate id, or a whole contract or checker configuration (R-C-13).
    assert header.split() == ["REVOKES", "REVOKED", "AT", "REASON"]
    assert row.split()[0] == "cert.revoked.0001"
    assert row.split()[-1] == "leak"
