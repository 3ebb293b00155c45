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
2. Each Spark task copies its partition into a staging table (``COPY``, unlogged; a value of
   its column's own type as that type, any other as text), tagged with the batch, its
   partition, its task attempt and the row's position, and commits. Tasks that fail, and zombie attempts that finish late, leave rows that nobody
   reads.
3. The driver, in one transaction: inserts ``b`` into the batch table (its primary key makes
   a concurrent or repeated commit of ``b`` fail), moves the rows of exactly the attempts that
   Spark reported as successful into the target table (each text value cast to its column's
   type there, as ``COPY`` would parse it), and deletes the batch's staging rows.

So the batch becomes visible at once, whole, and exactly once, however Spark splits or retries
it. The price is writing the rows twice (staging, then target).

**Bad rows.** Values meet their column types and the table's constraints in step 3 only, in
one statement. When PostgreSQL refuses it, the driver finds the rows it refuses by bisection
under savepoints and writes the others (:mod:`fluvial.spark.postgres_staging`). With
``on_bad_row="fail"`` (the default) the batch then rolls back whole and the query stops with
an error that names the row and its problem. With ``on_bad_row="dead_letter"`` the bad rows go
into an outbox table in the same transaction, and from there to the dead-letter topic,
exactly once (:mod:`fluvial.spark.postgres_dead_letters`).
"""

from __future__ import annotations

import hashlib
import json
import logging
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
from fluvial.spark.postgres_staging import (
    STAGE_COLUMNS,
    BadRow,
    BatchMove,
    TaskSpec,
    json_bytes,
    json_kind,
    json_value,
    stage_partition,
    table_columns,
)
from fluvial.spark.sink import SinkError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("fluvial.spark.postgres")

_TYPE_NAMES = {
    "bigint": "int8",
    "integer": "int4",
    "smallint": "int2",
    "double precision": "float8",
    "real": "float4",
    "boolean": "bool",
}
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
    #: Bad rows of the batch set aside for the dead-letter topic.
    dead_letters: int = 0


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
        reserved = {name for name, _ in STAGE_COLUMNS}
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
        spec = TaskSpec(self.dsn, self.sink_id, self.stage_parts, names, utc, text,
                         self.timeout_ms)  # fmt: skip

        def stage(index: int, rows: Iterable[Any]) -> Iterator[tuple[int, int, int, int]]:
            return stage_partition(spec, batch_id, index, rows)

        staged = batch_df.rdd.mapPartitionsWithIndex(stage).collect()
        kinds = tuple(json_kind(f.dataType) for f in fields)
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
        if "dead_letters" not in {name for name, _ in table_columns(conn, self.batches_parts)}:
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
        found = dict(table_columns(conn, self.table_parts))
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
        # A value whose Spark type is its column's own type is staged as that type: it cannot
        # be refused for its type, and the move copies it as it is. Any other value is staged
        # as text and cast to its column's type in the move (the cast COPY would apply), where
        # one that does not fit is found and set aside. A staging table of another shape (the
        # batch's columns or the table changed) holds nothing a later batch reads: recreate it.
        staged_types = {
            n: natural if found[n] == ("pg_catalog", natural) else "text"
            for n, natural in ((n, _type_name(t)) for n, t in columns)
        }
        stage = sql.Identifier(*self.stage_parts)
        expected = [(n, ("pg_catalog", staged_types[n])) for n, _ in columns]
        expected += [(n, ("pg_catalog", t)) for n, t in STAGE_COLUMNS]
        present = table_columns(conn, self.stage_parts)
        if present and present != expected:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage))
        if present != expected:
            # Unlogged: staged rows are copied into the target within the batch; a server
            # crash in between loses only rows that the batch's retry stages again.
            definitions = [
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(staged_types[n]))
                for n, _ in columns
            ]
            definitions += [
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in STAGE_COLUMNS
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

        if table_columns(conn, self.dead_letters_parts):
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
                    written, bad = BatchMove(self, conn, batch_id, names, staged).run()
                    if self.mode == "append" and written + len(bad) != expected:
                        raise SinkError(
                            f"sink {self.sink_id!r}: batch {batch_id} staged {expected} rows "
                            f"but {written + len(bad)} reached the target or the dead letters; "
                            "nothing is committed"
                        )
                    if bad:
                        if self.outbox is None:
                            raise self._bad_row_error(batch_id, names, kinds, bad)
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
        self, batch_id: int, names: tuple[str, ...], kinds: tuple[str, ...], bad: list[BadRow]
    ) -> SinkError:
        first = bad[0]
        row = json.dumps(_typed(names, kinds, first), ensure_ascii=False)
        if len(row) > 300:
            row = row[:300] + "…"
        more = f" ({len(bad) - 1} more bad row(s) in this batch)" if len(bad) > 1 else ""
        return SinkError(
            f"sink {self.sink_id!r}: a row of batch {batch_id} cannot be written to "
            f"{self.table!r}: {first.error}. The row: {row}{more}. Nothing of the batch is "
            "committed. Fix the data or the table, or set on_bad_row='dead_letter' (with "
            "dead_letter_topic) to set such rows aside; then restart the query"
        )

    def _letter(self, names: tuple[str, ...], kinds: tuple[str, ...], bad: BadRow) -> DeadLetter:
        row = _typed(names, kinds, bad)
        key = None
        if self.mode == "upsert":
            key = json_bytes({k: row[k] for k in self.key_columns})
        return DeadLetter(key, json_bytes(row), bad.error)


def _typed(names: tuple[str, ...], kinds: tuple[str, ...], bad: BadRow) -> dict[str, Any]:
    """A bad row as a dead letter and an error show it."""
    return {n: json_value(k, v) for n, k, v in zip(names, kinds, bad.values, strict=True)}


def _type_name(pg_type: str) -> str:
    """The catalog name of a type the sink derives from Spark's (``numeric(10,2)``: numeric)."""
    return _TYPE_NAMES.get(pg_type) or pg_type.split("(")[0]


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


__all__ = ["PostgresBatchResult", "PostgresSink"]
