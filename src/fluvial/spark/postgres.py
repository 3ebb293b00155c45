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
2. Each Spark task copies its partition into a staging table (``COPY``, unlogged), tagged with
   the batch, its partition and its task attempt, and commits. Tasks that fail, and zombie
   attempts that finish late, leave rows that nobody reads.
3. The driver, in one transaction: inserts ``b`` into the batch table (its primary key makes
   a concurrent or repeated commit of ``b`` fail), moves the rows of exactly the attempts that
   Spark reported as successful into the target table, and deletes the batch's staging rows.

So the batch becomes visible at once, whole, and exactly once, however Spark splits or retries
it. The price is writing the rows twice (staging, then target).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from fluvial.errors import ConfigError
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


@dataclass(frozen=True)
class PostgresBatchResult:
    """What one ``foreachBatch`` call did."""

    batch_id: int
    rows_written: int
    #: True when an earlier attempt had already committed this batch.
    skipped: bool


@dataclass(frozen=True)
class _TaskSpec:
    """What a Spark task needs to stage its partition; small and picklable."""

    dsn: str
    sink_id: str
    stage: tuple[str, ...]
    columns: tuple[str, ...]
    utc_columns: tuple[int, ...]  # positions of timestamp (with time zone) columns
    timeout_ms: int


