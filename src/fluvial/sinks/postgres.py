"""Exactly-once from Kafka topics into a PostgreSQL table.

:class:`PostgresSink` reads topics ``read_committed`` and, for each batch, writes the rows and
the consumed offsets in one PostgreSQL transaction. The offsets live in a table of the sink's
own (``fluvial_sink_offsets``), so after a crash the sink resumes exactly where its last commit
left off; Kafka's consumer-group offsets are never read or written.

- ``mode="append"`` (streams): one row per record, identified by its topic, partition and
  offset (the primary key).
- ``mode="upsert"`` (tables): one row per key, the latest value wins, a tombstone deletes.
  Windowed keys give ``key, window_start, window_end``.

A new instance fences the old ones: it raises the epoch of its partitions in the offsets table,
and every batch checks the epoch under a row lock before it commits.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

import psycopg
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from fluvial.config import to_millis
from fluvial.errors import ConfigError, FluvialError
from fluvial.sinks import watchdog
from fluvial.sinks.columns import BadRecord, RowCodec, millis_to_datetime
from fluvial.sinks.dead_letters import DeadLetters, check_on_bad_row
from fluvial.sinks.store import (
    BadRowError,
    ConnectionLost,
    Item,
    SinkFencedError,
    SinkStore,
    TopicPartition,
    split_table_name,
)

log = logging.getLogger("fluvial.sinks")

_SINK_ID = re.compile(r"^[A-Za-z0-9._-]+$")
DEFAULT_OFFSETS_TABLE = "fluvial_sink_offsets"
#: Longest the live lag goes unread while no batch commits.
LAG_INTERVAL_S = 2.0


@dataclass
class SinkProgress:
    """What a sink has done so far (a snapshot)."""

    sink_id: str
    epoch: int = 0
    records_read: int = 0
    rows_written: int = 0
    rows_deleted: int = 0
    batches: int = 0
    dead_letters: int = 0
    reconnects: int = 0
    lag: int | None = None
    started: float = field(default_factory=time.monotonic)
    committed: dict[str, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Seconds since the sink started."""
        return time.monotonic() - self.started

    def line(self) -> str:
        """The one-line status of the sink: records read and their rate, rows written and deleted,
        batches, dead letters, lag and epoch.
        """
        rate = self.records_read / self.seconds if self.seconds > 0 else 0.0
        text = (
            f"records {self.records_read:,} ({rate:,.0f}/s)  rows {self.rows_written:,}  "
            f"deleted {self.rows_deleted:,}  batches {self.batches:,}  "
            f"dead-letters {self.dead_letters:,}"
        )
        if self.lag is not None:
            text += f"  lag {self.lag:,}"
        return text + f"  epoch {self.epoch}  [{self.seconds:.0f}s]"


