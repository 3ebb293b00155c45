"""The sink's side of PostgreSQL: the target table, the offsets table and the fencing epoch.

Every batch is one transaction, in this order:

1. ``SELECT ... FOR UPDATE`` the sink's rows in the offsets table and compare their epoch with
   this instance's. The row locks are held to the commit, so no successor can claim the
   partitions between this check and the commit: either it waits for us, or we see its epoch.
2. Write the rows (``COPY``; for tables, ``COPY`` into a staging table and merge from there).
   A row PostgreSQL rejects is found by bisection under savepoints; the others are written.
   Deferred constraints are made immediate for this, so that they too are found by row.
3. Hand bad rows to the sink (dead-letter topic, or stop, which rolls everything back).
4. Move the offsets forward. The commit makes rows and offsets visible together.

A new instance *claims* its partitions: it raises their epoch above every earlier one in a
transaction of its own. An earlier instance holding their locks (in an open transaction, e.g.
stopped by SIGSTOP) is ended with ``pg_terminate_backend``, so the claim does not wait for it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from fluvial.errors import ConfigError, FluvialError
from fluvial.sinks.columns import Column

log = logging.getLogger("fluvial.sinks")

TopicPartition = tuple[str, int]
T = TypeVar("T")


class SinkFencedError(FluvialError):
    """Another instance of the sink claimed these partitions; this one must stop."""


class BadRowError(FluvialError):
    """A record could not be written and the sink is set to stop on bad rows."""


@dataclass
class Item:
    """One record on its way to a row."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    headers: list[tuple[str, bytes | None]] | None
    row: tuple[Any, ...] = ()
    #: The key columns' values (upsert mode: what identifies the row).
    identity: tuple[Any, ...] = ()
    tombstone: bool = False
    error: str = ""

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass
class BatchOutcome:
    rows_written: int = 0
    rows_deleted: int = 0
    bad: list[Item] = field(default_factory=list)


def split_table_name(name: str) -> list[str]:
    parts = name.split(".")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ConfigError(f"table {name!r} is not 'name' or 'schema.name'")
    return parts


