"""Exactly-once writes from Spark Structured Streaming to PostgreSQL: a ``foreachBatch`` sink.

Spark's JDBC writer is at-least-once: a micro-batch that Spark replays after a driver restart
is inserted again. :class:`PostgresSink` commits each micro-batch exactly once::

    query = (
        counts.writeStream
        .foreachBatch(PostgresSink("category_counts", dsn=dsn, sink_id="counts-v1",
                                   mode="upsert", key_columns=["category"]))
        .option("checkpointLocation", "/checkpoints/counts-v1")
        .start()
    )

How it works, per micro-batch ``b``:

1. If the sink's batch table already holds ``b``, the batch is a replay and nothing is written.
2. Each Spark task copies its partition into a staging table (``COPY``, unlogged, every value
   as text), tagged with the batch, its partition, its task attempt and the row's position,
   and commits. Tasks that fail, and zombie attempts that finish late, leave rows that nobody
   reads.
3. The driver, in one transaction: inserts ``b`` into the batch table (its primary key makes
   a concurrent or repeated commit of ``b`` fail), moves the rows of exactly the attempts that
   Spark reported as successful into the target table (each value cast to its column's type
   there, as ``COPY`` would parse it), and deletes the batch's staging rows.

So the batch becomes visible at once, whole, and exactly once, however Spark splits or retries
it. The price is writing the rows twice (staging, then target).

**Bad rows.** Values meet their column types and the table's constraints in step 3 only, in
one statement. When PostgreSQL refuses it, the driver finds the rows it refuses by bisection
under savepoints (:func:`fluvial.sinks.store.write_or_bisect`) and writes the others. With
``on_bad_row="fail"`` (the default) the batch then rolls back whole and the query stops with
an error that names the row and its problem. With ``on_bad_row="dead_letter"`` the bad rows go
into an outbox table in the same transaction, and from there to the dead-letter topic,
exactly once (:mod:`fluvial.spark.postgres_dead_letters`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from fluvial.errors import ConfigError
from fluvial.spark.postgres_dead_letters import (
    DeadLetter,
    DeadLetterOutbox,
    check_bad_row_options,
)
from fluvial.spark.sink import SinkError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("fluvial.spark.postgres")

_SINK_ID = re.compile(r"^[A-Za-z0-9._-]+$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TYPES = {
    "string": "text",
    "bigint": "bigint",
    "int": "integer",
    "smallint": "smallint",
    "tinyint": "smallint",
    "double": "double precision",
    "float": "real",
    "boolean": "boolean",
    "binary": "bytea",
    "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp",
    "date": "date",
}
#: The staging table's own columns, after the batch's (all text).
_STAGE_COLUMNS = (
    ("fluvial_batch", "int8"),
    ("fluvial_partition", "int4"),
    ("fluvial_attempt", "int8"),
    ("fluvial_row", "int8"),
    # Set by the task for a row it cannot stage as it is (text with a NUL character).
    ("fluvial_error", "text"),
)
_NUL = "\x00"


@dataclass(frozen=True)
class PostgresBatchResult:
    """What one ``foreachBatch`` call did."""

    batch_id: int
    rows_written: int
    #: True when an earlier attempt had already committed this batch.
    skipped: bool
    #: Bad rows of the batch set aside for the dead-letter topic.
    dead_letters: int = 0


@dataclass(frozen=True)
class _TaskSpec:
    """What a Spark task needs to stage its partition; small and picklable."""

    dsn: str
    sink_id: str
    stage: tuple[str, ...]
    columns: tuple[str, ...]
    utc_columns: tuple[int, ...]  # positions of timestamp (with time zone) columns
    text_columns: tuple[int, ...]  # positions of string columns
    timeout_ms: int


@dataclass(frozen=True)
class _BadRow:
    values: tuple[str | None, ...]  # as staged: the text PostgreSQL was given
    error: str


class PostgresSink:
    """An exactly-once PostgreSQL sink for ``DataFrame.writeStream.foreachBatch``.

    The batch's columns become the table's columns (created with matching types if the table
    does not exist). ``mode="upsert"`` replaces rows by ``key_columns`` (the table needs a
    primary key or unique index on them, which the sink creates with the table); a batch must
    then hold one row per key. ``sink_id`` must stay the same for the life of the query's
    checkpoint: the batch ids it records belong to that checkpoint.

    A row PostgreSQL refuses (a value that does not fit its column's type, a NOT NULL, CHECK,
    unique or foreign-key constraint) is never skipped silently. ``on_bad_row="fail"`` (the
    default) rolls the whole batch back and stops the query with an error naming the row and
    its problem. ``on_bad_row="dead_letter"`` writes the batch's other rows and sends each bad
    row to ``dead_letter_topic`` on the Kafka cluster at ``bootstrap_servers`` (with
    ``client_config``: security settings), exactly once, as a JSON object with the headers
    ``fluvial.sink.error`` (the reason), ``fluvial.spark.sink`` and ``fluvial.spark.batch``.
    """

    def __init__(
        self,
        table: str,
        *,
        dsn: str,
        sink_id: str,
        mode: Literal["append", "upsert"] = "append",
        key_columns: Sequence[str] | None = None,
        create_table: bool = True,
        transaction_timeout_ms: int = 300_000,
        batches_table: str = "fluvial_spark_batches",
        on_bad_row: Literal["fail", "dead_letter"] = "fail",
        dead_letter_topic: str | None = None,
        bootstrap_servers: str | None = None,
        client_config: Mapping[str, Any] | None = None,
        dead_letters_table: str = "fluvial_spark_dead_letters",
    ) -> None:
        from fluvial.sinks.store import split_table_name

        self.table_parts = tuple(split_table_name(table))
        self.batches_parts = tuple(split_table_name(batches_table))
        self.table = table
        if not dsn:
            raise ConfigError("PostgresSink needs a dsn (passwords belong in PGPASSWORD)")
        self.dsn = dsn
        if not sink_id or not _SINK_ID.match(sink_id):
            raise ConfigError(
                f"sink_id {sink_id!r} is invalid: use letters, digits, '.', '_' and '-'"
            )
        self.sink_id = sink_id
        if mode not in ("append", "upsert"):
            raise ConfigError(f"mode={mode!r} is unknown: use 'append' or 'upsert'")
        if mode == "upsert" and not key_columns:
            raise ConfigError("mode='upsert' needs key_columns: the columns that identify a row")
        if mode == "append" and key_columns:
            raise ConfigError("key_columns apply to mode='upsert' only")
        self.mode = mode
        self.key_columns = list(key_columns or [])
        self.create_table = create_table
        if transaction_timeout_ms < 1000:
            raise ConfigError("transaction_timeout_ms must be at least 1000")
        self.timeout_ms = transaction_timeout_ms
        check_bad_row_options(on_bad_row, dead_letter_topic, bootstrap_servers, client_config)
        self.on_bad_row = on_bad_row
        self.dead_letters_parts = tuple(split_table_name(dead_letters_table))
        self.outbox: DeadLetterOutbox | None = None
        if on_bad_row == "dead_letter":
            assert dead_letter_topic is not None and bootstrap_servers is not None
            self.outbox = DeadLetterOutbox(
                sink_id=sink_id, topic=dead_letter_topic, bootstrap_servers=bootstrap_servers,
                client_config=client_config or {}, table=self.dead_letters_parts,
                transaction_timeout_ms=min(transaction_timeout_ms, 900_000),
            )  # fmt: skip
            self.outbox.check()  # before the query starts: the cluster answers, the topic exists
        # One staging table per sink, named after it (hashed: identifiers stop at 63 bytes).
        digest = hashlib.sha1(sink_id.encode()).hexdigest()[:10]
        schema = self.table_parts[:-1]
        self.stage_parts = (*schema, f"fluvial_stage_{digest}")
        # The target's type of each batch column, as (schema, type name): the cast of step 3.
        self._casts: dict[str, tuple[str, str]] = {}
        #: The outcome of the last batch, for logs and tests.
        self.last_result: PostgresBatchResult | None = None

    # -- schema ------------------------------------------------------------------------------

    def columns(self, schema: StructType) -> list[tuple[str, str]]:
        """(name, PostgreSQL type) of every column; raises on what the sink cannot write."""
        reserved = {name for name, _ in _STAGE_COLUMNS}
        out = []
        for f in schema.fields:
            if not _NAME.match(f.name):
                raise ConfigError(
                    f"column {f.name!r} is not a plain name (letters, digits, _): alias it"
                )
            if f.name in reserved:
                raise ConfigError(f"column {f.name!r} is a name the sink uses itself: alias it")
            out.append((f.name, _pg_type(f.name, f.dataType)))
        missing = [k for k in self.key_columns if k not in {n for n, _ in out}]
        if missing:
            raise ConfigError(f"key_columns {missing} are not columns of the batch")
        return out

    # -- one micro-batch ---------------------------------------------------------------------

    def __call__(self, batch_df: DataFrame, batch_id: int) -> PostgresBatchResult:
        import psycopg
        from pyspark.sql.types import StringType, TimestampType

        columns = self.columns(batch_df.schema)
        with psycopg.connect(self.dsn, autocommit=True, application_name=self._app_name()) as conn:
            self._prepare(conn, columns)
            # Dead letters of a committed batch that a dead driver did not get to send.
            self._relay(conn)
            if self._plan(conn, batch_id) == "skip":
                log.info("sink %s: batch %d was already committed; skipped", self.sink_id, batch_id)
                self.last_result = PostgresBatchResult(batch_id, 0, True)
                return self.last_result
        fields = batch_df.schema.fields
        names = tuple(n for n, _ in columns)
        utc = tuple(i for i, f in enumerate(fields) if isinstance(f.dataType, TimestampType))
        text = tuple(i for i, f in enumerate(fields) if isinstance(f.dataType, StringType))
        spec = _TaskSpec(self.dsn, self.sink_id, self.stage_parts, names, utc, text,
                         self.timeout_ms)  # fmt: skip

        def stage(index: int, rows: Iterable[Any]) -> Iterator[tuple[int, int, int, int]]:
            return _stage_partition(spec, batch_id, index, rows)

        staged = batch_df.rdd.mapPartitionsWithIndex(stage).collect()
        kinds = tuple(_json_kind(f.dataType) for f in fields)
        outcome = self._commit(batch_id, names, kinds, staged)
        if outcome is None:  # another driver committed the batch first
            self.last_result = PostgresBatchResult(batch_id, 0, True)
        else:
            self.last_result = PostgresBatchResult(batch_id, outcome[0], False, outcome[1])
        return self.last_result

    def _app_name(self) -> str:
        return f"fluvial-spark-sink:{self.sink_id}"[:63]

    def _prepare(self, conn: Any, columns: list[tuple[str, str]]) -> None:
        from psycopg import sql

        from fluvial.sinks.store import _create_racing

        target = sql.Identifier(*self.table_parts)
        batches = sql.Identifier(*self.batches_parts)
        _create_racing(
            conn,
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, batch_id bigint NOT NULL, "
                "rows bigint NOT NULL, dead_letters bigint NOT NULL DEFAULT 0, "
                "committed_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (sink_id, batch_id))"
            ).format(batches),
        )
        if "dead_letters" not in {name for name, _ in _table_columns(conn, self.batches_parts)}:
            # A batch table from before bad rows had a count.
            conn.execute(
                sql.SQL(
                    "ALTER TABLE {} ADD COLUMN IF NOT EXISTS dead_letters bigint NOT NULL DEFAULT 0"
                ).format(batches)
            )
        if self.create_table:
            definitions = [
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in columns
            ]
            if self.key_columns:
                definitions.append(
                    sql.SQL("PRIMARY KEY ({})").format(
                        sql.SQL(", ").join(sql.Identifier(k) for k in self.key_columns)
                    )
                )
            _create_racing(
                conn,
                sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                    target, sql.SQL(", ").join(definitions)
                ),
            )
        found = dict(_table_columns(conn, self.table_parts))
        if not found:
            raise ConfigError(
                f"table {self.table!r} does not exist: create it, or let the sink create it "
                "(create_table=True, the default)"
            )
        missing = [n for n, _ in columns if n not in found]
        if missing:
            raise ConfigError(
                f"table {self.table!r} cannot take the batch's columns: it lacks {missing}. Add "
                "them (ALTER TABLE ... ADD COLUMN), or select only the table's columns"
            )
        self._casts = {n: found[n] for n, _ in columns}
        # Every value is staged as text and meets its column's type in the driver's
        # transaction, where a bad one can be found and set aside. A staging table of another
        # shape (the batch's columns changed) holds nothing a later batch reads: recreate it.
        stage = sql.Identifier(*self.stage_parts)
        expected = [(n, ("pg_catalog", "text")) for n, _ in columns]
        expected += [(n, ("pg_catalog", t)) for n, t in _STAGE_COLUMNS]
        present = _table_columns(conn, self.stage_parts)
        if present and present != expected:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage))
        if present != expected:
            # Unlogged: staged rows are copied into the target within the batch; a server
            # crash in between loses only rows that the batch's retry stages again.
            definitions = [sql.SQL("{} text").format(sql.Identifier(n)) for n, _ in columns]
            definitions += [
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in _STAGE_COLUMNS
            ]
            _create_racing(
                conn,
                sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({})").format(
                    stage, sql.SQL(", ").join(definitions)
                ),
            )
        if self.outbox is not None:
            self.outbox.create_table(conn)

    def _relay(self, conn: Any) -> None:
        if self.outbox is not None:
            self.outbox.relay(conn)
            return
        from psycopg import sql

        if _table_columns(conn, self.dead_letters_parts):
            [(waiting,)] = conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE sink_id = %s").format(
                    sql.Identifier(*self.dead_letters_parts)
                ),
                [self.sink_id],
            ).fetchall()
            if waiting:
                log.warning(
                    "sink %s: %d dead letter(s) of committed batches wait in %s, and "
                    "on_bad_row='fail' does not send them: run with on_bad_row='dead_letter' to "
                    "send them", self.sink_id, waiting, ".".join(self.dead_letters_parts),
                )  # fmt: skip

    def _plan(self, conn: Any, batch_id: int) -> str:
        from psycopg import sql

        [(last,)] = conn.execute(
            sql.SQL("SELECT max(batch_id) FROM {} WHERE sink_id = %s").format(
                sql.Identifier(*self.batches_parts)
            ),
            [self.sink_id],
        ).fetchall()
        if last is not None and last > batch_id:
            raise SinkError(
                f"sink {self.sink_id!r} has already committed batch {last} but the query is "
                f"writing batch {batch_id}: this checkpoint is older than the sink's batches. A "
                "new checkpoint needs a new sink_id"
            )
        return "skip" if last == batch_id else "write"

    def _commit(
        self,
        batch_id: int,
        names: tuple[str, ...],
        kinds: tuple[str, ...],
        staged: list[tuple[int, int, int, int]],
    ) -> tuple[int, int] | None:
        """Move the successful attempts' rows into the target with the batch's record, in one
        transaction. Returns (rows written, dead letters), or None when another driver
        committed the batch."""
        import psycopg
        from psycopg import sql

        expected = sum(count for _p, _a, count, _r in staged)
        batches = sql.Identifier(*self.batches_parts)
        options = f"-c statement_timeout={self.timeout_ms}"
        with psycopg.connect(
            self.dsn, autocommit=True, application_name=self._app_name(), options=options
        ) as conn:
            try:
                with conn.transaction():
                    # Deferred constraints are checked at each statement, so that a violation is
                    # found with its row rather than at COMMIT.
                    conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
                    # First: a second commit of this batch (another driver, a replay racing
                    # this one) waits here for ours, then fails on the primary key.
                    conn.execute(
                        sql.SQL("INSERT INTO {} (sink_id, batch_id, rows) VALUES (%s, %s, %s)")
                        .format(batches),
                        [self.sink_id, batch_id, expected],
                    )  # fmt: skip
                    written, bad = _BatchMove(self, conn, batch_id, names, staged).run()
                    if self.mode == "append" and written + len(bad) != expected:
                        raise SinkError(
                            f"sink {self.sink_id!r}: batch {batch_id} staged {expected} rows "
                            f"but {written + len(bad)} reached the target or the dead letters; "
                            "nothing is committed"
                        )
                    if bad:
                        if self.outbox is None:
                            raise self._bad_row_error(batch_id, names, bad)
                        self.outbox.add(
                            conn, batch_id, [self._letter(names, kinds, b) for b in bad]
                        )
                        conn.execute(
                            sql.SQL(
                                "UPDATE {} SET rows = %s, dead_letters = %s "
                                "WHERE sink_id = %s AND batch_id = %s"
                            ).format(batches),
                            [expected - len(bad), len(bad), self.sink_id, batch_id],
                        )
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE fluvial_batch <= %s").format(
                            sql.Identifier(*self.stage_parts)
                        ),
                        [batch_id],
                    )
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.table_name == self.batches_parts[-1]:
                    log.info("sink %s: batch %d was committed by another driver", self.sink_id,
                             batch_id)  # fmt: skip
                    return None
                raise
            except psycopg.errors.CardinalityViolation as exc:
                raise SinkError(
                    f"sink {self.sink_id!r}: batch {batch_id} holds several rows for one key "
                    f"({', '.join(self.key_columns)}); an upsert needs one row per key and "
                    "batch: aggregate first (groupBy(...).agg(max_by(...)))"
                ) from exc
            log.info("sink %s: batch %d committed %d rows, %d dead letter(s)", self.sink_id,
                     batch_id, expected - len(bad), len(bad))  # fmt: skip
            if bad:
                assert self.outbox is not None
                self.outbox.relay(conn)
        return expected - len(bad), len(bad)

    def _bad_row_error(
        self, batch_id: int, names: tuple[str, ...], bad: list[_BadRow]
    ) -> SinkError:
        first = bad[0]
        row = json.dumps(dict(zip(names, first.values, strict=True)), ensure_ascii=False)
        if len(row) > 300:
            row = row[:300] + "…"
        more = f" ({len(bad) - 1} more bad row(s) in this batch)" if len(bad) > 1 else ""
        return SinkError(
            f"sink {self.sink_id!r}: a row of batch {batch_id} cannot be written to "
            f"{self.table!r}: {first.error}. The row: {row}{more}. Nothing of the batch is "
            "committed. Fix the data or the table, or set on_bad_row='dead_letter' (with "
            "dead_letter_topic) to set such rows aside; then restart the query"
        )

    def _letter(self, names: tuple[str, ...], kinds: tuple[str, ...], bad: _BadRow) -> DeadLetter:
        row = {n: _json_value(k, v) for n, k, v in zip(names, kinds, bad.values, strict=True)}
        key = None
        if self.mode == "upsert":
            key = _json_bytes({k: row[k] for k in self.key_columns})
        return DeadLetter(key, _json_bytes(row), bad.error)


class _BatchMove:
    """Step 3's rows: the successful attempts' staged rows into the target, except the ones
    PostgreSQL refuses, which it returns with their reasons."""

    def __init__(
        self,
        sink: PostgresSink,
        conn: Any,
        batch_id: int,
        names: tuple[str, ...],
        staged: list[tuple[int, int, int, int]],
    ) -> None:
        from psycopg import sql

        self.sink, self.conn, self.names = sink, conn, names
        self.stage = sql.Identifier(*sink.stage_parts)
        self.attempts = sql.SQL(
            "fluvial_batch = %s AND (fluvial_partition, fluvial_attempt) IN "
            "(SELECT * FROM unnest(%s::int[], %s::bigint[]))"
        )
        self.args = [batch_id, [s[0] for s in staged], [s[1] for s in staged]]
        self.refused_by_tasks = sum(s[3] for s in staged)
        self.cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)

    def run(self) -> tuple[int, list[_BadRow]]:
        import psycopg
        from psycopg import sql

        from fluvial.sinks.store import write_or_bisect

        bad = self._refused_by_tasks()
        good = self.attempts + sql.SQL(" AND fluvial_error IS NULL")
        try:
            with self.conn.transaction():
                cur = self.conn.execute(self._insert(self.stage, good), self.args)
            return cur.rowcount, bad
        except (psycopg.DataError, psycopg.IntegrityError):
            pass
        # Some rows are refused. Number the batch's rows, then find those by bisection.
        self.conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE fluvial_rows ON COMMIT DROP AS "
                "SELECT row_number() OVER () AS fluvial_n, {} FROM {} WHERE "
            ).format(self.cols, self.stage)
            + good,
            self.args,
        )
        self.conn.execute("CREATE INDEX ON fluvial_rows (fluvial_n)")
        self.conn.execute("ANALYZE fluvial_rows")
        [(count,)] = self.conn.execute("SELECT count(*) FROM fluvial_rows").fetchall()
        written = 0
        rows = sql.Identifier("fluvial_rows")
        between = sql.SQL("fluvial_n >= %s AND fluvial_n < %s")

        def write(chunk: Sequence[int]) -> None:
            nonlocal written
            assert isinstance(chunk, range)
            cur = self.conn.execute(self._insert(rows, between), [chunk.start, chunk.stop])
            written += cur.rowcount

        for n, exc in write_or_bisect(self.conn, range(1, count + 1), write):
            [values] = self.conn.execute(
                sql.SQL("SELECT {} FROM fluvial_rows WHERE fluvial_n = %s").format(self.cols),
                [n],
            ).fetchall()
            bad.append(_BadRow(tuple(values), self._reason(n, exc)))
        return written, bad

    def _refused_by_tasks(self) -> list[_BadRow]:
        from psycopg import sql

        if not self.refused_by_tasks:
            return []
        rows = self.conn.execute(
            sql.SQL("SELECT {}, fluvial_error FROM {} WHERE ").format(self.cols, self.stage)
            + self.attempts
            + sql.SQL(" AND fluvial_error IS NOT NULL ORDER BY fluvial_partition, fluvial_row"),
            self.args,
        ).fetchall()
        return [_BadRow(tuple(r[:-1]), r[-1]) for r in rows]

    def _insert(self, source: Any, where: Any) -> Any:
        from psycopg import sql

        sink = self.sink
        casts = sql.SQL(", ").join(
            sql.SQL("CAST({} AS {})").format(sql.Identifier(n), sql.Identifier(*sink._casts[n]))
            for n in self.names
        )
        statement = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} WHERE ").format(
            sql.Identifier(*sink.table_parts), self.cols, casts, source
        )
        statement += where
        if sink.mode == "upsert":
            keys = set(sink.key_columns)
            updates = [
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n))
                for n in self.names
                if n not in keys
            ]
            statement += sql.SQL(" ON CONFLICT ({}) DO ").format(
                sql.SQL(", ").join(sql.Identifier(k) for k in sink.key_columns)
            )
            statement += (
                sql.SQL("UPDATE SET ") + sql.SQL(", ").join(updates)
                if updates
                else sql.SQL("NOTHING")
            )
        return statement

    def _reason(self, n: int, exc: BaseException) -> str:
        """PostgreSQL's reason; for a value that does not fit its type, with its column."""
        import psycopg
        from psycopg import sql

        from fluvial.sinks.store import rejection

        if isinstance(exc, psycopg.DataError):
            for name in self.names:
                try:
                    with self.conn.transaction():
                        self.conn.execute(
                            sql.SQL("SELECT CAST({} AS {}) FROM fluvial_rows WHERE fluvial_n = %s")
                            .format(sql.Identifier(name), sql.Identifier(*self.sink._casts[name])),
                            [n],
                        )  # fmt: skip
                except psycopg.DataError as column_exc:
                    return rejection(column_exc, name)
        return rejection(exc)