class PostgresSink:
    """Writes Kafka topics into a PostgreSQL table, exactly once.

    ``topics`` are read ``read_committed`` from ``bootstrap_servers``. Keys and values are
    decoded with ``key_serde`` and ``value_serde`` (``string``, ``bytes``, ``long``, ``int``,
    ``double``, ``float``, ``json``); ``value_schema`` (``"category string, period long"``)
    turns JSON values into columns. ``window_size_ms`` or ``session_windows=True`` decode
    windowed keys into ``key, window_start, window_end``.

    ``on_bad_row="fail"`` (the default) stops the sink at a record that cannot become a row,
    before anything of its batch commits. ``on_bad_row="dead_letter"`` sends such records to
    ``dead_letter_topic`` (original key, value and timestamp, and headers naming the source and
    the error) and writes the rest.

    ``sink_id`` names the sink's rows in the offsets table (default: the table name). Keep it
    for the life of the table; a new ``sink_id`` starts from the beginning of the topics.
    """

    def __init__(
        self,
        topics: str | Sequence[str],
        *,
        table: str,
        dsn: str | None = None,
        bootstrap_servers: str | None = None,
        mode: Literal["append", "upsert"] = "append",
        key_serde: str = "string",
        value_serde: str = "string",
        value_schema: str | Mapping[str, str] | None = None,
        window_size_ms: int | timedelta | None = None,
        session_windows: bool = False,
        sink_id: str | None = None,
        on_bad_row: Literal["fail", "dead_letter"] = "fail",
        dead_letter_topic: str | None = None,
        commit_interval_ms: int | timedelta = 1000,
        max_batch_records: int = 10_000,
        transaction_timeout_ms: int | timedelta = 60_000,
        start_from: Literal["earliest", "latest"] = "earliest",
        create_table: bool = True,
        offsets_table: str = DEFAULT_OFFSETS_TABLE,
        partitions: Sequence[int] | None = None,
        client_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics or not all(self.topics):
            raise ConfigError("PostgresSink needs at least one topic to read")
        split_table_name(table)
        split_table_name(offsets_table)
        self.table = table
        self.dsn = dsn
        self.bootstrap_servers = bootstrap_servers
        if mode not in ("append", "upsert"):
            raise ConfigError(
                f"mode={mode!r} is unknown: use 'append' (one row per record) or 'upsert' "
                "(one row per key; tombstones delete)"
            )
        self.mode = mode
        window_ms = None if window_size_ms is None else to_millis(window_size_ms, "window_size_ms")
        self.codec = RowCodec(
            key_serde=key_serde, value_serde=value_serde, value_schema=value_schema,
            window_size_ms=window_ms, session_windows=session_windows,
        )  # fmt: skip
        self._settings = {
            "key_serde": key_serde, "value_serde": value_serde, "value_schema": value_schema,
            "window_size_ms": window_ms, "session_windows": session_windows,
        }  # fmt: skip
        self.sink_id = sink_id or table
        if not _SINK_ID.match(self.sink_id):
            raise ConfigError(
                f"sink_id {self.sink_id!r} is invalid: use letters, digits, '.', '_' and '-'"
            )
        check_on_bad_row(on_bad_row, dead_letter_topic, stopping="the sink")
        self.on_bad_row = on_bad_row
        self.dead_letter_topic = dead_letter_topic
        self.commit_interval_ms = to_millis(commit_interval_ms, "commit_interval_ms")
        if self.commit_interval_ms <= 0:
            raise ConfigError("commit_interval_ms must be positive")
        if max_batch_records <= 0:
            raise ConfigError("max_batch_records must be positive")
        self.max_batch_records = max_batch_records
        self.transaction_timeout_ms = to_millis(transaction_timeout_ms, "transaction_timeout_ms")
        if self.transaction_timeout_ms < 1000:
            raise ConfigError(
                "transaction_timeout_ms must be at least 1000: it bounds how long one batch's "
                "transaction may take, and how long a stuck instance may hold its locks"
            )
        if start_from not in ("earliest", "latest"):
            raise ConfigError(f"start_from={start_from!r} is unknown: use earliest or latest")
        self.start_from = start_from
        self.create_table = create_table
        self.offsets_table = offsets_table
        self.partitions = None if partitions is None else sorted(set(partitions))
        self.client_config = dict(client_config or {})
        self._stop = threading.Event()
        self._progress = SinkProgress(self.sink_id)
        self._lock = threading.Lock()

    # -- configuration -------------------------------------------------------------------------

    def bind(
        self, *, bootstrap_servers: str, client_config: Mapping[str, Any] | None = None
    ) -> PostgresSink:
        """This sink with an application's Kafka settings filled in where it has none."""
        bound = replace_sink(self)
        bound.bootstrap_servers = self.bootstrap_servers or bootstrap_servers
        if not self.client_config and client_config:
            bound.client_config = dict(client_config)
        return bound

    def _validate_runnable(self) -> None:
        if not self.dsn:
            raise ConfigError(
                "PostgresSink has no dsn: give the PostgreSQL connection string, e.g. "
                "postgresql://user@host:5432/db (passwords belong in PGPASSWORD or ~/.pgpass)"
            )
        if not self.bootstrap_servers:
            raise ConfigError("PostgresSink has no bootstrap_servers: give host:port of a broker")

    @property
    def group_id(self) -> str:
        """The consumer group its reads name: only looked up, never committed to (the offsets
        live in PostgreSQL), so its principal needs DESCRIBE on it (see fluvial acls)."""
        return f"fluvial-sink-{self.sink_id}"

    def describe(self) -> str:
        """One line saying what the sink copies where: its topics, table, mode and ``sink_id``."""
        return (
            f"{'+'.join(self.topics)} -> PostgreSQL table {self.table} ({self.mode}, "
            f"sink_id {self.sink_id})"
        )

    # -- running -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask :meth:`run` to commit its current batch and return."""
        self._stop.set()

    def progress(self) -> SinkProgress:
        """A snapshot of the sink's counters so far (safe to call from another thread)."""
        with self._lock:
            return replace(self._progress, committed=dict(self._progress.committed))

    def run(
        self,
        *,
        stop_at_end: bool = False,
        on_ready: Callable[[SinkProgress], None] | None = None,
    ) -> SinkProgress:
        """Run until :meth:`stop` (or, with ``stop_at_end``, until every partition is read to
        its end). Raises :class:`SinkFencedError` when a newer instance took over and
        :class:`BadRowError` on a bad row under ``on_bad_row="fail"``."""
        self._validate_runnable()
        runner = _Runner(self, stop_at_end=stop_at_end, on_ready=on_ready)
        try:
            runner.run()
        finally:
            runner.close()
        return self.progress()


def replace_sink(sink: PostgresSink) -> PostgresSink:
    """A copy of ``sink`` with fresh run state."""
    copy = PostgresSink.__new__(PostgresSink)
    copy.__dict__.update(sink.__dict__)
    copy._stop = threading.Event()
    copy._progress = SinkProgress(sink.sink_id)
    copy._lock = threading.Lock()
    return copy


class _Runner:
    """One run of a sink: its consumer, its database session and its loop."""

    def __init__(
        self,
        sink: PostgresSink,
        *,
        stop_at_end: bool,
        on_ready: Callable[[SinkProgress], None] | None,
    ) -> None:
        self.sink = sink
        self.stop_at_end = stop_at_end
        self.on_ready = on_ready
        assert sink.dsn is not None and sink.bootstrap_servers is not None
        self.store = SinkStore(
            sink.dsn, sink_id=sink.sink_id, table=sink.table, offsets_table=sink.offsets_table,
            upsert=sink.mode == "upsert", key_columns=sink.codec.key_columns,
            columns=sink.codec.columns, create_table=sink.create_table,
            transaction_timeout_ms=sink.transaction_timeout_ms,
        )  # fmt: skip
        self.consumer: Consumer | None = None
        self.dead_letters: DeadLetters | None = None
        self.partitions: list[TopicPartition] = []
        self.epoch = 0
        self.committed: dict[TopicPartition, int | None] = {}
        self.at_end: set[TopicPartition] = set()
        self._lag_checked = 0.0
        self.watchdog: Any = None

    def close(self) -> None:
        if self.watchdog is not None:
            watchdog.stop(self.watchdog)
        if self.consumer is not None:
            self.consumer.close()
        if self.dead_letters is not None:
            self.dead_letters.close()
        self.store.close()

    # -- start ---------------------------------------------------------------------------------

    def run(self) -> None:
        sink = self.sink
        self.consumer = Consumer(self._consumer_settings())
        self.partitions = self._find_partitions()
        if sink.dead_letter_topic:
            self.dead_letters = DeadLetters(
                sink.bootstrap_servers or "", sink.dead_letter_topic, sink.sink_id,
                sink.client_config,
            )  # fmt: skip
        self.store.connect()
        # Ends a transaction of this sink stuck mid-COPY past the timeout (see its module).
        self.watchdog = watchdog.start(
            sink.dsn or "", self.store.application_name, sink.transaction_timeout_ms
        )
        self.store.prepare()
        self.epoch, self.committed = self.store.claim(self.partitions)
        with sink._lock:
            sink._progress.epoch = self.epoch
            sink._progress.committed = _named(self.committed)
        self._assign()
        log.info("sink %s: epoch %d owns %s", sink.sink_id, self.epoch, self.partitions)
        if self.on_ready is not None:
            self.on_ready(sink.progress())
        while not sink._stop.is_set():
            batch = self._poll_batch()
            if batch:
                self._commit(batch)
            elif self.stop_at_end and self.at_end >= set(self.partitions):
                return

    def _consumer_settings(self) -> dict[str, Any]:
        sink = self.sink
        return {
            "bootstrap.servers": sink.bootstrap_servers,
            **sink.client_config,
            # Required by the client, never used to commit: the offsets live in PostgreSQL.
            "group.id": sink.group_id,
            "client.id": f"fluvial-sink-{sink.sink_id}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            # Offsets the log no longer holds are an error, never a silent jump.
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
        }

    def _find_partitions(self) -> list[TopicPartition]:
        assert self.consumer is not None
        metadata = self.consumer.list_topics(timeout=30)
        partitions = []
        for topic in self.sink.topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise ConfigError(
                    f"topic {topic!r} does not exist on {self.sink.bootstrap_servers}: check the "
                    "name (a sink reads existing topics; it never creates them)"
                )
            numbers = sorted(found.partitions)
            if self.sink.partitions is not None:
                unknown = sorted(set(self.sink.partitions) - set(numbers))
                if unknown:
                    raise ConfigError(
                        f"topic {topic!r} has partitions {numbers}; {unknown} do not exist"
                    )
                numbers = [p for p in numbers if p in self.sink.partitions]
            partitions += [(topic, p) for p in numbers]
        return partitions

    def _assign(self) -> None:
        assert self.consumer is not None
        default = OFFSET_BEGINNING if self.sink.start_from == "earliest" else OFFSET_END
        assignment = []
        for t, p in self.partitions:
            offset = self.committed[(t, p)]
            assignment.append(KafkaPartition(t, p, default if offset is None else offset))
        self.consumer.assign(assignment)
        self.at_end.clear()

    # -- the loop ------------------------------------------------------------------------------

    def _poll_batch(self) -> list[Any]:
        """Records until the batch is full or the commit interval has passed since its first."""
        assert self.consumer is not None
        sink = self.sink
        batch: list[Any] = []
        deadline: float | None = None
        while not sink._stop.is_set() and len(batch) < sink.max_batch_records:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            wait = 0.2 if deadline is None else min(0.2, deadline - now)
            wanted = min(1000, sink.max_batch_records - len(batch))
            for msg in self.consumer.consume(wanted, wait):
                error = msg.error()
                if error is None:
                    batch.append(msg)
                    self.at_end.discard((str(msg.topic()), int(msg.partition() or 0)))
                elif error.code() == KafkaError._PARTITION_EOF:
                    self.at_end.add((str(msg.topic()), int(msg.partition() or 0)))
                else:
                    raise self._consumer_error(error)
            if batch and deadline is None:
                deadline = time.monotonic() + sink.commit_interval_ms / 1000
            # In the loop: an idle sink waits here, and its lag must still come down to 0.
            self._refresh_lag(batch)
            if not batch and self.stop_at_end and self.at_end >= set(self.partitions):
                break
        self._refresh_lag(batch)
        return batch

    def _consumer_error(self, error: KafkaError) -> FluvialError:
        if error.code() == KafkaError._AUTO_OFFSET_RESET:
            return FluvialError(
                f"sink {self.sink.sink_id!r}: the offset stored in PostgreSQL is outside the "
                f"topic's log ({error.str()}): records were deleted by retention before the "
                "sink wrote them. Raise the topic's retention; to skip the gap knowingly, "
                f"delete the sink's rows from {self.sink.offsets_table} (it then starts from "
                f"start_from={self.sink.start_from!r})"
            )
        return FluvialError(f"sink {self.sink.sink_id!r}: reading Kafka failed: {error.str()}")

    def _commit(self, batch: list[Any]) -> None:
        sink = self.sink
        items, bad = self._rows(batch)
        next_offsets: dict[TopicPartition, int] = {}
        for msg in batch:
            next_offsets[(msg.topic(), msg.partition())] = msg.offset() + 1
        try:
            outcome = self.store.commit_batch(
                epoch=self.epoch, committed=self.committed, next_offsets=next_offsets,
                items=items, bad=bad, handle_bad=self._handle_bad,
            )  # fmt: skip
        except psycopg.errors.QueryCanceled as exc:
            raise FluvialError(
                f"sink {sink.sink_id!r}: a batch of {len(batch)} records took longer than "
                f"transaction_timeout_ms={sink.transaction_timeout_ms} and was rolled back: "
                "if the sink's process was paused meanwhile (SIGSTOP, a debugger, a suspended "
                "machine), start it again as it is; otherwise raise transaction_timeout_ms or "
                "lower max_batch_records"
            ) from exc
        except (ConnectionLost, psycopg.OperationalError) as exc:
            # The commit may or may not have landed: resume from what the database says.
            self._reconnect(exc)
            return
        self.committed.update(next_offsets)
        with sink._lock:
            progress = sink._progress
            progress.records_read += len(batch)
            progress.rows_written += outcome.rows_written
            progress.rows_deleted += outcome.rows_deleted
            progress.dead_letters += len(outcome.bad)
            progress.batches += 1
            progress.committed = _named(self.committed)
        self._refresh_lag(now=True)  # what is left once this batch is written

    def _rows(self, batch: list[Any]) -> tuple[list[Item], list[Item]]:
        codec = self.sink.codec
        upsert = self.sink.mode == "upsert"
        items: list[Item] = []
        bad: list[Item] = []
        for msg in batch:
            topic, key, value = msg.topic(), msg.key(), msg.value()
            ts_type, ts = msg.timestamp()
            item = Item(topic, msg.partition(), msg.offset(), key, value,
                        ts if ts_type else None, msg.headers())  # fmt: skip
            try:
                key_part = codec.key_part(topic, key)
                if upsert and key_part[0] is None:
                    raise BadRecord("a table row needs a key, and this record's key is null")
                value_part = codec.value_part(topic, value)
            except BadRecord as exc:
                item.error = str(exc)
                bad.append(item)
                continue
            meta = (topic, item.partition, item.offset,
                    None if item.timestamp_ms is None else millis_to_datetime(item.timestamp_ms))  # fmt: skip
            item.row = (*key_part, *value_part, *meta)
            item.identity = tuple(_hashable(k) for k in key_part)
            item.tombstone = value is None
            items.append(item)
        return items, bad

    def _handle_bad(self, bad: list[Item]) -> None:
        if self.sink.on_bad_row == "fail" or self.dead_letters is None:
            first = bad[0]
            raise BadRowError(
                f"sink {self.sink.sink_id!r}: record {first.where} cannot be written to "
                f"{self.sink.table!r}: {first.error}. Nothing of its batch was committed. Fix "
                "the record's producer or the table, or run with on_bad_row='dead_letter' "
                "(--dead-letter-topic) to set such records aside"
                + (f" ({len(bad) - 1} more bad record(s) in this batch)" if len(bad) > 1 else "")
            )
        # Sent and flushed before the database commit: a crash in between sends them again
        # (their headers name the source offset), but never loses one.
        self.dead_letters.send(bad)

    def _reconnect(self, cause: BaseException) -> None:
        sink = self.sink
        log.warning(
            "sink %s: lost PostgreSQL (%s); reconnecting. If this process was paused (SIGSTOP, "
            "a debugger, a suspended machine), the server ended its transaction after "
            "transaction_timeout_ms=%d: that batch was rolled back and is written again",
            sink.sink_id, str(cause).splitlines()[0] if str(cause) else repr(cause),
            sink.transaction_timeout_ms,
        )  # fmt: skip
        deadline = time.monotonic() + max(60.0, sink.transaction_timeout_ms / 1000)
        while True:
            try:
                self.store.connect()
                state = self.store.current(self.partitions)
                break
            except (ConnectionLost, psycopg.OperationalError) as exc:
                if time.monotonic() > deadline or sink._stop.is_set():
                    raise FluvialError(
                        f"sink {sink.sink_id!r}: cannot reach PostgreSQL again: {exc}"
                    ) from exc
                time.sleep(1.0)
        for tp in self.partitions:
            _offset, epoch = state.get(tp, (None, -1))
            if epoch != self.epoch:
                raise SinkFencedError(
                    f"sink {sink.sink_id!r} was fenced while its connection was down: "
                    f"partition {tp[0]}[{tp[1]}] is held by epoch {epoch} (this instance has "
                    f"epoch {self.epoch}); another instance took over, so this one stops"
                )
        self.committed = {tp: state[tp][0] for tp in self.partitions}
        with sink._lock:
            sink._progress.reconnects += 1
            sink._progress.committed = _named(self.committed)
        self._assign()

    def _refresh_lag(self, pending: list[Any] | None = None, *, now: bool = False) -> None:
        """Records not yet committed: those past the consumer's position, plus ``pending``
        (read, not yet committed). After each commit (``now``), and every
        :data:`LAG_INTERVAL_S` between them. Measured from the consumer's position, which moves
        past transaction markers, not from the committed offsets, which stop before a marker:
        a caught-up sink shows 0."""
        checked = time.monotonic()
        if self.consumer is None or (not now and checked - self._lag_checked < LAG_INTERVAL_S):
            return
        self._lag_checked = checked
        lag = len(pending or [])
        try:
            positions = self.consumer.position([KafkaPartition(*tp) for tp in self.partitions])
            for tp, position in zip(self.partitions, positions, strict=True):
                # The end the last fetch reported (no round trip), else the broker's answer.
                _low, high = self.consumer.get_watermark_offsets(KafkaPartition(*tp), cached=True)
                if high < 0:
                    _low, high = self.consumer.get_watermark_offsets(KafkaPartition(*tp), timeout=2)
                start = position.offset if position.offset >= 0 else self.committed.get(tp)
                lag += max(0, high - (start or 0))
        except KafkaException:
            return
        with self.sink._lock:
            self.sink._progress.lag = lag


def _hashable(value: Any) -> Any:
    obj = getattr(value, "obj", None)  # a Jsonb wrapper: compare by canonical JSON text
    if obj is not None:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return value


def _named(offsets: dict[TopicPartition, int | None]) -> dict[str, int]:
    return {f"{t}[{p}]": o for (t, p), o in offsets.items() if o is not None}