class SinkStore:
    """One connection's worth of the sink's database work."""

    def __init__(
        self,
        dsn: str,
        *,
        sink_id: str,
        table: str,
        offsets_table: str,
        upsert: bool,
        key_columns: Sequence[Column],
        columns: Sequence[Column],
        create_table: bool,
        transaction_timeout_ms: int,
    ) -> None:
        self.dsn = dsn
        self.sink_id = sink_id
        self.table = sql.Identifier(*split_table_name(table))
        self.table_name = table
        self.offsets = sql.Identifier(*split_table_name(offsets_table))
        self.upsert = upsert
        self.key_columns = list(key_columns)
        self.columns = list(columns)
        self.create_table = create_table
        self.timeout_ms = transaction_timeout_ms
        # Identifies this sink's sessions in pg_stat_activity; a claim ends only these.
        self.application_name = f"fluvial-sink:{sink_id}"[:63]
        self.conn: psycopg.Connection[Any] | None = None
        self._prepared = False
        self._cols = sql.SQL(", ").join(sql.Identifier(c.name) for c in self.columns)

    # -- connections ------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        # A stuck transaction (its client stopped or gone) is ended by the server after the
        # transaction timeout, so it never holds the sink's locks for long; the server's
        # timeouts do not reach a COPY waiting for its client's data: the sink's watchdog
        # process ends that one (fluvial.sinks.watchdog).
        options = (
            f"-c statement_timeout={self.timeout_ms} "
            f"-c idle_in_transaction_session_timeout={self.timeout_ms}"
        )
        try:
            return psycopg.connect(
                self.dsn, autocommit=True, application_name=self.application_name,
                options=options, connect_timeout=10, keepalives=1, keepalives_idle=10,
                keepalives_interval=5, keepalives_count=3,
            )  # fmt: skip
        except psycopg.OperationalError as exc:
            raise ConnectionLost(f"cannot connect to PostgreSQL: {_first_line(exc)}") from exc

    def connect(self) -> None:
        self.close()
        self.conn = self._connect()
        if self.upsert and self._prepared:
            self._create_stage()  # temporary tables live as long as their session

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None

    @property
    def backend_pid(self) -> int:
        assert self.conn is not None
        return self.conn.info.backend_pid

    # -- tables -----------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create the offsets table and, if asked, the target table; check the target."""
        conn = self._require()
        ddl = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} ("
            " sink_id text NOT NULL, topic text NOT NULL, partition integer NOT NULL,"
            " next_offset bigint, epoch bigint NOT NULL DEFAULT 0,"
            " updated_at timestamptz NOT NULL DEFAULT now(),"
            " PRIMARY KEY (sink_id, topic, partition))"
        ).format(self.offsets)
        _create_racing(conn, ddl)
        if self.create_table:
            identity = (
                [c.name for c in self.key_columns]
                if self.upsert
                else ["kafka_topic", "kafka_partition", "kafka_offset"]
            )
            definitions = [
                sql.SQL("{} {}{}").format(
                    sql.Identifier(c.name),
                    sql.SQL(c.pg_type),
                    sql.SQL(" NOT NULL" if c.name in identity else ""),
                )
                for c in self.columns
            ]
            definitions.append(
                sql.SQL("PRIMARY KEY ({})").format(
                    sql.SQL(", ").join(sql.Identifier(n) for n in identity)
                )
            )
            ddl = sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                self.table, sql.SQL(", ").join(definitions)
            )
            _create_racing(conn, ddl)
        self._check_target()
        if self.upsert:
            self._create_stage()
        self._prepared = True

    def _check_target(self) -> None:
        conn = self._require()
        parts = split_table_name(self.table_name)
        schema_filter = (
            "table_schema = %s" if len(parts) == 2 else "table_schema = current_schema()"
        )
        args: list[Any] = [parts[0]] if len(parts) == 2 else []
        found = conn.execute(
            "SELECT column_name FROM information_schema.columns "  # noqa: S608 - fixed text
            f"WHERE {schema_filter} AND table_name = %s",
            [*args, parts[-1]],
        ).fetchall()
        if not found:
            raise ConfigError(
                f"table {self.table_name!r} does not exist: create it, or let the sink create "
                "it (create_table=True, the default)"
            )
        have = {row[0] for row in found}
        missing = [c.name for c in self.columns if c.name not in have]
        if missing:
            raise ConfigError(
                f"table {self.table_name!r} lacks the column(s) {missing} that the sink writes: "
                "add them (ALTER TABLE ... ADD COLUMN) or write to a new table"
            )
        if self.upsert:
            keys = sorted(c.name for c in self.key_columns)
            unique = conn.execute(
                "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = %s::regclass AND i.indisunique GROUP BY i.indexrelid",
                [self.table.as_string(conn)],
            ).fetchall()
            if [keys] not in [[row[0]] for row in unique]:
                raise ConfigError(
                    f"table {self.table_name!r} has no primary key or unique index on "
                    f"({', '.join(keys)}): a table sink upserts by its key, so add one"
                )

    def _create_stage(self) -> None:
        # Rows of a table batch land here first, then merge into the target in one statement.
        conn = self._require()
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE IF NOT EXISTS fluvial_stage AS SELECT {} FROM {} WITH NO DATA"
            ).format(self._cols, self.table)
        )
        conn.execute("ALTER TABLE fluvial_stage ADD COLUMN IF NOT EXISTS fluvial_tombstone boolean")

    # -- claiming ---------------------------------------------------------------------------

    def claim(
        self, partitions: Sequence[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int | None]]:
        """Raise the epoch of ``partitions`` above every earlier claim; return the new epoch
        and each partition's committed next offset (None: nothing committed yet)."""
        conn = self._require()
        topics, numbers = _columns(partitions)
        stop = threading.Event()
        watchdog = threading.Thread(
            target=self._end_blockers, args=(self.backend_pid, stop), daemon=True,
            name="fluvial-sink-claim",
        )  # fmt: skip
        watchdog.start()
        try:
            with conn.transaction():
                conn.execute("SET LOCAL statement_timeout = 0")
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (sink_id, topic, partition, next_offset, epoch) "
                        "SELECT %s, t, p, NULL, 0 FROM unnest(%s::text[], %s::int[]) AS v(t, p) "
                        "ON CONFLICT DO NOTHING"
                    ).format(self.offsets),
                    [self.sink_id, topics, numbers],
                )
                rows = self._lock(conn, topics, numbers)
                epoch = max(row[3] for row in rows) + 1
                conn.execute(
                    sql.SQL(
                        "UPDATE {} SET epoch = %s, updated_at = now() WHERE sink_id = %s "
                        "AND (topic, partition) IN (SELECT * FROM unnest(%s::text[], %s::int[]))"
                    ).format(self.offsets),
                    [epoch, self.sink_id, topics, numbers],
                )
        finally:
            stop.set()
            watchdog.join()
        return epoch, {(row[0], row[1]): row[2] for row in rows}

    def _lock(
        self, conn: psycopg.Connection[Any], topics: list[str], numbers: list[int]
    ) -> list[Any]:
        # A fixed order, so two instances locking the same rows never deadlock.
        return conn.execute(
            sql.SQL(
                "SELECT topic, partition, next_offset, epoch FROM {} WHERE sink_id = %s "
                "AND (topic, partition) IN (SELECT * FROM unnest(%s::text[], %s::int[])) "
                "ORDER BY topic, partition FOR UPDATE"
            ).format(self.offsets),
            [self.sink_id, topics, numbers],
        ).fetchall()

    def _end_blockers(self, claimer_pid: int, stop: threading.Event) -> None:
        """While the claim waits for row locks, end this sink's sessions that hold them: they
        belong to an earlier instance (a zombie) whose transaction must not commit."""
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as watcher:
                while not stop.wait(0.3):
                    blockers = watcher.execute(
                        "SELECT pid, application_name FROM pg_stat_activity "
                        "WHERE pid = ANY(pg_blocking_pids(%s))",
                        [claimer_pid],
                    ).fetchall()
                    for pid, name in blockers:
                        if name == self.application_name:
                            log.warning(
                                "sink %s: ending an earlier instance's open transaction "
                                "(backend pid %d) that holds the partitions being claimed",
                                self.sink_id, pid,
                            )  # fmt: skip
                            watcher.execute("SELECT pg_terminate_backend(%s)", [pid])
                        else:
                            log.warning(
                                "sink %s: waiting for backend pid %d (%s), which holds the "
                                "sink's offset rows", self.sink_id, pid, name or "no name",
                            )  # fmt: skip
        except psycopg.Error as exc:  # the claim itself reports what matters
            log.debug("claim watchdog stopped: %s", exc)

    def current(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, tuple[int | None, int]]:
        """(next offset, epoch) per partition, as committed."""
        conn = self._require()
        topics, numbers = _columns(partitions)
        rows = conn.execute(
            sql.SQL(
                "SELECT topic, partition, next_offset, epoch FROM {} WHERE sink_id = %s "
                "AND (topic, partition) IN (SELECT * FROM unnest(%s::text[], %s::int[]))"
            ).format(self.offsets),
            [self.sink_id, topics, numbers],
        ).fetchall()
        return {(r[0], r[1]): (r[2], r[3]) for r in rows}

    # -- one batch --------------------------------------------------------------------------

    def commit_batch(
        self,
        *,
        epoch: int,
        committed: dict[TopicPartition, int | None],
        next_offsets: dict[TopicPartition, int],
        items: list[Item],
        bad: list[Item],
        handle_bad: Callable[[list[Item]], None],
    ) -> BatchOutcome:
        """Write ``items`` and move the offsets to ``next_offsets``, in one transaction.

        ``committed`` is what this instance believes the offsets table holds; any difference
        means another instance wrote in between, and nothing is written.
        """
        conn = self._require()
        owned = sorted(committed)
        topics, numbers = _columns(owned)
        outcome = BatchOutcome(bad=list(bad))
        with conn.transaction():
            # Deferred constraints are checked at each statement, so that a violation is found
            # with its row (and set aside) rather than failing the COMMIT.
            conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
            rows = self._lock(conn, topics, numbers)
            found = {(r[0], r[1]): (r[2], r[3]) for r in rows}
            for tp in owned:
                offset, their_epoch = found.get(tp, (None, -1))
                if their_epoch != epoch or offset != committed[tp]:
                    raise SinkFencedError(
                        f"sink {self.sink_id!r} was fenced: partition {tp[0]}[{tp[1]}] is now "
                        f"held by epoch {their_epoch} (this instance has epoch {epoch}); "
                        "another instance took over, so this one stops without committing"
                    )
            self._write(items, outcome)
            if outcome.bad:
                handle_bad(outcome.bad)  # raises to stop: the transaction rolls back
            moved = sorted(next_offsets)
            t, p = _columns(moved)
            conn.execute(
                sql.SQL(
                    "UPDATE {} o SET next_offset = v.n, updated_at = now() "
                    "FROM unnest(%s::text[], %s::int[], %s::bigint[]) AS v(t, p, n) "
                    "WHERE o.sink_id = %s AND o.topic = v.t AND o.partition = v.p"
                ).format(self.offsets),
                [t, p, [next_offsets[tp] for tp in moved], self.sink_id],
            )
        return outcome

    def _write(self, items: list[Item], outcome: BatchOutcome) -> None:
        conn = self._require()
        if not self.upsert:
            outcome.bad += self._bisect(items, outcome)
            return
        excluded: set[int] = set()
        while True:
            # A table holds the last value per key. When PostgreSQL rejects a row, its record
            # leaves the batch and the batch is reduced again, so the key keeps the value of
            # its last good record, as if the bad one had never been in the topic.
            rows = _last_per_key(i for i in items if id(i) not in excluded)
            attempt = BatchOutcome()
            try:
                with conn.transaction():
                    rejected = self._bisect(rows, attempt)
                    if _shadowed(rejected, items, excluded):
                        raise _Retry(rejected)
            except _Retry as retry:
                excluded.update(id(i) for i in retry.items)
                outcome.bad += retry.items
                continue
            outcome.bad += rejected
            outcome.rows_written += attempt.rows_written
            outcome.rows_deleted += attempt.rows_deleted
            return

    def _bisect(self, items: list[Item], outcome: BatchOutcome) -> list[Item]:
        """Write ``items``; return those PostgreSQL rejects, each with its error."""

        def write(chunk: Sequence[Item]) -> None:
            written, deleted = self._write_rows(list(chunk))
            outcome.rows_written += written
            outcome.rows_deleted += deleted

        rejected = write_or_bisect(self._require(), items, write)
        for item, exc in rejected:
            item.error = rejection(exc)
        return [item for item, _exc in rejected]

    def _write_rows(self, items: list[Item]) -> tuple[int, int]:
        conn = self._require()
        with conn.cursor() as cur:
            if not self.upsert:
                with cur.copy(
                    sql.SQL("COPY {} ({}) FROM STDIN").format(self.table, self._cols)
                ) as copy:
                    for item in items:
                        copy.write_row(item.row)
                return len(items), 0
            cur.execute("TRUNCATE fluvial_stage")
            statement = sql.SQL("COPY fluvial_stage ({}, fluvial_tombstone) FROM STDIN")
            with cur.copy(statement.format(self._cols)) as copy:
                for item in items:
                    copy.write_row((*item.row, item.tombstone))
            keys = [sql.Identifier(c.name) for c in self.key_columns]
            match = sql.SQL(" AND ").join(sql.SQL("t.{0} = s.{0}").format(k) for k in keys)
            cur.execute(
                sql.SQL("DELETE FROM {} t USING fluvial_stage s WHERE s.fluvial_tombstone AND {}")
                .format(self.table, match)
            )  # fmt: skip
            deleted = cur.rowcount
            key_names = {c.name for c in self.key_columns}
            updates = sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c.name))
                for c in self.columns
                if c.name not in key_names
            )
            cur.execute(
                sql.SQL(
                    "INSERT INTO {} ({}) SELECT {} FROM fluvial_stage WHERE NOT fluvial_tombstone "
                    "ON CONFLICT ({}) DO UPDATE SET {}"
                ).format(self.table, self._cols, self._cols, sql.SQL(", ").join(keys), updates)
            )
            return cur.rowcount, deleted

    def _require(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            self.connect()
        assert self.conn is not None
        return self.conn


class ConnectionLost(FluvialError):
    """The connection to PostgreSQL broke; whether the last commit landed is unknown."""


class _Retry(Exception):
    def __init__(self, items: list[Item]) -> None:
        super().__init__()
        self.items = items


def write_or_bisect(
    conn: psycopg.Connection[Any],
    items: Sequence[T],
    write: Callable[[Sequence[T]], None],
) -> list[tuple[T, psycopg.Error]]:
    """``write(items)`` under a savepoint; where PostgreSQL rejects it, the two halves, and so
    on down to the single rows it rejects. Returns those rows with PostgreSQL's error; every
    other row is written. A batch without bad rows costs one statement, and ``k`` bad rows
    among ``n`` about ``2 k log2(n)``.

    Only a row's own fault counts (a value that does not fit its type, a constraint): other
    errors propagate and fail the batch.
    """
    if not items:
        return []
    try:
        with conn.transaction():
            write(items)
    except (psycopg.DataError, psycopg.IntegrityError) as exc:
        if len(items) == 1:
            return [(items[0], exc)]
        middle = len(items) // 2
        return write_or_bisect(conn, items[:middle], write) + write_or_bisect(
            conn, items[middle:], write
        )
    return []


def rejection(exc: BaseException, column: str | None = None) -> str:
    """The reason a dead letter carries for a row PostgreSQL refused (because of ``column``,
    when known)."""
    where = f"column {column!r}: " if column else ""
    return f"rejected by PostgreSQL: {where}{_first_line(exc)}"


def _last_per_key(items: Iterable[Item]) -> list[Item]:
    last: dict[tuple[Any, ...], Item] = {}
    for item in items:
        last.pop(item.identity, None)  # keep offset order among the survivors
        last[item.identity] = item
    return list(last.values())


def _shadowed(rejected: list[Item], items: list[Item], excluded: set[int]) -> bool:
    """Whether a rejected row's key had earlier records in the batch, which the reduction
    dropped in its favour (so the batch must be reduced again without it)."""
    if not rejected:
        return False
    keys = {i.identity for i in rejected}
    seen = [i.identity for i in items if id(i) not in excluded and i.identity in keys]
    return len(seen) > len(keys)


def _columns(partitions: Sequence[TopicPartition]) -> tuple[list[str], list[int]]:
    return [t for t, _ in partitions], [p for _, p in partitions]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _create_racing(conn: psycopg.Connection[Any], ddl: sql.Composed) -> None:
    """CREATE ... IF NOT EXISTS, tolerating another instance creating it at the same time."""
    with contextlib.suppress(psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
        conn.execute(ddl)
