"""The rows' way into PostgreSQL for the Spark writer (:mod:`fluvial.spark.postgres`).

Spark tasks *stage* their partitions in an unlogged table, tagged with the batch, the
partition, the task attempt and the row's position: a value of its column's own type as that
type, any other as text. The driver then *moves* the rows of the successful attempts into the
target in the batch's transaction, each text value cast to its column's type there (the cast
``COPY`` would apply), so that types and constraints meet the rows in one place, where a
refused row can be found and set aside:

- one ``INSERT ... SELECT`` for the whole batch, which is all a batch without bad rows costs;
- when PostgreSQL refuses it, the batch's rows are numbered in a temporary table and the
  refused ones found by bisection under savepoints; the others are written.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

    from fluvial.spark.postgres import PostgresSink

#: The staging table's own columns, after the batch's.
STAGE_COLUMNS = (
    ("fluvial_batch", "int8"),
    ("fluvial_partition", "int4"),
    ("fluvial_attempt", "int8"),
    ("fluvial_row", "int8"),
    # Set by the task for a row it cannot stage as it is (text with a NUL character).
    ("fluvial_error", "text"),
)
_NUL = "\x00"


@dataclass(frozen=True)
class TaskSpec:
    """What a Spark task needs to stage its partition; small and picklable."""

    dsn: str
    sink_id: str
    stage: tuple[str, ...]
    columns: tuple[str, ...]
    utc_columns: tuple[int, ...]  # positions of timestamp (with time zone) columns
    text_columns: tuple[int, ...]  # positions of string columns
    timeout_ms: int


@dataclass(frozen=True)
class BadRow:
    values: tuple[str | None, ...]  # as text: what PostgreSQL was given
    error: str


class BatchMove:
    """The move of one batch, inside its transaction: the successful attempts' staged rows
    into the target, except the ones PostgreSQL refuses, which :meth:`run` returns with their
    reasons."""

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
        # A bad row's values as text, whatever type they were staged as.
        self.texts = sql.SQL(", ").join(
            sql.SQL("CAST({} AS text)").format(sql.Identifier(n)) for n in names
        )

    def run(self) -> tuple[int, list[BadRow]]:
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
                sql.SQL("SELECT {} FROM fluvial_rows WHERE fluvial_n = %s").format(self.texts),
                [n],
            ).fetchall()
            bad.append(BadRow(tuple(values), self._reason(n, exc)))
        return written, bad

    def _refused_by_tasks(self) -> list[BadRow]:
        from psycopg import sql

        if not self.refused_by_tasks:
            return []
        rows = self.conn.execute(
            sql.SQL("SELECT {}, fluvial_error FROM {} WHERE ").format(self.texts, self.stage)
            + self.attempts
            + sql.SQL(" AND fluvial_error IS NOT NULL ORDER BY fluvial_partition, fluvial_row"),
            self.args,
        ).fetchall()
        return [BadRow(tuple(r[:-1]), r[-1]) for r in rows]

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


def table_columns(conn: Any, parts: tuple[str, ...]) -> list[tuple[str, tuple[str, str]]]:
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


def json_kind(data_type: DataType) -> str:
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


def json_value(kind: str, text: str | None) -> Any:
    if text is None or kind == "text":
        return text
    if kind == "bool":
        return text in ("t", "true")  # as psycopg writes it, or as PostgreSQL shows it
    if kind == "int":
        return int(text)
    number = float(text)
    return number if math.isfinite(number) else text  # JSON has no NaN or Infinity


def json_bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()


# -- executor side ---------------------------------------------------------------------------


def stage_partition(
    spec: TaskSpec, batch_id: int, index: int, rows: Iterable[Any]
) -> Iterator[tuple[int, int, int, int]]:
    """Copy one partition into the staging table under this task attempt's id. Yields
    (partition, attempt, rows staged, rows refused here)."""
    import psycopg
    from psycopg import sql
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.taskAttemptId() if context is not None else 0
    names = sql.SQL(", ").join(sql.Identifier(n) for n in spec.columns)
    own = sql.SQL(", ").join(sql.Identifier(n) for n, _ in STAGE_COLUMNS)
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