def _table_columns(conn: Any, parts: tuple[str, ...]) -> list[tuple[str, tuple[str, str]]]:
    """(name, (type schema, type name)) of a table's columns in order; [] when it is absent.

    The type's own name, never ``format_type``: a cast to ``character`` or ``bit`` means a
    length of 1 and truncates, where the bare type name keeps the column's length check."""
    from psycopg import sql

    rows = conn.execute(
        "SELECT a.attname, n.nspname, t.typname FROM pg_attribute a "
        "JOIN pg_type t ON t.oid = a.atttypid JOIN pg_namespace n ON n.oid = t.typnamespace "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum",
        [sql.Identifier(*parts).as_string(conn)],
    ).fetchall()
    return [(name, (schema, type_name)) for name, schema, type_name in rows]


def _pg_type(name: str, data_type: DataType) -> str:
    from pyspark.sql.types import DecimalType

    if isinstance(data_type, DecimalType):
        return f"numeric({data_type.precision},{data_type.scale})"
    simple = data_type.simpleString()
    if simple in _TYPES:
        return _TYPES[simple]
    raise ConfigError(
        f"column {name!r} has type {simple}, which the PostgreSQL sink does not write: cast it, "
        "or turn it into JSON text with to_json()"
    )


def _json_kind(data_type: DataType) -> str:
    """How a dead letter shows a column's value: JSON numbers and booleans where Spark has
    them, otherwise the text PostgreSQL was given."""
    from pyspark.sql.types import BooleanType, DoubleType, FloatType, IntegralType

    if isinstance(data_type, IntegralType):
        return "int"
    if isinstance(data_type, DoubleType | FloatType):
        return "float"
    if isinstance(data_type, BooleanType):
        return "bool"
    return "text"


