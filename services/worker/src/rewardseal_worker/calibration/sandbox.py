"""Calibration against a sandbox copy of the system of record (``rewardseal-worker calibrate``).

The in-memory calibration (:func:`~.trials.judge_trial`) judges records the generator made. A
sandbox calibration also puts the bundle's own oracle reader in the measurement: each trial's
records are written into a writable sandbox copy of the SoR, read back through the reader the
bundle's recipe describes (pointed at the sandbox), and judged exactly as the engine judges;
then the trial's rows are deleted again. A column type or NULL rule of the real schema, an API
that renames a field, a reader that drops a record: each shows up here as it would in scoring.

What can be written, by recipe kind:

``sql``
    rows into the recipe's table in the sandbox database (``--sandbox`` a SQLAlchemy URL of
    SQLite or PostgreSQL, or a SQLite file path), read by the recipe's own SQL reader.
``rest``
    rows into the table named like the recipe's collection in the database the sandbox API
    serves (``--sandbox-store``), read through the sandbox API (``--sandbox``, its base URL).
``fhir``
    Encounters created, updated and deleted with the FHIR interactions (``POST``, ``PUT``,
    ``DELETE <path>/Encounter``) on the sandbox FHIR server (``--sandbox``, its base URL;
    :mod:`.fhir_sandbox`), or, with ``--sandbox-store``, rows of the resource's collection
    (``Encounter`` -> ``encounters``) in the database that server serves from; either way read
    back through the server's FHIR search by the bundle's own fhir reader, so the server's
    mapping and the reader's inverse are both measured (R-CAL-8).
``json_file``
    the collection file, written whole into the sandbox directory (``--sandbox DIR``).
``screen_dump``
    refused: a screen dump is tier 0, which certifies nothing.

Never the live SoR: :func:`~.live_sor.refuse_live_target` compares the file, the database server
or the API the sandbox names with what the bundle reads, before the first write, and refuses a
match; a live SoR it cannot determine is refused too, unless the operator says otherwise
(R-CAL-5).
A draw that the sandbox cannot hold (a column it lacks, a background row it refuses) raises
:class:`~.runner.TrialNotWritable` and is drawn again: the generator made it for another schema.

Only effective faults count (R-CAL-7). The trial's own writes (the episode's creates, updates
and deletes) that the sandbox refuses (a constraint, a type) make the draw *rejected by the
SoR* (:class:`~.runner.TrialRejected`): that fault cannot happen there. And after the writes
the judge reads back, through the bundle's reader, each field the fault wrote
(:class:`~.trials.FieldTouch`): when the sandbox stored the gold value there anyway (SQLite's
``"3"`` stored as the integer 3 in an INTEGER column, an omitted column filled with its
``DEFAULT``, a trigger), the SoR holds the correct record, the checker is right to accept it,
and the draw is *benign*, counted apart and never as a false accept.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import IntegrityError, NoSuchTableError, SQLAlchemyError

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import RECORD_ID_FIELD, change_token, judge_episode, same_value
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.calibration.fault_classes import CalibrationSetup
from rewardseal_worker.calibration.fhir_sandbox import FhirSandboxStore
from rewardseal_worker.calibration.live_sor import (
    psycopg_url,
    refuse_live_target,
    sandbox_path,
    sandbox_sqlite_file,
)
from rewardseal_worker.calibration.runner import JudgedTrial, TrialNotWritable, TrialRejected
from rewardseal_worker.calibration.trials import FieldTouch, Record, Trial
from rewardseal_worker.oracles.base import (
    KIND_FHIR,
    KIND_JSON_FILE,
    KIND_REST,
    KIND_SQL,
    OracleReader,
    OracleUnavailable,
    recipe_collection,
)
from rewardseal_worker.oracles.http import DEFAULT_FHIR_PATH
from rewardseal_worker.oracles.registry import READER_KINDS

__all__ = [
    "SANDBOX_KINDS",
    "SandboxJudge",
    "open_sandbox",
    "refuse_live_target",
]

SANDBOX_KINDS: Final = (KIND_SQL, KIND_REST, KIND_FHIR, KIND_JSON_FILE)
"""Recipe kinds whose trials the calibrator can write into a sandbox."""
_SANDBOX_URL_ENV: Final = "REWARDSEAL_CALIBRATION_SANDBOX_URL"
"""The variable the sandbox reader's copy of a sql recipe reads its URL from (set in memory)."""
_COMPLETED: Final = RuntimeSignal.RUNTIME_SIGNAL_COMPLETED


