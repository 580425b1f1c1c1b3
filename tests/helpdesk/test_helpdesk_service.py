"""The helpdesk example's service: REST API, store, read-only role, CLI, bundles and actor.

One seeded helpdesk on PostgreSQL for the module; tests that write use tasks (customer, queue
pairs) of their own.
"""

from __future__ import annotations

import json
import socket

import httpx
import psycopg
import pytest
from support.helpdesk_stack import BUNDLES, READER_ROLE, running_helpdesk

from helpdesk.actor import HelpdeskActor
from helpdesk.bundles import KINDS, bundle_files
from helpdesk.cli import main
from helpdesk.policies import report_for
from helpdesk.reports import parse_report
from rewardseal.core.errors import ValidationError
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal_worker.bundle import load_bundle

COMPLETED = RuntimeSignal.RUNTIME_SIGNAL_COMPLETED


@pytest.fixture(scope="module")
def helpdesk(postgres_server):
    with running_helpdesk(postgres_server) as running:
        yield running


@pytest.fixture(scope="module")
def api(helpdesk):
    with httpx.Client(
        base_url=helpdesk.url, headers={"Authorization": f"Bearer {helpdesk.token}"}
    ) as client:
        yield client


@pytest.fixture(scope="module")
def tasks(helpdesk):
    return helpdesk.server.store.tasks()


def _new(task, **extra):
    return {
        "customer_id": task.customer_id,
        "queue_id": task.queue_id,
        "subject": "Printer on fire",
        **extra,
    }


# --- the API ---


def test_lists_the_tickets_of_one_customer_in_one_queue(api, tasks):
    task = tasks[0]
    answer = api.get("/api/tickets", params={"customer_id": task.customer_id, "queue_id": "x"})
    assert answer.json() == {"tickets": []}
    rows = api.get("/api/tickets", params=task.identity).json()["tickets"]
    assert {row["id"] for row in rows} >= {task.open_ticket_id, task.closed_ticket_id}
    assert {(row["customer_id"], row["queue_id"]) for row in rows} == {
        (task.customer_id, task.queue_id)
    }
    assert [row["id"] for row in rows] == sorted(row["id"] for row in rows)


def test_a_read_needs_both_identity_keys(api, tasks):
    answer = api.get("/api/tickets", params={"customer_id": tasks[0].customer_id})
    assert answer.status_code == 422


@pytest.mark.parametrize("token", [None, "wrong-token-of-enough-length"])
def test_every_api_route_needs_the_token(helpdesk, tasks, token):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=helpdesk.url, headers=headers) as client:
        for method, path in [
            ("GET", "/api/tickets"),
            ("GET", f"/api/tickets/{tasks[0].open_ticket_id}"),
            ("POST", "/api/tickets"),
            ("PATCH", f"/api/tickets/{tasks[0].open_ticket_id}"),
            ("POST", f"/api/customers/{tasks[0].customer_id}/clone"),
            ("GET", "/api/tasks"),
        ]:
            answer = client.request(method, path, json={})
            assert answer.status_code == 401, (method, path)
            assert answer.json() == {"detail": "missing or invalid bearer token"}
        assert client.get("/healthz").json() == {"status": "ok"}


def test_create_stamps_id_times_and_defaults(api, tasks):
    task = tasks[1]
    answer = api.post("/api/tickets", json=_new(task, body="b", channel="email"))
    assert answer.status_code == 201
    ticket = answer.json()
    assert ticket["id"].startswith("tkt-")
    assert (ticket["status"], ticket["priority"]) == ("open", "normal")
    assert ticket["created_at"] == ticket["updated_at"]
    assert ticket["resolution"] is None
    assert api.get(f"/api/tickets/{ticket['id']}").json() == ticket


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"resolution": "fixed"}, 422),  # not writable on a new ticket
        ({"id": "tkt-mine"}, 422),
        ({"created_at": "2020-01-01"}, 422),
        ({"priority": 3}, 422),
        ({"subject": ""}, 422),
        ({"customer_id": "cust-nobody"}, 404),
        ({"queue_id": "nowhere"}, 404),
    ],
)
def test_a_refused_create_stores_nothing(api, tasks, body, status):
    task = tasks[2]
    before = api.get("/api/tickets", params=task.identity).json()["tickets"]
    answer = api.post("/api/tickets", json=_new(task) | body)
    assert answer.status_code == status
    assert "Printer" not in answer.text  # answers never quote values back
    assert api.get("/api/tickets", params=task.identity).json()["tickets"] == before


