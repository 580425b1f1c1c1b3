"""MockMed's storage: the ``encounters`` table over SQLite (WAL) or PostgreSQL.

Engine creation, URL checks, transactions and error mapping are the core package's
(:class:`rewardseal_server.sqlstore.StoreEngine`): a database that cannot be reached raises
:class:`~rewardseal.core.errors.Unavailable`, any other database failure a
:class:`~rewardseal.core.errors.RewardSealError` whose message names no stored value.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection

from rewardseal.core.errors import ValidationError
from rewardseal_mockmed.schema import COLUMNS, WRITABLE_FIELDS, encounters, metadata
from rewardseal_server.sqlstore import StoreEngine, chunks

__all__ = [
    "DEFAULT_SEED",
    "EPOCH",
    "MAX_SEED_ROWS",
    "PRIORITIES",
    "STATUSES",
    "TYPES",
    "EncounterStore",
    "Record",
    "background_rows",
    "new_encounter_id",
    "timestamp",
]

Record = dict[str, str | None]
"""One encounter: every column of :data:`~rewardseal_mockmed.schema.COLUMNS`, values or None."""

DEFAULT_SEED: Final = 20261130
MAX_SEED_ROWS: Final = 10_000_000
_SCHEMA_LOCK_KEY: Final = 0x4D4F434B4D4544  # "MOCKMED": one schema creator at a time (PostgreSQL)
_INSERT_CHUNK: Final = 5000

# The background rows' vocabulary, shared with rewardseal_mockmed.seeding's rows. A value's
# repeats weight its draw.
TYPES: Final = ("Triage", "Consult", "Follow-up", "Lab review", "Vaccination", "Telehealth")
STATUSES: Final = ("open", "closed", "closed", "cancelled")
PRIORITIES: Final[tuple[str | None, ...]] = (None, None, None, None, "routine", "urgent", "stat")
_COMPLAINTS = (
    "mild headache since morning",
    "sore throat for two days",
    "twisted left ankle during a walk",
    "seasonal allergy flare",
    "low-grade fever overnight",
    "persistent dry cough",
)
_PLANS = (
    "vitals stable",
    "fluids and rest advised",
    "follow up if symptoms persist",
    "ice and elevation advised",
)
EPOCH: Final = datetime(2026, 1, 1, tzinfo=UTC)
"""Background rows are created within 300 days after this moment."""


def timestamp(moment: datetime | None = None) -> str:
    """``moment`` (default now) as the ``created_at`` text: UTC, microseconds, ``Z``."""
    moment = datetime.now(UTC) if moment is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_encounter_id() -> str:
    """A fresh record id (``enc-`` and 32 hex digits, as the seed's writes use)."""
    return f"enc-{uuid.uuid4().hex}"


def background_rows(count: int, seed: int) -> list[Record]:
    """``count`` synthetic encounters of invented patients, a pure function of ``seed``.

    About four rows per patient. Patient ids are ``patient-`` and 12 hex digits, a shape no
    seeded episode, calibration trial or ExtraDup variant uses, so background rows never
    belong to an episode's identity.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_SEED_ROWS:
        raise ValidationError(f"the row count must be an integer in 0..{MAX_SEED_ROWS}")
    rng = random.Random(f"rewardseal-mockmed.background/{seed}")
    patients = [f"patient-{rng.getrandbits(48):012x}" for _ in range(max(1, math.ceil(count / 4)))]
    rows: list[Record] = []
    for _ in range(count):
        created = EPOCH + timedelta(seconds=rng.randrange(0, 300 * 24 * 3600))
        rows.append(
            {
                "id": f"enc-{rng.getrandbits(96):024x}",
                "patient_id": rng.choice(patients),
                "type": rng.choice(TYPES),
                "note": f"Synthetic: {rng.choice(_COMPLAINTS)}; {rng.choice(_PLANS)}.",
                "status": rng.choice(STATUSES),
                "priority": rng.choice(PRIORITIES),
                "created_at": timestamp(created),
            }
        )
    return rows


def _check_writable(fields: Mapping[str, object]) -> None:
    """Refuse fields an encounter write may not set, or a missing or empty ``patient_id``
    (the rule of both :meth:`EncounterStore.create` and :meth:`EncounterStore.replace`)."""
    unknown = sorted(set(fields) - set(WRITABLE_FIELDS))
    if unknown:
        raise ValidationError(f"fields that cannot be written: {', '.join(unknown)}")
    patient_id = fields.get("patient_id")
    if not isinstance(patient_id, str) or not patient_id:
        raise ValidationError("patient_id must be a non-empty string")


def _record(row: Mapping[Any, Any]) -> Record:
    return {name: (None if row[name] is None else str(row[name])) for name in COLUMNS}


class EncounterStore:
    """The ``encounters`` table behind MockMed. Thread-safe (a pooled engine backs it)."""

    def __init__(self, url: str) -> None:
        """Open ``url`` (``sqlite:///path`` or ``postgresql://...``); no schema is made yet.

        Raises:
            ValidationError: the URL is malformed, unsupported, in-memory SQLite or lacks a
                driver. The message never repeats the URL.
        """
        self._db = StoreEngine(url, what="MockMed database")

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._db.backend

    @property
    def display_url(self) -> str:
        """The database URL with any password hidden (safe to print)."""
        return self._db.engine.url.render_as_string(hide_password=True)

    def create_schema(self) -> None:
        """Create the table and its index where missing; existing rows are kept."""

        def work(conn: Connection) -> None:
            self._db.advisory_lock(conn, _SCHEMA_LOCK_KEY)
            metadata.create_all(conn, checkfirst=True)

        self._db.write(work)

    def seed_if_empty(self, count: int, seed: int = DEFAULT_SEED) -> int:
        """Insert ``count`` :func:`background_rows` when the table is empty; return how many.

        A table that holds any row is left alone, so a restart (or a second replica) adds
        nothing and every id a receipt may point at stays.
        """
        rows = background_rows(count, seed)
        if not rows:
            return 0

        def work(conn: Connection) -> int:
            self._db.advisory_lock(conn, _SCHEMA_LOCK_KEY)
            if conn.execute(select(encounters.c.id).limit(1)).first() is not None:
                return 0
            for chunk in chunks(rows, _INSERT_CHUNK):
                conn.execute(insert(encounters), list(chunk))
            return len(rows)

        return self._db.write(work)

    def create(self, fields: Mapping[str, str | None]) -> Record:
        """Store one encounter with ``fields`` (writable columns only); return the full record.

        The id and ``created_at`` are set here. Missing writable fields are stored as NULL.

        Raises:
            ValidationError: a field is not writable or ``patient_id`` is missing or empty.
        """
        _check_writable(fields)
        record: Record = {name: None for name in COLUMNS}
        record.update(fields)
        record["id"] = new_encounter_id()
        record["created_at"] = timestamp()
        self._db.write(lambda conn: conn.execute(insert(encounters), record))
        return record

    def replace(self, encounter_id: str, fields: Mapping[str, str | None]) -> Record | None:
        """Overwrite the writable fields of encounter ``encounter_id`` (a FHIR ``PUT``); the
        id and ``created_at`` stay. None when there is no such encounter.

        Raises:
            ValidationError: as :meth:`create`.
        """
        _check_writable(fields)
        values = {name: fields.get(name) for name in WRITABLE_FIELDS}

        def work(conn: Connection) -> Record | None:
            done = conn.execute(
                update(encounters).where(encounters.c.id == encounter_id).values(**values)
            )
            if not done.rowcount:
                return None
            row = conn.execute(select(encounters).where(encounters.c.id == encounter_id))
            return _record(row.mappings().one())

        return self._db.write(work)

    def delete(self, encounter_id: str) -> bool:
        """Remove encounter ``encounter_id`` (a FHIR ``DELETE``); whether there was one."""
        query = delete(encounters).where(encounters.c.id == encounter_id)
        return bool(self._db.write(lambda conn: conn.execute(query).rowcount))

    def list_for_patient(self, patient_id: str) -> list[Record]:
        """Every encounter of ``patient_id``, oldest first (rows without a time first)."""
        query = (
            select(encounters)
            .where(encounters.c.patient_id == patient_id)
            .order_by(encounters.c.created_at.asc().nulls_first(), encounters.c.id)
        )
        rows = self._db.read(lambda conn: conn.execute(query).mappings().all())
        return [_record(row) for row in rows]

    def count(self, patient_id: str | None = None) -> int:
        """How many encounters are stored (for one patient when ``patient_id`` is given)."""
        query = select(func.count()).select_from(encounters)
        if patient_id is not None:
            query = query.where(encounters.c.patient_id == patient_id)
        return int(self._db.read(lambda conn: conn.execute(query).scalar_one()))

    def ping(self) -> None:
        """Raise :class:`~rewardseal.core.errors.Unavailable` unless the database answers."""
        self._db.ping()

    def close(self) -> None:
        """Close every pooled connection."""
        self._db.dispose()

    def __repr__(self) -> str:
        return f"EncounterStore({self.display_url!r})"