class SandboxStore(Protocol):
    """Where trial records are written: a table, or a collection file."""

    def insert(self, records: Sequence[Record]) -> dict[str, str]:
        """Write ``records``; trial record id -> the id the sandbox gave it."""
        ...

    def update(self, sandbox_id: str, record: Record) -> None:
        """Replace the fields of the record ``sandbox_id`` with ``record``'s."""
        ...

    def delete(self, sandbox_ids: Sequence[str]) -> None:
        """Remove these records (a trial leaves the sandbox as it found it)."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...


# --- writers -------------------------------------------------------------------------------------


class SqlSandboxStore:
    """Rows of one table in a writable sandbox database (SQLite or PostgreSQL)."""

    def __init__(self, url: str, table: str, id_column: str) -> None:
        """Connect and reflect ``table``; refuse a sandbox that lacks it."""
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
            # Opening would create an empty file, and the sandbox is to be a copy of the SoR.
            raise ValidationError(f"the sandbox SQLite file {parsed.database} does not exist")
        try:
            # A sandbox needs no durability: without a flush per commit a trial's few small
            # transactions take milliseconds instead of a disk sync each.
            postgres = parsed.get_backend_name() == "postgresql"
            options = {"options": "-c synchronous_commit=off"} if postgres else {}
            self._engine: Engine = sa.create_engine(psycopg_url(url), connect_args=options)
            if self._engine.dialect.name == "sqlite":
                sa.event.listen(self._engine, "connect", _sqlite_unsynced)
            self._table = sa.Table(table, sa.MetaData(), autoload_with=self._engine)
        except NoSuchTableError:
            raise ValidationError(
                f"the sandbox has no table {table!r}: restore a copy of the system of record's "
                "schema there first"
            ) from None
        except (SQLAlchemyError, ImportError, OSError) as exc:
            raise ValidationError(
                f"the sandbox database cannot be opened ({type(exc).__name__})"
            ) from None
        if id_column not in self._table.c:
            raise ValidationError(f"the sandbox table {table!r} has no column {id_column!r}")
        self._id = self._table.c[id_column]
        try:
            python_type = self._id.type.python_type
        except NotImplementedError:
            python_type = str
        # An integer key is the database's to assign; a text key gets the trial's id under this
        # run's nonce, so it cannot collide with a row the sandbox already holds.
        self._assigns_ids = python_type is int
        self._nonce = secrets.token_hex(4)
        self._insert = sa.insert(self._table).returning(self._id)
        self._delete = sa.delete(self._table).where(
            self._id.in_(sa.bindparam("keys", expanding=True))
        )

    def _row(self, record: Record) -> dict[str, Any]:
        fields = {k: v for k, v in record.items() if k != RECORD_ID_FIELD}
        missing = sorted(set(fields) - set(self._table.c.keys()))
        if missing:
            raise TrialNotWritable(f"the sandbox table has no column {missing}")
        return fields

    def insert(self, records: Sequence[Record]) -> dict[str, str]:
        ids: dict[str, str] = {}
        try:
            with self._engine.begin() as conn:
                for record in records:
                    row = self._row(record)
                    if not self._assigns_ids:
                        row[self._id.name] = f"cal{self._nonce}-{record[RECORD_ID_FIELD]}"
                    # One statement object for every row: SQLAlchemy compiles each shape once.
                    assigned = conn.execute(self._insert, row).scalar_one()
                    ids[str(record[RECORD_ID_FIELD])] = str(assigned)
        except IntegrityError:
            raise TrialRejected(
                "a constraint of the sandbox's schema (NOT NULL, unique, foreign key, check) "
                "refused a row"
            ) from None
        except SQLAlchemyError as exc:
            raise TrialRejected(f"the sandbox refused a row ({type(exc).__name__})") from None
        return ids

    def update(self, sandbox_id: str, record: Record) -> None:
        row = self._row(record)
        values = {c.name: row.get(c.name) for c in self._table.c if c.name != self._id.name}
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    sa.update(self._table).where(self._id == self._key(sandbox_id)).values(**values)
                )
        except SQLAlchemyError as exc:
            raise TrialRejected(f"the sandbox refused an update ({type(exc).__name__})") from None

    def delete(self, sandbox_ids: Sequence[str]) -> None:
        if not sandbox_ids:
            return
        keys = [self._key(i) for i in sandbox_ids]
        with self._engine.begin() as conn:
            conn.execute(self._delete, {"keys": keys})

    def _key(self, sandbox_id: str) -> Any:
        return int(sandbox_id) if self._assigns_ids else sandbox_id

    def close(self) -> None:
        self._engine.dispose()


def _sqlite_unsynced(dbapi_connection: Any, record: Any) -> None:
    dbapi_connection.execute("PRAGMA synchronous=OFF")


def _json_sandbox_file(recipe: Mapping[str, Any], directory: Path) -> Path:
    return directory / Path(str(recipe["path"])).name


class JsonSandboxStore:
    """A ``{"collections": {name: [...]}}`` file, rewritten whole (atomically) on every change."""

    def __init__(self, path: Path, collection: str) -> None:
        if not path.parent.is_dir():
            raise ValidationError(f"the sandbox directory {path.parent} does not exist")
        self._path = path
        self._collection = collection
        self._records: dict[str, Record] = {}
        self._nonce = secrets.token_hex(4)
        self._flush()

    def _flush(self) -> None:
        doc = {"collections": {self._collection: list(self._records.values())}}
        fd, temp = tempfile.mkstemp(dir=self._path.parent, prefix=".sandbox.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(doc, handle)
        os.replace(temp, self._path)

    def insert(self, records: Sequence[Record]) -> dict[str, str]:
        ids: dict[str, str] = {}
        for record in records:
            sandbox_id = f"cal{self._nonce}-{record[RECORD_ID_FIELD]}"
            self._records[sandbox_id] = {**record, RECORD_ID_FIELD: sandbox_id}
            ids[str(record[RECORD_ID_FIELD])] = sandbox_id
        self._flush()
        return ids

    def update(self, sandbox_id: str, record: Record) -> None:
        self._records[sandbox_id] = {**record, RECORD_ID_FIELD: sandbox_id}
        self._flush()

    def delete(self, sandbox_ids: Sequence[str]) -> None:
        for sandbox_id in sandbox_ids:
            self._records.pop(sandbox_id, None)
        self._flush()

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()


# --- the judge -----------------------------------------------------------------------------------


@dataclass
class SandboxJudge:
    """A :data:`~.runner.TrialJudge` that writes each trial into the sandbox and reads it back
    through the bundle's own reader."""

    store: SandboxStore
    reader: OracleReader
    note: str | None = None
    """Said to the operator: e.g. that the live target could not be compared."""

    def __call__(self, setup: CalibrationSetup, rng: Any, trial: Trial) -> JudgedTrial:
        ids: dict[str, str] = {}
        try:
            try:
                ids |= self.store.insert(trial.baseline)
            except TrialRejected as exc:
                # The SoR before the episode is background, not the fault: draw it again.
                raise TrialNotWritable(str(exc)) from None
            baseline = self._read(trial.identity)
            before = {str(r[RECORD_ID_FIELD]): r for r in trial.baseline}
            after = {str(r[RECORD_ID_FIELD]) for r in trial.after}
            fresh = [r for r in trial.after if str(r[RECORD_ID_FIELD]) not in before]
            for record in trial.after:
                old = before.get(str(record[RECORD_ID_FIELD]))
                if old is not None and old != record:
                    self.store.update(ids[str(record[RECORD_ID_FIELD])], record)
            # A record of the baseline missing after the trial was deleted by it.
            self.store.delete([ids[rid] for rid in before if rid not in after])
            ids |= self.store.insert(fresh)
            current = self._read(trial.identity)
        finally:
            self.store.delete(list(ids.values()))
        credited = _sandbox_credits(trial.credited, ids, baseline)
        # Exactly the engine's call: the bundle's specs, COMPLETED (the only signal that pays).
        decision = judge_episode(
            setup.required,
            setup.forbidden,
            identity=dict(trial.identity),
            baseline=baseline,
            current=current,
            runtime_signal=_COMPLETED,
            credited=credited,
            oracle_error=None,
        )
        return JudgedTrial(decision, benign=_normalized_away(trial.touched, ids, current))

    def _read(self, identity: Mapping[str, str]) -> list[dict[str, Any]]:
        try:
            return self.reader.read(identity)
        except OracleUnavailable as exc:
            raise ValidationError(
                f"calibration stopped: the sandbox could not be read ({exc})"
            ) from None

    def close(self) -> None:
        """Close the reader and the store."""
        self.reader.close()
        self.store.close()