class PostgresSink:
    """An exactly-once PostgreSQL sink for ``DataFrame.writeStream.foreachBatch``.

    The batch's columns become the table's columns (created with matching types if the table
    does not exist). ``mode="upsert"`` replaces rows by ``key_columns`` (the table needs a
    primary key or unique index on them, which the sink creates with the table); a batch must
    then hold one row per key. ``sink_id`` must stay the same for the life of the query's
    checkpoint: the batch ids it records belong to that checkpoint.

    A row PostgreSQL rejects (a constraint, a value out of range) fails the batch, with
    nothing of it visible; Spark then stops the query, and the error names the row's problem.
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
        # One staging table per sink, named after it (hashed: identifiers stop at 63 bytes).
        digest = hashlib.sha1(sink_id.encode()).hexdigest()[:10]
        schema = self.table_parts[:-1]
        self.stage_parts = (*schema, f"fluvial_stage_{digest}")
        #: The outcome of the last batch, for logs and tests.
        self.last_result: PostgresBatchResult | None = None

    # -- schema ------------------------------------------------------------------------------

    def columns(self, schema: StructType) -> list[tuple[str, str]]:
        """(name, PostgreSQL type) of every column; raises on what the sink cannot write."""
        out = []
        for f in schema.fields:
            if not _NAME.match(f.name):
                raise ConfigError(
                    f"column {f.name!r} is not a plain name (letters, digits, _): alias it"
                )
            out.append((f.name, _pg_type(f.name, f.dataType)))
        missing = [k for k in self.key_columns if k not in {n for n, _ in out}]
        if missing:
            raise ConfigError(f"key_columns {missing} are not columns of the batch")
        return out

    # -- one micro-batch ---------------------------------------------------------------------

    def __call__(self, batch_df: DataFrame, batch_id: int) -> PostgresBatchResult:
        import psycopg
        from pyspark.sql.types import TimestampType

        columns = self.columns(batch_df.schema)
        with psycopg.connect(self.dsn, autocommit=True, application_name=self._app_name()) as conn:
            self._prepare(conn, columns)
            if self._plan(conn, batch_id) == "skip":
                log.info("sink %s: batch %d was already committed; skipped", self.sink_id, batch_id)
                self.last_result = PostgresBatchResult(batch_id, 0, True)
                return self.last_result
        names = tuple(n for n, _ in columns)
        utc = tuple(
            i for i, f in enumerate(batch_df.schema.fields) if isinstance(f.dataType, TimestampType)
        )
        spec = _TaskSpec(self.dsn, self.sink_id, self.stage_parts, names, utc, self.timeout_ms)

        def stage(index: int, rows: Iterable[Any]) -> Iterator[tuple[int, int, int]]:
            return _stage_partition(spec, batch_id, index, rows)

        staged = batch_df.rdd.mapPartitionsWithIndex(stage).collect()
        written = self._commit(batch_id, names, staged)
        self.last_result = PostgresBatchResult(batch_id, max(written, 0), skipped=written < 0)
        return self.last_result

    def _app_name(self) -> str:
        return f"fluvial-spark-sink:{self.sink_id}"[:63]

    def _prepare(self, conn: Any, columns: list[tuple[str, str]]) -> None:
        from psycopg import sql

        from fluvial.sinks.store import _create_racing

        target = sql.Identifier(*self.table_parts)
        _create_racing(
            conn,
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, batch_id bigint NOT NULL, "
                "rows bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
                "PRIMARY KEY (sink_id, batch_id))"
            ).format(sql.Identifier(*self.batches_parts)),
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
        cols = sql.SQL(", ").join(sql.Identifier(n) for n, _ in columns)
        try:
            with conn.transaction():
                conn.execute(sql.SQL("SELECT {} FROM {} LIMIT 0").format(cols, target))
        except Exception as exc:
            raise ConfigError(
                f"table {self.table!r} cannot take the batch's columns "
                f"({', '.join(n for n, _ in columns)}): {exc}".strip()
            ) from exc
        # Unlogged: staged rows are copied into the target within the batch; a server crash
        # in between loses only rows that the batch's retry stages again.
        _create_racing(
            conn,
            sql.SQL(
                "CREATE UNLOGGED TABLE IF NOT EXISTS {} AS SELECT {}, 0::bigint AS fluvial_batch, "
                "0::integer AS fluvial_partition, 0::bigint AS fluvial_attempt FROM {} WITH NO DATA"
            ).format(sql.Identifier(*self.stage_parts), cols, target),
        )

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
        self, batch_id: int, names: tuple[str, ...], staged: list[tuple[int, int, int]]
    ) -> int:
        """Move the successful attempts' rows into the target with the batch's record, in one
        transaction. Returns the rows written, or -1 when another driver committed the batch."""
        import psycopg
        from psycopg import sql

        expected = sum(count for _p, _a, count in staged)
        stage = sql.Identifier(*self.stage_parts)
        cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
        options = f"-c statement_timeout={self.timeout_ms}"
        with psycopg.connect(
            self.dsn, autocommit=True, application_name=self._app_name(), options=options
        ) as conn:
            try:
                with conn.transaction():
                    # First: a second commit of this batch (another driver, a replay racing
                    # this one) waits here for ours, then fails on the primary key.
                    conn.execute(
                        sql.SQL("INSERT INTO {} (sink_id, batch_id, rows) VALUES (%s, %s, %s)")
                        .format(sql.Identifier(*self.batches_parts)),
                        [self.sink_id, batch_id, expected],
                    )  # fmt: skip
                    select = sql.SQL(
                        "SELECT {} FROM {} WHERE fluvial_batch = %s AND (fluvial_partition, "
                        "fluvial_attempt) IN (SELECT * FROM unnest(%s::int[], %s::bigint[]))"
                    ).format(cols, stage)
                    statement = (
                        sql.SQL("INSERT INTO {} ({}) ").format(
                            sql.Identifier(*self.table_parts), cols
                        )
                        + select
                    )
                    if self.mode == "upsert":
                        keys = set(self.key_columns)
                        updates = [
                            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n))
                            for n in names
                            if n not in keys
                        ]
                        statement += sql.SQL(" ON CONFLICT ({}) DO ").format(
                            sql.SQL(", ").join(sql.Identifier(k) for k in self.key_columns)
                        )
                        statement += (
                            sql.SQL("UPDATE SET ") + sql.SQL(", ").join(updates)
                            if updates
                            else sql.SQL("NOTHING")
                        )
                    cur = conn.execute(
                        statement,
                        [batch_id, [p for p, _a, _c in staged], [a for _p, a, _c in staged]],
                    )
                    if self.mode == "append" and cur.rowcount != expected:
                        raise SinkError(
                            f"sink {self.sink_id!r}: batch {batch_id} staged {expected} rows "
                            f"but {cur.rowcount} reached the target; nothing is committed"
                        )
                    conn.execute(
                        sql.SQL("DELETE FROM {} WHERE fluvial_batch <= %s").format(stage),
                        [batch_id],
                    )
            except psycopg.errors.UniqueViolation as exc:
                if exc.diag.table_name == self.batches_parts[-1]:
                    log.info("sink %s: batch %d was committed by another driver", self.sink_id,
                             batch_id)  # fmt: skip
                    return -1
                raise _rejected(self.sink_id, batch_id, exc) from exc
            except psycopg.errors.CardinalityViolation as exc:
                raise SinkError(
                    f"sink {self.sink_id!r}: batch {batch_id} holds several rows for one key "
                    f"({', '.join(self.key_columns)}); an upsert needs one row per key and "
                    "batch: aggregate first (groupBy(...).agg(max_by(...)))"
                ) from exc
            except (psycopg.DataError, psycopg.IntegrityError) as exc:
                raise _rejected(self.sink_id, batch_id, exc) from exc
        log.info("sink %s: batch %d committed %d rows", self.sink_id, batch_id, expected)
        return expected


def _rejected(sink_id: str, batch_id: int, exc: BaseException) -> SinkError:
    return SinkError(
        f"sink {sink_id!r}: PostgreSQL rejected a row of batch {batch_id} "
        f"({str(exc).strip().splitlines()[0]}); nothing of the batch is committed. Fix the "
        "data or the table's constraints, then restart the query"
    )


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


# -- executor side ---------------------------------------------------------------------------


def _stage_partition(
    spec: _TaskSpec, batch_id: int, index: int, rows: Iterable[Any]
) -> Iterator[tuple[int, int, int]]:
    """Copy one partition into the staging table under this task attempt's id."""
    import psycopg
    from psycopg import sql
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.taskAttemptId() if context is not None else 0
    names = sql.SQL(", ").join(sql.Identifier(n) for n in spec.columns)
    statement = sql.SQL(
        "COPY {} ({}, fluvial_batch, fluvial_partition, fluvial_attempt) FROM STDIN"
    ).format(sql.Identifier(*spec.stage), names)
    count = 0
    utc = set(spec.utc_columns)
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
                copy.write_row((*values, batch_id, index, attempt))
                count += 1
        conn.commit()
    yield index, attempt, count


__all__ = ["PostgresBatchResult", "PostgresSink"]
