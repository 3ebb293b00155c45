"""The sink under kill -9 and SIGSTOP, with input flowing: exactly once, checked row by row."""

from __future__ import annotations

import functools
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from confluent_kafka import KafkaError, Message, Producer

from fluvial import serdes
from tests.event_times import event_time_base_ms
from tests.runtime.harness import wait_until
from tests.sinks.conftest import query
from tests.sinks.harness import (
    SinkProcess,
    in_transaction,
    kill9_inside_a_transaction,
    sessions,
    slow_statements,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LONG = serdes.long()


class Fed(NamedTuple):
    """A record the feeder committed, and where it landed."""

    seq: int
    key: bytes
    value: bytes | None
    partition: int
    offset: int


class Feeder(threading.Thread):
    """Produces records in Kafka transactions while the test crashes the sink, until told to
    stop (or ``records`` are out); one in four transactions aborts, so a sink that read
    uncommitted records would show extra rows."""

    def __init__(
        self, bootstrap: str, topic: str, make: Callable[[int], tuple[bytes, bytes | None]],
        *, records: int, pause_s: float, seed: int,
    ) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.make = bootstrap, topic, make
        self.records, self.pause_s = records, pause_s
        self.rng = random.Random(seed)
        self.committed: list[Fed] = []
        self._placed: dict[int, tuple[int, int]] = {}  # seq: (partition, offset)
        self.aborted = 0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.flowing = threading.Event()  # cleared: the feeder holds before its next transaction
        self.flowing.set()

    def run(self) -> None:
        try:
            self._feed()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self) -> None:
        self.done.set()
        self.flowing.set()
        self.join(120)
        assert not self.is_alive()
        assert self.error is None, self.error

    def _delivered(self, seq: int, err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        self._placed[seq] = (msg.partition(), msg.offset())

    def _feed(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap,
                             "transactional.id": f"feeder-{self.topic}", "linger.ms": 5})  # fmt: skip
        producer.init_transactions(30)
        base = event_time_base_ms()
        per_txn = 20
        for start in range(0, self.records, per_txn):
            self.flowing.wait()
            if self.done.is_set():
                break
            producer.begin_transaction()
            self._placed.clear()
            batch = []
            for seq in range(start, min(start + per_txn, self.records)):
                key, value = self.make(seq)
                producer.produce(self.topic, key=key, value=value, timestamp=base + seq,
                                 on_delivery=functools.partial(self._delivered, seq))  # fmt: skip
                batch.append((seq, key, value))
            # Every record's offset is known, and an aborted one is in the log for the sink to skip.
            assert producer.flush(30) == 0
            if self.rng.random() < 0.25:
                producer.abort_transaction(30)
                self.aborted += 1
            else:
                producer.commit_transaction(30)
                self.committed += [Fed(seq, key, value, *self._placed.pop(seq))
                                   for seq, key, value in batch]  # fmt: skip
            time.sleep(self.pause_s)


def crash_repeatedly(sink: SinkProcess, *, kills: int, seed: int) -> int:
    """kill -9 the sink ``kills`` times while the feeder runs: every other time inside an open
    database transaction (its rows written, its offsets not yet moved), otherwise at a random
    moment. Returns how many kills pg_stat_activity confirmed inside a transaction."""
    rng = random.Random(seed)
    confirmed = 0
    for n in range(kills):
        if n % 2 == 0:
            confirmed += kill9_inside_a_transaction(sink)
        else:
            time.sleep(rng.uniform(0.2, 1.5))  # where this kill lands is left to chance
            sink.kill9()
        sink.start()
        sink.wait_ready()
    return confirmed


def written_through(dsn: str, sink_id: str, records: list[Fed]) -> bool:
    """Whether the sink's committed offsets (in PostgreSQL) have passed every one of
    ``records``: then everything they should leave in the table is there."""
    last: dict[int, int] = {}
    for record in records:
        last[record.partition] = max(last.get(record.partition, -1), record.offset)
    committed = dict(
        query(
            dsn,
            "SELECT partition, next_offset FROM fluvial_sink_offsets WHERE sink_id = %s",
            [sink_id],
        )
    )
    return all((committed.get(p) or 0) > offset for p, offset in last.items())


def test_a_stream_sink_killed_again_and_again_writes_each_record_exactly_once(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name, tmp_path: Path
) -> None:
    topic = topic_factory("events", partitions=2)
    table = table_name("events")
    sink = SinkProcess(pg_dsn, table, ["--topic", topic, "--table", table,
                                       "--bootstrap-servers", bootstrap_servers,
                                       "--commit-interval-ms", "100",
                                       "--max-batch-records", "200"], tmp_path)  # fmt: skip
    feeder = Feeder(bootstrap_servers, topic, lambda seq: (f"k{seq % 13}".encode(), f"e{seq}".encode()),
                    records=20_000, pause_s=0.1, seed=1)  # fmt: skip
    sink.start()
    try:
        sink.wait_ready()
        feeder.start()
        inside = crash_repeatedly(sink, kills=12, seed=2)
        feeder.finish()
        wait_until(lambda: written_through(pg_dsn, table, feeder.committed), 180,
                   "the sink to commit past the last committed record")  # fmt: skip
        assert sink.stop() == 0, sink.output()
    finally:
        feeder.done.set()
        sink.stop()
    assert inside == 6, "a kill meant for inside a transaction was not confirmed there"
    assert feeder.aborted > 0
    rows = query(pg_dsn, f"SELECT value, key, kafka_partition, kafka_offset FROM {table}")
    values = sorted(v for v, _k, _p, _o in rows)
    expected = sorted(r.value.decode() for r in feeder.committed)
    assert len(values) == len(set(values)), "a record was written twice"
    assert values == expected, (
        f"lost {sorted(set(expected) - set(values))[:5]}, "
        f"extra (uncommitted input?) {sorted(set(values) - set(expected))[:5]}"
    )
    # Every row sits under the partition and offset its record had: the identity is real.
    assert sorted(rows) == sorted(
        (r.value.decode(), r.key.decode(), r.partition, r.offset) for r in feeder.committed
    )