def _normalized_away(
    touched: Sequence[FieldTouch], ids: Mapping[str, str], current: Sequence[Mapping[str, Any]]
) -> bool:
    """Whether the sandbox stored the gold value in every field the fault wrote (R-CAL-7).

    Read back through the bundle's reader, as scoring reads; compared with the judge's own
    JSON-scalar equality, so ``"3"`` read back as 3 is the gold 3 and ``"3"`` read back as
    ``"3"`` is not. A trial with no field fault, or whose touched record the reader does not
    return, is an effective fault.
    """
    if not touched:
        return False
    read = {str(r.get(RECORD_ID_FIELD)): r for r in current}
    for touch in touched:
        record = read.get(ids.get(touch.record_id, ""))
        if record is None:
            return False
        stored = record.get(touch.field)
        if touch.gold is None:
            if stored is not None:
                return False
        elif stored is None or not same_value(stored, touch.gold):
            return False
    return True


def _sandbox_credits(
    credited: Set[str], ids: Mapping[str, str], baseline: Sequence[Mapping[str, Any]]
) -> frozenset[str]:
    """The trial's credited ids in the sandbox's terms: a record id as the sandbox gave it, a
    change token (``<id>@<version>``, R-W-3) made again from the sandbox's read of that record."""
    read = {str(r[RECORD_ID_FIELD]): r for r in baseline}
    found: set[str] = set()
    for credit in credited:
        if credit in ids:
            found.add(ids[credit])
            continue
        rid, at, _ = credit.rpartition("@")
        record = read.get(ids.get(rid, "")) if at else None
        if record is not None:
            found.add(change_token(record))
    return frozenset(found)