def test_a_change_stamps_updated_at_even_when_it_changes_nothing(api, tasks):
    task = tasks[3]
    old = api.get(f"/api/tickets/{task.closed_ticket_id}").json()
    touched = api.patch(f"/api/tickets/{task.closed_ticket_id}", json={}).json()
    assert touched["updated_at"] != old["updated_at"]
    assert {k: v for k, v in touched.items() if k != "updated_at"} == {
        k: v for k, v in old.items() if k != "updated_at"
    }
    closed = api.patch(
        f"/api/tickets/{task.open_ticket_id}", json={"status": "closed", "resolution": "superseded"}
    ).json()
    assert (closed["status"], closed["resolution"]) == ("closed", "superseded")


@pytest.mark.parametrize(
    ("ticket", "body", "status"),
    [
        ("tkt-nobody", {"status": "closed"}, 404),
        (None, {"customer_id": "cust-00002"}, 422),  # a ticket never moves
        (None, {"queue_id": "billing"}, 422),
        (None, {"status": None, "bogus": "x"}, 422),
    ],
)
def test_a_refused_change_changes_nothing(api, tasks, ticket, body, status):
    target = ticket or tasks[4].open_ticket_id
    before = api.get(f"/api/tickets/{tasks[4].open_ticket_id}").json()
    assert api.patch(f"/api/tickets/{target}", json=body).status_code == status
    assert api.get(f"/api/tickets/{tasks[4].open_ticket_id}").json() == before


def test_clone_copies_a_customer_and_their_tickets_once(api, tasks):
    task = tasks[5]
    body = {"customer_id": f"{task.customer_id}~copy", "suffix": "~copy"}
    first = api.post(f"/api/customers/{task.customer_id}/clone", json=body)
    assert first.status_code == 200
    mapping = first.json()["tickets"]
    assert mapping[task.open_ticket_id] == f"{task.open_ticket_id}~copy"
    copied = api.get(
        "/api/tickets", params={"customer_id": body["customer_id"], "queue_id": task.queue_id}
    ).json()["tickets"]
    original = api.get("/api/tickets", params=task.identity).json()["tickets"]
    assert [r["id"] for r in copied] == [f"{r['id']}~copy" for r in original]
    assert api.post(f"/api/customers/{task.customer_id}/clone", json=body).json() == first.json()
    assert len(api.get("/api/tickets", params=task.identity).json()["tickets"]) == len(original)
    missing = api.post("/api/customers/cust-nobody/clone", json=body)
    assert missing.status_code == 404


def test_tasks_name_an_open_and_a_closed_ticket_of_the_pair(api, tasks):
    listed = api.get("/api/tasks", params={"limit": 3}).json()["tasks"]
    assert len(listed) == 3
    for task in tasks[:6]:
        assert task.other_queue_id != task.queue_id
        rows = {
            r["id"]: r["status"]
            for r in api.get("/api/tickets", params=task.identity).json()["tickets"]
        }
        assert rows.get(task.closed_ticket_id) == "closed"


# --- the read-only role the sql bundle reads through ---


