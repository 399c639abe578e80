"""The autotuner's SQLite database (SQLAlchemy 2 ORM).

One file holds everything a tuning run depends on, so runs are resumable and a
published profile can be traced back to its inputs:

* ``measurements`` — one row per timed grid point ``(role, B, c, n)`` of a setup
  (backend, device, model pair, dtype, threads, software versions), committed as
  soon as it is measured so an interrupted ``profile`` resumes where it stopped;
  the backend (``native`` or ``sglang``: whose forwards were timed) keeps the two
  engines' cost curves apart, and the tensor-parallel size (``tp_size``: GPUs one
  SGLang forward spans) keeps a TP-4 forward's curve apart from a TP-1 one;
* ``traces`` — recorded full-expansion iterations (``TraceIteration`` JSON), each
  with the trace format it was written in; only the current format
  (``sglang_cast.cast.TRACE_FORMAT``) is ever read back;
* ``step_samples`` — timed whole engine steps of a setup (``StepSample``: batch size,
  context, drafted depth, verified nodes, and the ms beyond what the forward tables
  charge), from ``profile``'s step design or from ``tune``'s live runs; the host
  overhead table is fitted from them (``costs.measured_costs``);
* ``published_profiles`` — every YAML profile written, with its study, trial and
  the live gate's predicted-vs-live numbers;
* Optuna's own tables (``tune`` stores its studies in the same file).

Concurrency: the file runs in WAL mode with a busy timeout, and every transaction
starts with ``BEGIN IMMEDIATE`` so two writers (``profile`` and ``daemon``) queue
for the write lock instead of failing with SQLITE_BUSY when a read transaction
tries to upgrade.  SQLite errors a user can cause (locked, corrupted, read-only)
become one-line ``AutotuneError``s.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from sqlalchemy import DateTime, Float, Integer, String, Text, create_engine, delete, event, func, select
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sglang_cast.cast import TRACE_FORMAT, StepSample, TraceIteration
from sglang_cast.engine.timing import Timing
from sglang_cast.models.cache import cache_root

from .errors import RUNTIME, AutotuneError

DEFAULT_TIMEOUT_S = 30.0
NATIVE = "native"  # the backend of every measurement taken before backends were recorded
BACKENDS = (NATIVE, "sglang")


def default_db_path() -> Path:
    """``autotune.db`` in the project's cache (`cache.cache_root`: ``$SGLANG_CAST_CACHE``
    or ``~/.cache/sglang_cast``)."""
    return cache_root() / "autotune.db"


def package_version() -> str:
    try:
        return version("sglang-cast")
    except PackageNotFoundError:
        return "unknown"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class SetupColumns:
    """The columns of a ``Setup``: what a measurement or a timed step is valid for."""

    device: Mapped[str] = mapped_column(String(200), index=True)
    target_model: Mapped[str] = mapped_column(String(500))
    draft_model: Mapped[str] = mapped_column(String(500))
    dtype: Mapped[str] = mapped_column(String(20))
    threads: Mapped[int] = mapped_column(Integer)  # torch intra-op threads: 1 and 2 threads are different machines
    torch_version: Mapped[str] = mapped_column(String(50))
    package_version: Mapped[str] = mapped_column(String(50))
    # Whose forwards were timed; rows written before this column existed are the native engine's.
    backend: Mapped[str] = mapped_column(String(20), server_default=NATIVE)
    # GPUs one forward spans (SGLang's --tp-size); rows written before this column existed ran on one.
    tp_size: Mapped[int] = mapped_column(Integer, server_default="1")


class Measurement(SetupColumns, Base):
    """One timed grid point: ``f_role(B, c, n)``."""

    __tablename__ = "measurements"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    role: Mapped[str] = mapped_column(String(10))  # "target" | "draft"
    batch_size: Mapped[int] = mapped_column(Integer)
    context_len: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    median_ms: Mapped[float] = mapped_column(Float)
    p10_ms: Mapped[float] = mapped_column(Float)
    p90_ms: Mapped[float] = mapped_column(Float)
    repeats: Mapped[int] = mapped_column(Integer)
    # 1-minute load average while measuring: explains noisy rows on a shared machine.
    load_avg: Mapped[float] = mapped_column(Float)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class StepRecord(SetupColumns, Base):
    """One timed whole engine step of a setup and what the forward tables charge for it."""

    __tablename__ = "step_samples"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(20))  # "profile" (the step design) | "live" (tune's live gate)
    shape: Mapped[str] = mapped_column(String(40))  # "plain" or "k<top_k>-d<depth>-m<tokens>" (what ran)
    batch_size: Mapped[int] = mapped_column(Integer)
    context_len: Mapped[int] = mapped_column(Integer)
    depth: Mapped[int] = mapped_column(Integer)  # draft layers grown (0: a plain step)
    verified: Mapped[int] = mapped_column(Integer)  # draft nodes verified
    tokens: Mapped[int] = mapped_column(Integer)  # committed by the step
    step_ms: Mapped[float] = mapped_column(Float)  # the whole step, device synchronised on both sides
    forward_ms: Mapped[float] = mapped_column(Float)  # what the forward tables charge for it
    load_avg: Mapped[float] = mapped_column(Float)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    def timed(self) -> TimedStep:
        return TimedStep(self.batch_size, self.context_len, self.depth, self.verified, self.tokens, self.step_ms,
                         self.forward_ms)


@dataclass(frozen=True)
class TimedStep:
    """A whole engine step as ``profile`` and the live gate time it."""

    batch_size: int
    context_len: int
    depth: int
    verified: int
    tokens: int  # committed by the step (accepted + one bonus per sequence)
    step_ms: float
    forward_ms: float

    @classmethod
    def of(cls, step) -> TimedStep:
        """The fields of ``step`` that a stored step keeps (an SGLang worker's
        ``LoggedStep`` also carries its verify forward's own timing)."""
        return cls(*(getattr(step, f.name) for f in fields(cls)))

    def sample(self) -> StepSample:
        """The step as the overhead fit reads it: its residual is the ms the forwards do not explain."""
        return StepSample(self.batch_size, self.context_len, self.depth, self.verified,
                          self.step_ms - self.forward_ms)


class TraceRecord(Base):
    """One recorded iteration of a batch (docs/design/cast.md §8)."""

    __tablename__ = "traces"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device: Mapped[str] = mapped_column(String(200))
    target_model: Mapped[str] = mapped_column(String(500), index=True)
    draft_model: Mapped[str] = mapped_column(String(500), index=True)
    dataset: Mapped[str] = mapped_column(String(500))
    run_id: Mapped[str] = mapped_column(String(64), index=True)
    prompt_ids: Mapped[str] = mapped_column(Text)  # JSON list of the prompts in the batch
    iteration: Mapped[int] = mapped_column(Integer)
    batch_size: Mapped[int] = mapped_column(Integer)
    top_k: Mapped[int] = mapped_column(Integer)
    max_depth: Mapped[int] = mapped_column(Integer)
    data: Mapped[str] = mapped_column(Text)  # TraceIteration.to_dict() as JSON
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The TraceIteration format of ``data``; rows written before this column existed are format 1.
    trace_format: Mapped[int] = mapped_column(Integer, server_default="1")


class PublishedProfile(Base):
    __tablename__ = "published_profiles"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(String(1000))
    label: Mapped[str] = mapped_column(String(100))
    version: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(20))
    study: Mapped[str | None] = mapped_column(String(200), nullable=True)
    trial: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # JSON list of the live gate's per-bucket summaries (predicted vs live, CAST and plain); null when skipped.
    live_confirmation: Mapped[str | None] = mapped_column(Text, nullable=True)