def open_sandbox(
    bundle: ContractBundle,
    sandbox: str,
    *,
    sandbox_store: str | None = None,
    environ: Mapping[str, str] | None = None,
    unsafe_unknown_live_sor: bool = False,
) -> SandboxJudge:
    """The sandbox judge for ``bundle``: its store and its reader, pointed at ``sandbox``.

    Nothing is written before :func:`~.live_sor.refuse_live_target` has decided that the sandbox
    is not the live SoR (R-CAL-5); ``unsafe_unknown_live_sor`` lets calibration proceed when the
    live SoR cannot be determined (the judge's ``note`` then says so), never when it matches.

    Raises:
        ValidationError: the recipe kind cannot be calibrated in a sandbox (naming what is
            missing), the sandbox is the live target or the live target is unknown, or the
            sandbox cannot be opened.
    """
    env = dict(os.environ if environ is None else environ)
    recipe = dict(bundle.recipe)
    kind = str(recipe.get("kind"))
    if kind not in SANDBOX_KINDS:
        raise ValidationError(
            f"a {kind} recipe cannot be calibrated: it is tier 0, which no certificate covers"
        )
    if kind in (KIND_REST, KIND_FHIR):
        if kind == KIND_REST and not sandbox_store:
            raise ValidationError(
                "a rest sandbox is read through its API and written in its database: pass "
                "--sandbox-store, the database URL the sandbox API serves from"
            )
        if "://" not in sandbox:
            raise ValidationError(f"a {kind} sandbox is the base URL of a sandbox deployment")
    # Decided before the first write: everything below may write into the sandbox.
    note = refuse_live_target(bundle, sandbox, env, allow_unknown=unsafe_unknown_live_sor)
    store: SandboxStore
    if kind == KIND_SQL:
        url = _as_database_url(sandbox)
        env[_SANDBOX_URL_ENV] = url
        read_recipe = {**recipe, "database": {"url_env": _SANDBOX_URL_ENV}}
        store = SqlSandboxStore(url, recipe["table"], recipe.get("id_column", RECORD_ID_FIELD))
        reader = READER_KINDS[kind].make(read_recipe, bundle.path, env)
    elif kind in (KIND_REST, KIND_FHIR):
        env[recipe["base_url_env"]] = sandbox
        reader = READER_KINDS[kind].make(recipe, bundle.path, env)
        if sandbox_store:
            store = SqlSandboxStore(
                _as_database_url(sandbox_store), recipe_collection(recipe), "id"
            )
        else:  # fhir: through the FHIR interactions, with the token the reader reads with
            token_env = recipe.get("token_env")
            store = FhirSandboxStore(
                sandbox,
                f"{recipe.get('path', DEFAULT_FHIR_PATH).rstrip('/')}/{recipe['resource']}",
                env.get(token_env) if token_env else None,
            )
    else:
        directory = sandbox_path(sandbox)
        target = _json_sandbox_file(recipe, directory)
        store = JsonSandboxStore(target, recipe_collection(recipe))
        read_recipe = {**recipe, "path": target.name}
        reader = READER_KINDS[kind].make(read_recipe, directory, env)
    return SandboxJudge(store=store, reader=reader, note=note)


def _as_database_url(sandbox: str) -> str:
    """The sandbox as the URL its store and reader open: a SQLite spelling (path, ``file:`` URI,
    ``sqlite://`` URL) as ``sqlite:///`` and the absolute file the live check compared; any
    other database URL unchanged."""
    path = sandbox_sqlite_file(sandbox)
    if path is None:
        return sandbox
    return URL.create("sqlite", database=str(path)).render_as_string(hide_password=False)