def test_the_reader_role_reads_tickets_and_nothing_else(helpdesk, postgres_server, tasks):
    with psycopg.connect(helpdesk.reader_url.replace("+psycopg", ""), autocommit=True) as conn:
        count = conn.execute(
            "SELECT count(*) FROM tickets WHERE customer_id = %s", (tasks[0].customer_id,)
        ).fetchone()
        assert count is not None
        assert count[0] >= 2
        for statement in (
            "UPDATE tickets SET status = 'closed'",
            "INSERT INTO tickets (id) VALUES ('x')",
            "SELECT * FROM customers",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


def test_a_reader_role_needs_postgresql_and_a_plain_name(helpdesk, tmp_path):
    from helpdesk.store import TicketStore

    with pytest.raises(ValidationError, match="the role name must match"):
        helpdesk.server.store.grant_reader("reader; DROP TABLE tickets")
    sqlite = TicketStore(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        with pytest.raises(ValidationError, match="needs PostgreSQL"):
            sqlite.grant_reader(READER_ROLE)
    finally:
        sqlite.close()


# --- the bundles ---


@pytest.mark.parametrize("kind", KINDS)
def test_the_checked_in_bundles_are_what_the_example_writes_and_load(kind):
    on_disk = {p.name: p.read_text() for p in (BUNDLES / kind).glob("*.json")}
    generated = bundle_files(kind)
    assert {k: on_disk[k] for k in generated} == generated
    bundle = load_bundle(BUNDLES / kind)
    assert bundle.tier == 2
    assert sorted(bundle.contract.oracle.identity_keys) == ["customer_id", "queue_id"]
    assert [e.name for e in bundle.required] == ["ticket_filed", "previous_ticket_closed"]
    assert [e.updates for e in (*bundle.required, *bundle.forbidden)] == [False, True, True]


@pytest.mark.parametrize("kind", KINDS)
def test_the_bundle_is_authored_from_contract_init(kind, tmp_path, capsys):
    """contract init -> the author's edits (the helpdesk's documents, its two identity keys, its
    ids and its scoring) -> contract seal -> contract check: the checked-in bundle's digest."""
    from rewardseal_worker.cli import main as worker_main

    directory = tmp_path / "helpdesk"
    assert worker_main(["contract", "init", str(directory), "--recipe", kind]) == 0
    example = bundle_files(kind)
    for name in ("required_effects.json", "forbidden_effects.json", "oracle_recipe.json"):
        (directory / name).write_text(example[name])
    wanted = json.loads(example["contract.json"])
    contract = json.loads((directory / "contract.json").read_text())
    for field in ("contract_id", "task_id", "task_digest", "environment_id", "components"):
        contract[field] = wanted[field]
    contract["environment_digest"] = wanted["environment_digest"]
    contract["oracle"]["identity_keys"] = ["customer_id", "queue_id"]
    contract["scoring_policy"]["wrong_effect_reward"] = 0.0
    (directory / "contract.json").write_text(json.dumps(contract))
    assert worker_main(["contract", "check", str(directory)]) == 2  # the digests are stale
    assert worker_main(["contract", "seal", str(directory)]) == 0
    assert worker_main(["contract", "check", str(directory)]) == 0
    capsys.readouterr()
    authored = load_bundle(directory)
    assert authored.contract_digest == load_bundle(BUNDLES / kind).contract_digest


def test_contract_check_and_show_read_the_update_effects(capsys):
    from rewardseal_worker.cli import main as worker_main

    assert worker_main(["contract", "check", str(BUNDLES / "sql")]) == 0
    assert worker_main(["contract", "show", str(BUNDLES / "sql")]) == 0
    shown = capsys.readouterr().out
    assert (
        "previous_ticket_closed: in tickets where customer_id = <customer_id>, queue_id = "
        "<queue_id>; records that existed before with status = 'open' and changed; exactly 1 "
        "changed record(s); now with resolution = 'superseded', status = 'closed'; no change "
        "outside ['resolution', 'status', 'updated_at']"
    ) in shown
    assert "closed_ticket_touched: in tickets where customer_id = <customer_id>, queue_id = " in (
        shown
    )


# --- the actor and its reports ---


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"actions": [], "extra": 1}',
        '{"actions": [{"op": "delete_ticket", "fields": {}}]}',
        '{"actions": [{"op": "update_ticket", "fields": {}}]}',
        '{"actions": [{"op": "create_ticket", "fields": {"priority": 1}}]}',
        '{"actions": [], "actions": []}',
        '{"halted": "yes"}',
    ],
)
def test_a_malformed_report_is_refused_whole(text):
    with pytest.raises(ValidationError):
        parse_report(text)