def _json_value(kind: str, text: str | None) -> Any:
    if text is None or kind == "text":
        return text
    if kind == "bool":
        return text == "t"
    if kind == "int":
        return int(text)
    number = float(text)
    return number if math.isfinite(number) else text  # JSON has no NaN or Infinity


def _json_bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


# -- executor side ---------------------------------------------------------------------------


def _stage_partition(
    spec: _TaskSpec, batch_id: int, index: int, rows: Iterable[Any]
) -> Iterator[tuple[int, int, int, int]]:
    """Copy one partition into the staging table under this task attempt's id. Yields
    (partition, attempt, rows staged, rows refused here)."""
    import psycopg
    from psycopg import sql
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.taskAttemptId() if context is not None else 0
    names = sql.SQL(", ").join(sql.Identifier(n) for n in spec.columns)
    own = sql.SQL(", ").join(sql.Identifier(n) for n, _ in _STAGE_COLUMNS)
    statement = sql.SQL("COPY {} ({}, {}) FROM STDIN").format(
        sql.Identifier(*spec.stage), names, own
    )
    count = refused = 0
    utc, text = spec.utc_columns, spec.text_columns
    with psycopg.connect(
        spec.dsn, application_name=f"fluvial-spark-sink:{spec.sink_id}"[:63],
        options=f"-c statement_timeout={spec.timeout_ms}",
    ) as conn:  # fmt: skip
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                values = list(row)
                for i in utc:
                    # Spark hands timestamps over as naive local times; make them absolute.
                    if values[i] is not None:
                        values[i] = values[i].astimezone(dt.UTC)
                error = None
                for i in text:
                    if values[i] is not None and _NUL in values[i]:
                        # PostgreSQL text cannot hold NUL: a bad row, shown with \u0000.
                        values[i] = values[i].replace(_NUL, "\\u0000")
                        error = error or (
                            f"column {spec.columns[i]!r} holds a NUL character (0x00), which "
                            "PostgreSQL text cannot store (shown here as \\u0000)"
                        )
                refused += error is not None
                copy.write_row((*values, batch_id, index, attempt, count, error))
                count += 1
        conn.commit()
    yield index, attempt, count, refused


__all__ = ["PostgresBatchResult", "PostgresSink"]