def test_a_table_sink_killed_again_and_again_ends_with_the_final_value_per_key(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name, tmp_path: Path
) -> None:
    topic = topic_factory("totals", partitions=3)
    table = table_name("totals")

    def make(seq: int) -> tuple[bytes, bytes | None]:
        key = f"k{seq * 7 % 50}".encode()
        return key, None if seq % 9 == 0 else LONG.serialize(topic, seq)

    sink = SinkProcess(pg_dsn, table, ["--topic", topic, "--table", table, "--mode", "upsert",
                                       "--value-serde", "long",
                                       "--bootstrap-servers", bootstrap_servers,
                                       "--commit-interval-ms", "100",
                                       "--max-batch-records", "150"], tmp_path)  # fmt: skip
    feeder = Feeder(bootstrap_servers, topic, make, records=20_000, pause_s=0.1, seed=3)
    sink.start()
    try:
        sink.wait_ready()
        feeder.start()
        inside = crash_repeatedly(sink, kills=12, seed=4)
        feeder.finish()
        wait_until(lambda: written_through(pg_dsn, table, feeder.committed), 180,
                   "the sink to commit past the last committed record")  # fmt: skip
        assert sink.stop() == 0, sink.output()
    finally:
        feeder.done.set()
        sink.stop()
    assert inside == 6, "a kill meant for inside a transaction was not confirmed there"
    oracle: dict[str, int] = {}
    for record in sorted(feeder.committed, key=lambda r: r.seq):
        if record.value is None:
            oracle.pop(record.key.decode(), None)
        else:
            oracle[record.key.decode()] = record.seq
    assert feeder.aborted > 0 and len(oracle) > 10
    assert _table(pg_dsn, table) == oracle


def _table(dsn: str, table: str) -> dict[str, int]:
    return dict(query(dsn, f"SELECT key, value FROM {table}"))


@pytest.mark.parametrize("where", ["inside a transaction", "between transactions"])
def test_a_stopped_zombie_is_fenced_by_its_successor_and_its_commit_refused(
    where: str, bootstrap_servers: str, pg_dsn: str, topic_factory, table_name, tmp_path: Path
) -> None:
    topic = topic_factory("events")
    table = table_name("zombie")
    args = ["--topic", topic, "--table", table, "--bootstrap-servers", bootstrap_servers,
            "--commit-interval-ms", "50", "--max-batch-records", "20"]  # fmt: skip
    zombie = SinkProcess(pg_dsn, table, args, tmp_path / "zombie")
    successor = SinkProcess(pg_dsn, table, args, tmp_path / "successor")
    feeder = Feeder(bootstrap_servers, topic, lambda seq: (b"k", f"e{seq}".encode()),
                    records=20_000, pause_s=0.05, seed=5)  # fmt: skip
    zombie.start()
    try:
        zombie.wait_ready()
        slow_statements(pg_dsn, table, 0.3)
        feeder.start()
        wait_until(lambda: query(pg_dsn, f"SELECT count(*) FROM {table}")[0][0] > 0, 60,
                   "the first rows")  # fmt: skip

        def stopped_where_wanted() -> bool:
            if where == "inside a transaction":
                wait_until(lambda: in_transaction(pg_dsn, table), 60, "a transaction",
                           interval_s=0.005)  # fmt: skip
            else:
                # Fed faster than it writes, the sink is between transactions only for an
                # instant; with the feeder held it drains what it has read and then waits.
                feeder.flowing.clear()
                wait_until(lambda: not in_transaction(pg_dsn, table), 120, "no transaction",
                           interval_s=0.05)  # fmt: skip
            zombie.signal(signal.SIGSTOP)
            time.sleep(0.5)  # a statement running in the server finishes meanwhile
            states = sessions(pg_dsn, table)
            wanted = where == "inside a transaction"
            if any(in_xact for _p, _s, in_xact, _w in states) == wanted:
                return True
            zombie.signal(signal.SIGCONT)
            return False

        wait_until(stopped_where_wanted, 120, f"the zombie stopped {where}", interval_s=0.1)
        feeder.flowing.set()
        before = query(pg_dsn, f"SELECT count(*) FROM {table}")[0][0]

        successor.start()
        successor.wait_ready()  # its claim ends the zombie's open transaction, if any
        wait_until(lambda: query(pg_dsn, f"SELECT count(*) FROM {table}")[0][0] > before, 60,
                   "the successor to write")  # fmt: skip
        zombie.signal(signal.SIGCONT)
        assert zombie.proc.wait(60) == 3, zombie.output()  # EXIT_FENCED
        assert "fenced" in zombie.output()
        if where == "inside a transaction":
            assert "ending an earlier instance's open transaction" in successor.output()

        feeder.finish()
        expected = sorted(r.value.decode() for r in feeder.committed)
        wait_until(lambda: query(pg_dsn, f"SELECT count(*) FROM {table}")[0][0] >= len(expected),
                   120, "the successor to catch up")  # fmt: skip
        assert successor.stop() == 0, successor.output()
    finally:
        feeder.done.set()
        feeder.flowing.set()
        zombie.stop()
        successor.stop()
    values = sorted(r[0] for r in query(pg_dsn, f"SELECT value FROM {table}"))
    assert values == expected