def test_a_report_refusal_names_every_place_and_no_value():
    text = json.dumps(
        {
            "actions": [{"op": "drop_table", "fields": {"subject": "SECRET-VALUE"}}] * 17,
            "halted": "yes",
        }
    )
    with pytest.raises(ValidationError) as refused:
        parse_report(text)
    message = refused.value.message
    assert "actions may carry at most 16 items" in message
    assert 'actions[0] must be {"op": "create_ticket"' in message
    assert "halted must be true or false" in message
    assert "SECRET-VALUE" not in message


def test_an_unparseable_completion_writes_nothing_and_completes(helpdesk, api, tasks):
    task = tasks[6]
    before = api.get("/api/tickets", params=task.identity).json()
    actor = helpdesk.actor()
    try:
        assert actor.act("I did it!", task.identity, task.identity, "ep-x") == COMPLETED
    finally:
        actor.close()
    assert api.get("/api/tickets", params=task.identity).json() == before


def test_a_halted_report_runs_its_calls_then_halts(helpdesk, api, tasks):
    task = tasks[7]
    report = json.loads(report_for("control", task))
    report["halted"] = True
    actor = helpdesk.actor()
    try:
        signal = actor.act(json.dumps(report), task.identity, task.identity, "ep-h")
    finally:
        actor.close()
    assert signal == RuntimeSignal.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT
    assert api.get(f"/api/tickets/{task.open_ticket_id}").json()["status"] == "closed"


def test_an_unreachable_helpdesk_is_a_platform_failure(tasks):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    actor = HelpdeskActor(f"http://127.0.0.1:{port}", "t" * 24, sandbox=False, timeout=2)
    try:
        signal = actor.act(report_for("control", tasks[8]), tasks[8].identity, {}, "ep-u")
        with pytest.raises(ValidationError, match="could not be reached"):
            HelpdeskActor(f"http://127.0.0.1:{port}", "t" * 24).identity_for(
                tasks[8].identity, "ep-u"
            )
    finally:
        actor.close()
    assert signal == RuntimeSignal.RUNTIME_SIGNAL_FAILED_PLATFORM
    with pytest.raises(ValidationError):
        HelpdeskActor("ftp://x", "t" * 24)


# --- the command line (in this process; the end-to-end test runs it as a process) ---


def test_serve_without_a_token_is_one_line_and_status_2(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HELPDESK_TOKEN", raising=False)
    assert main(["serve", "--db-url", f"sqlite:///{tmp_path / 'h.db'}"]) == 2
    assert capsys.readouterr().err == (
        "helpdesk: no token: set $HELPDESK_TOKEN or pass --token-file\n"
    )


def test_serve_on_a_port_in_use_is_one_line_and_status_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HELPDESK_TOKEN", "s" * 24)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["serve", "--port", str(port), "--db-url", f"sqlite:///{tmp_path / 'h.db'}"]
        assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"helpdesk: cannot listen on 127.0.0.1:{port}: the port is in use by another process"
    )


def test_init_db_and_tasks_commands(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'h.db'}"
    assert main(["init-db", "--db-url", db, "--seed-customers", "2"]) == 0
    assert main(["init-db", "--db-url", db, "--seed-customers", "2"]) == 0
    assert main(["tasks", "--db-url", db, "--limit", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["schema ready; 2 customers seeded", "schema ready; 0 customers seeded"]
    assert [json.loads(line)["customer_id"] for line in out[2:]] == ["cust-00001", "cust-00001"]
    # A sandbox copy: the schema and the queues, no customer; starting it again seeds nothing.
    sandbox = f"sqlite:///{tmp_path / 'sandbox.db'}"
    assert main(["init-db", "--db-url", sandbox, "--seed-customers", "0"]) == 0
    assert main(["init-db", "--db-url", sandbox, "--seed-customers", "5"]) == 0
    assert capsys.readouterr().out.splitlines() == ["schema ready; 0 customers seeded"] * 2


def test_bundles_command_writes_both_bundles(tmp_path, capsys):
    assert main(["bundles", "--out", str(tmp_path)]) == 0
    for kind in KINDS:
        written = load_bundle(tmp_path / kind)
        assert written.contract_digest == load_bundle(BUNDLES / kind).contract_digest