@dataclass(frozen=True)
class Setup:
    """What a measurement is valid for: the same backend (whose forwards), device,
    model pair, dtype, thread count, software versions and tensor-parallel size
    (a profile serves only the parallel layout its costs were measured for).  A
    rerun with an equal setup skips points already stored."""

    device: str
    target_model: str
    draft_model: str
    dtype: str
    threads: int
    torch_version: str
    package_version: str
    backend: str = NATIVE
    tp_size: int = 1  # GPUs one forward spans; the native engine runs on one

    @classmethod
    def current(cls, device: str, target_model: str, draft_model: str, dtype: str, backend: str = NATIVE,
                tp_size: int = 1) -> Setup:
        return cls(device, target_model, draft_model, dtype, torch.get_num_threads(), str(torch.__version__),
                   package_version(), backend, tp_size)

    def columns(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def nearest_setup_hint(stored: list[Setup], wanted: list[Setup]) -> str:
    """Why none of ``wanted`` has measurements, for an error message: the fields in which
    the nearest ``stored`` setup differs (fewest differing fields; the newest on a tie, as
    ``Store.setups`` orders them).  The common case is a new or re-trained draft head:
    tables are keyed by the head's digest, so yesterday's profile does not count for it."""
    def changed(stored_setup: Setup, asked: Setup) -> list[str]:
        have, want = stored_setup.columns(), asked.columns()
        return [f"{name} {have[name]!r} (asked: {want[name]!r})" for name in want if have[name] != want[name]]

    pairs = [(changed(s, w), s, w) for s in stored for w in wanted]
    if not pairs:
        return "the database holds no measurements yet"
    fields, nearest, asked = min(pairs, key=lambda pair: len(pair[0]))
    hint = "the nearest measured setup differs in " + "; ".join(fields)
    same_head_path = nearest.draft_model.partition("#")[0] == asked.draft_model.partition("#")[0]
    if nearest.draft_model != asked.draft_model and same_head_path:
        hint += " (the draft head changed since it was profiled: tables are kept per head digest)"
    return hint


@dataclass(frozen=True)
class StoredTrace:
    batch_size: int
    run_id: str
    prompt_ids: tuple[str, ...]
    iteration: int
    trace: TraceIteration


def _explain(err: DatabaseError, path: Path, timeout_s: float) -> AutotuneError:
    text = str(err.orig) if getattr(err, "orig", None) is not None else str(err)
    lowered = text.lower()
    if "locked" in lowered or "busy" in lowered:
        reason = (f"database {path} is locked by another process (waited {timeout_s:g} s); "
                  "retry later or raise --db-timeout")
    elif "not a database" in lowered or "malformed" in lowered:
        reason = (f"{path} is not a valid SQLite database (corrupted or another kind of file); move it away or "
                  "pass another --db")
    elif "readonly" in lowered or "read-only" in lowered:
        reason = f"database {path} is read-only; pass a writable --db"
    elif "unable to open" in lowered:
        reason = f"cannot open database {path}: the path is not writable; pass a writable --db"
    else:
        reason = f"database {path}: {text}"
    return AutotuneError(reason, RUNTIME)


def _check_writable(path: Path) -> None:
    """Fail early, with the path in the message, where SQLite would only say
    'unable to open database file'."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise AutotuneError(f"cannot create the directory of --db {path}: {err.strerror}", RUNTIME) from None
    if path.exists() and not path.is_file():
        raise AutotuneError(f"--db {path} is not a regular file", RUNTIME)
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise AutotuneError(f"database {path} is read-only; pass a writable --db", RUNTIME)
    try:  # WAL needs to create -wal/-shm files next to the database
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as err:
        raise AutotuneError(f"cannot write in the directory of --db {path}: {err.strerror}", RUNTIME) from None


class Store:
    """Open (creating if needed) the database at ``path``."""

    def __init__(self, path: str | Path, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.path = Path(path).expanduser().resolve()
        self.timeout_s = timeout_s
        _check_writable(self.path)
        self.engine = create_engine(f"sqlite:///{self.path}", connect_args={"timeout": timeout_s})
        event.listen(self.engine, "connect", self._on_connect)
        event.listen(self.engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        with self._errors():
            Base.metadata.create_all(self.engine)
            # A database created before traces were versioned: its traces are format 1.
            self._add_column("traces", "trace_format", "INTEGER NOT NULL DEFAULT 1")
            # A database created before backends were recorded: its measurements timed the native engine.
            self._add_column("measurements", "backend", f"VARCHAR(20) NOT NULL DEFAULT '{NATIVE}'")
            # A database created before parallel layouts were recorded: every forward ran on one device.
            for table in ("measurements", "step_samples"):
                self._add_column(table, "tp_size", "INTEGER NOT NULL DEFAULT 1")
            # A database created before the live gate: its publications carry no live numbers.
            self._add_column("published_profiles", "live_confirmation", "TEXT")
            # (``step_samples`` itself is new: ``create_all`` adds it to an older file.)

    def _add_column(self, table: str, column: str, declaration: str) -> None:
        """Add ``column`` to a ``table`` created by an older version; the default
        in ``declaration`` says what the existing rows were."""
        with self.engine.begin() as conn:
            columns = {row[1] for row in conn.exec_driver_sql(f"PRAGMA table_info({table})")}
            if column not in columns:
                conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")

    @property
    def url(self) -> str:
        """SQLAlchemy URL of this file (what Optuna's RDBStorage is given)."""
        return f"sqlite:///{self.path}"

    def _on_connect(self, dbapi_connection, _record) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN IMMEDIATE instead of pysqlite's deferred BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except DatabaseError as err:
            raise _explain(err, self.path, self.timeout_s) from None

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction that commits on success; SQLite errors become ``AutotuneError``."""
        with self._errors(), Session(self.engine, expire_on_commit=False) as session, session.begin():
            yield session

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------ measurements
    def add_measurement(self, setup: Setup, role: str, batch_size: int, context_len: int, n: int,
                        timing: Timing, load_avg: float) -> None:
        """Store one grid point in its own transaction (what makes ``profile`` resumable)."""
        with self.session() as session:
            session.add(Measurement(**setup.columns(), role=role, batch_size=batch_size, context_len=context_len,
                                    n=n, median_ms=timing.median_ms, p10_ms=timing.p10_ms, p90_ms=timing.p90_ms,
                                    repeats=timing.repeats, load_avg=load_avg, created=utcnow()))

    def copy_measurements(self, source: Setup, setup: Setup, role: str) -> int:
        """Give ``setup`` the newest ``role`` rows of ``source`` where its own row of
        that point is missing or older, each keeping when it was measured; returns how
        many were copied (0 on a rerun).  For a forward that nothing differing between
        the two setups touches: one draft head format beside several target formats."""
        own = {(m.batch_size, m.context_len, m.n): m.created for m in self.measurements(setup) if m.role == role}

        def newer(m: Measurement) -> bool:
            mine = own.get((m.batch_size, m.context_len, m.n))
            return mine is None or mine < m.created

        fresh = [m for m in self.measurements(source) if m.role == role and newer(m)]
        with self.session() as session:
            session.add_all(Measurement(**setup.columns(), role=role, batch_size=m.batch_size,
                                        context_len=m.context_len, n=m.n, median_ms=m.median_ms, p10_ms=m.p10_ms,
                                        p90_ms=m.p90_ms, repeats=m.repeats, load_avg=m.load_avg, created=m.created)
                            for m in fresh)
        return len(fresh)

    def setup_conditions(self, setup: Setup, table: type[Base] = Measurement):
        """Rows of ``table`` (``Measurement`` or ``StepRecord``) belonging to ``setup``."""
        return [getattr(table, name) == value for name, value in setup.columns().items()]

    def measurements(self, setup: Setup, newer_than: datetime | None = None) -> list[Measurement]:
        """The newest row per grid point of ``setup`` (optionally only rows newer than a date)."""
        conditions = self.setup_conditions(setup)
        if newer_than is not None:
            conditions.append(Measurement.created >= newer_than)
        with self.session() as session:
            rows = session.scalars(select(Measurement).where(*conditions).order_by(Measurement.created)).all()
        newest: dict[tuple[str, int, int, int], Measurement] = {}
        for row in rows:
            newest[(row.role, row.batch_size, row.context_len, row.n)] = row
        return list(newest.values())

    def setups(self) -> list[Setup]:
        """Every setup with measurements, most recently measured first."""
        columns = [getattr(Measurement, name) for name in Setup.__dataclass_fields__]
        with self.session() as session:
            rows = session.execute(select(*columns, func.max(Measurement.created).label("last"))
                                   .group_by(*columns).order_by(func.max(Measurement.created).desc())).all()
        return [Setup(*row[:-1]) for row in rows]

    # ------------------------------------------------------------ step samples
    def add_steps(self, setup: Setup, source: str, shape: str, steps: list[TimedStep], load_avg: float) -> None:
        """Store one run's timed steps in one transaction (a ``profile`` cell is all or nothing)."""
        now = utcnow()
        with self.session() as session:
            session.add_all(StepRecord(**setup.columns(), source=source, shape=shape, batch_size=s.batch_size,
                                       context_len=s.context_len, depth=s.depth, verified=s.verified,
                                       tokens=s.tokens, step_ms=s.step_ms, forward_ms=s.forward_ms,
                                       load_avg=load_avg, created=now)
                            for s in steps)

    def step_records(self, setup: Setup, source: str | None = None) -> list[StepRecord]:
        """Every stored step of ``setup`` (of one ``source`` if given), oldest first."""
        conditions = self.setup_conditions(setup, StepRecord)
        if source is not None:
            conditions.append(StepRecord.source == source)
        with self.session() as session:
            return list(session.scalars(select(StepRecord).where(*conditions).order_by(StepRecord.id)).all())

    def drop_steps_older_than_forwards(self, setup: Setup) -> dict[str, int]:
        """Delete ``setup``'s steps stored before its newest forward measurement, per
        source.  A step keeps what the forward tables of its day charged for it
        (``forward_ms``) and its residual is the host work fitted from it, so once a
        point of those tables is added or re-measured the residual describes other
        tables."""
        with self.session() as session:
            newest = session.scalar(select(func.max(Measurement.created)).where(*self.setup_conditions(setup)))
            if newest is None:
                return {}
            stale = (*self.setup_conditions(setup, StepRecord), StepRecord.created < newest)
            counts = dict(session.execute(select(StepRecord.source, func.count()).where(*stale)
                                          .group_by(StepRecord.source)).all())
            session.execute(delete(StepRecord).where(*stale))
        return {str(source): int(count) for source, count in counts.items()}

    def step_cells(self, setup: Setup, source: str) -> set[tuple[int, str]]:
        """``(batch size, shape)`` runs already stored for ``setup`` (what a resumed ``profile`` skips)."""
        with self.session() as session:
            rows = session.execute(select(StepRecord.batch_size, StepRecord.shape)
                                   .where(*self.setup_conditions(setup, StepRecord), StepRecord.source == source)
                                   .distinct()).all()
        return {(int(b), str(shape)) for b, shape in rows}

    # ------------------------------------------------------------------ traces
    def add_traces(self, device: str, target_model: str, draft_model: str, dataset: str, run_id: str,
                   items: list[tuple[int, tuple[str, ...], TraceIteration]]) -> None:
        """Store ``(iteration index, prompt ids, trace)`` items in one transaction."""
        now = utcnow()
        with self.session() as session:
            for index, prompt_ids, trace in items:
                session.add(TraceRecord(
                    device=device, target_model=target_model, draft_model=draft_model, dataset=dataset,
                    run_id=run_id, prompt_ids=json.dumps(list(prompt_ids)), iteration=index,
                    batch_size=trace.batch_size, top_k=trace.top_k, max_depth=trace.draft_depth,
                    data=json.dumps(trace.to_dict()), created=now, trace_format=TRACE_FORMAT))

    def _trace_filter(self, target_model: str, draft_model: str, dataset: str | None, current: bool = True):
        same_format = TraceRecord.trace_format == TRACE_FORMAT
        conditions = [TraceRecord.target_model == target_model, TraceRecord.draft_model == draft_model,
                      same_format if current else ~same_format]
        if dataset is not None:
            conditions.append(TraceRecord.dataset == dataset)
        return conditions

    def trace_count(self, target_model: str, draft_model: str, dataset: str | None = None,
                    current: bool = True) -> int:
        """Stored traces of the current format (``current=False``: of older formats)."""
        with self.session() as session:
            return session.scalar(select(func.count(TraceRecord.id))
                                  .where(*self._trace_filter(target_model, draft_model, dataset, current)))

    def traces(self, target_model: str, draft_model: str, dataset: str | None = None) -> list[StoredTrace]:
        """The traces of the current format.  Older ones are never mixed in; when they
        are all there is, the error says to record again."""
        conditions = self._trace_filter(target_model, draft_model, dataset)
        with self.session() as session:
            rows = session.scalars(select(TraceRecord).where(*conditions).order_by(TraceRecord.id)).all()
        if not rows:
            stale = self.trace_count(target_model, draft_model, dataset, current=False)
            if stale:
                raise AutotuneError(f"{self.path} holds {stale} trace(s) for {target_model} + {draft_model} in an "
                                    f"older trace format (before format {TRACE_FORMAT}, sglang_cast.cast.trace explains "
                                    "what changed); they cannot be replayed: record new ones with `cast-autotune "
                                    "collect`")
        return [StoredTrace(r.batch_size, r.run_id, tuple(json.loads(r.prompt_ids)), r.iteration,
                            TraceIteration.from_dict(json.loads(r.data))) for r in rows]

    # --------------------------------------------------------------- profiles
    def record_publication(self, path: Path, label: str, version_hash: str, source: str,
                           study: str | None, trial: int | None, live: list[dict] | None = None) -> None:
        """``live``: the live gate's per-bucket summaries (``show`` prints them)."""
        with self.session() as session:
            session.add(PublishedProfile(path=str(path), label=label, version=version_hash, source=source,
                                         study=study, trial=trial, created=utcnow(),
                                         live_confirmation=None if live is None else json.dumps(live)))

    def publications(self) -> list[PublishedProfile]:
        with self.session() as session:
            return list(session.scalars(select(PublishedProfile).order_by(PublishedProfile.id)).all())
