"""PostgresSink on a real Kafka and a real PostgreSQL: what lands in the table, and when."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial import serdes
from fluvial.errors import ConfigError
from fluvial.records import Window, Windowed
from fluvial.sinks import BadRowError, PostgresSink, SinkFencedError
from tests.event_times import event_time_base_ms
from tests.sinks.conftest import query

pytestmark = [pytest.mark.kafka]

BASE = event_time_base_ms()


def produce(
    bootstrap: str, topic: str, records: list[tuple], *, partition: int | None = None
) -> None:
    """``records``: (key bytes, value bytes, timestamp ms)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for key, value, ts in records:
        kwargs = {"key": key, "value": value, "timestamp": ts}
        if partition is not None:
            kwargs["partition"] = partition
        producer.produce(topic, **kwargs)
    assert producer.flush(30) == 0


def offsets(dsn: str, sink_id: str) -> dict[tuple[str, int], tuple[int | None, int]]:
    rows = query(
        dsn,
        "SELECT topic, partition, next_offset, epoch FROM fluvial_sink_offsets WHERE sink_id = %s",
        [sink_id],
    )
    return {(t, p): (o, e) for t, p, o, e in rows}


def ms(value: dt.datetime) -> int:
    return int(value.timestamp() * 1000)


def test_a_stream_lands_once_per_record_and_resumes_from_the_database_offsets(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("views", partitions=2)
    table = table_name("views")
    views = [
        (f"user-{i % 7}".encode(), json.dumps({"category": f"c{i % 3}", "period": i}).encode(),
         BASE + i)
        for i in range(300)
    ]  # fmt: skip
    produce(bootstrap_servers, topic, views)

    def sink() -> PostgresSink:
        return PostgresSink(
            topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers,
            value_serde="json", value_schema="category string, period long",
            max_batch_records=64, commit_interval_ms=50,
        )  # fmt: skip

    progress = sink().run(stop_at_end=True)
    assert progress.rows_written == 300
    rows = query(
        pg_dsn,
        f"SELECT key, category, period, kafka_topic, kafka_partition, kafka_offset, "
        f"kafka_timestamp FROM {table}",
    )
    assert len(rows) == 300
    assert sorted(r[2] for r in rows) == list(range(300))
    by_period = {r[2]: r for r in rows}
    assert by_period[10][:4] == ("user-3", "c1", 10, topic)
    assert ms(by_period[10][6]) == BASE + 10
    # Offsets in the database are the next offset of each partition: the table's max + 1.
    stored = offsets(pg_dsn, table)
    for (t, p), (next_offset, epoch) in stored.items():
        assert t == topic and epoch == 1
        assert next_offset == 1 + max(r[5] for r in rows if r[4] == p)

    # A second run resumes where the first committed: nothing is written twice.
    assert sink().run(stop_at_end=True).rows_written == 0
    more = [(b"late", json.dumps({"category": "x", "period": 1000 + i}).encode(), BASE)
            for i in range(5)]  # fmt: skip
    produce(bootstrap_servers, topic, more)
    third = sink().run(stop_at_end=True)
    assert third.rows_written == 5 and third.epoch == 3
    assert query(pg_dsn, f"SELECT count(*), count(DISTINCT period) FROM {table}") == [(305, 305)]


def test_a_table_topic_upserts_by_key_and_tombstones_delete(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("totals", partitions=3)
    table = table_name("totals")
    long = serdes.long()
    oracle: dict[str, int] = {}
    records = []
    for i in range(400):
        key = f"k{i % 37}"
        if i % 11 == 0:
            records.append((key.encode(), None, BASE + i))
            oracle.pop(key, None)
        else:
            records.append((key.encode(), long.serialize(topic, i), BASE + i))
            oracle[key] = i
    produce(bootstrap_servers, topic, records)

    sink = PostgresSink(
        topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers, mode="upsert",
        value_serde="long", max_batch_records=50, commit_interval_ms=50,
    )  # fmt: skip
    progress = sink.run(stop_at_end=True)

    assert dict(query(pg_dsn, f"SELECT key, value FROM {table}")) == oracle
    assert progress.rows_deleted > 0
    # The row remembers the record that set it.
    [(offset_ts,)] = query(pg_dsn, f"SELECT kafka_timestamp FROM {table} WHERE key = 'k5'")
    assert ms(offset_ts) == BASE + max(i for i in range(400) if i % 37 == 5 and i % 11)


def test_windowed_keys_become_key_window_start_and_window_end(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("counts")
    table = table_name("counts")
    key_serde = serdes.time_windowed(serdes.string(), 5000)
    long = serdes.long()
    start = BASE - BASE % 5000
    records = []
    for count in (1, 2, 3):  # revisions of one window: the last wins
        records.append((key_serde.serialize(topic, Windowed("news", Window(start, start + 5000))),
                        long.serialize(topic, count), start))  # fmt: skip
    records.append((key_serde.serialize(topic, Windowed("news", Window(start + 5000, start + 10000))),
                    long.serialize(topic, 7), start + 5000))  # fmt: skip
    produce(bootstrap_servers, topic, records)

    PostgresSink(
        topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers, mode="upsert",
        value_serde="long", window_size_ms=5000,
    ).run(stop_at_end=True)  # fmt: skip

    rows = query(pg_dsn, f"SELECT key, window_start, window_end, value FROM {table} ORDER BY 2")
    assert [(k, ms(s), ms(e), v) for k, s, e, v in rows] == [
        ("news", start, start + 5000, 3),
        ("news", start + 5000, start + 10000, 7),
    ]


def read_all(bootstrap: str, topic: str) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.time_ns()}",
                         "enable.partition.eof": True})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            break
        out.append(msg)
    consumer.close()
    return out


def test_bad_rows_go_to_the_dead_letter_topic_and_the_rest_is_written(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("views")
    dead = topic_factory("dead")
    table = table_name("views")
    # A constraint of the user's own: PostgreSQL rejects negative periods.
    # And a deferred one, which a batch meets at its COMMIT unless the sink checks it earlier.
    query(pg_dsn, f"CREATE TABLE {table} (key text, category text, period bigint CHECK (period >= 0), "
                  "kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint "
                  "NOT NULL, kafka_timestamp timestamptz, "
                  "PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset), "
                  "UNIQUE (category, period) DEFERRABLE INITIALLY DEFERRED)")  # fmt: skip
    records = []
    for i in range(100):
        value = {"category": "c", "period": i}
        if i == 17:
            value["period"] = "seventeen"  # a type error, found before the database
        if i in (40, 41, 90):
            value["period"] = -i  # a constraint violation, found by PostgreSQL
        records.append((f"k{i}".encode(), json.dumps(value).encode(), BASE + i))
    records.append((b"k-not-json", b"{not json", BASE))
    records.append((b"k-again", json.dumps({"category": "c", "period": 99}).encode(), BASE))
    produce(bootstrap_servers, topic, records, partition=0)

    progress = PostgresSink(
        topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers,
        value_serde="json", value_schema="category string, period long",
        on_bad_row="dead_letter", dead_letter_topic=dead, create_table=False,
    ).run(stop_at_end=True)  # fmt: skip

    periods = sorted(r[0] for r in query(pg_dsn, f"SELECT period FROM {table}"))
    assert periods == [i for i in range(100) if i not in (17, 40, 41, 90)]
    assert progress.dead_letters == 6
    letters = read_all(bootstrap_servers, dead)
    assert sorted(m.key() for m in letters) == sorted(
        [b"k17", b"k40", b"k41", b"k90", b"k-not-json", b"k-again"]
    )
    headers = {m.key(): dict(m.headers()) for m in letters}
    assert b"not a valid bigint" in headers[b"k17"]["fluvial.sink.error"]
    assert b"check constraint" in headers[b"k40"]["fluvial.sink.error"]
    assert headers[b"k90"]["fluvial.source.offset"] == b"90"
    assert headers[b"k90"]["fluvial.source.topic"] == topic.encode()
    assert b"duplicate key value" in headers[b"k-again"]["fluvial.sink.error"]
    assert offsets(pg_dsn, table)[(topic, 0)][0] == 102


def test_a_bad_row_stops_the_sink_and_nothing_of_its_batch_commits(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("views")
    table = table_name("views")
    records = [(b"k", str(i).encode(), BASE + i) for i in range(10)]
    records[6] = (b"k", b"\x00\x01", BASE)  # not 8 bytes: not a long
    long = serdes.long()
    records = [(k, long.serialize(topic, int(v)) if i != 6 else v, ts)
               for i, (k, v, ts) in enumerate(records)]  # fmt: skip
    produce(bootstrap_servers, topic, records, partition=0)

    sink = PostgresSink(topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers,
                        value_serde="long")  # fmt: skip
    with pytest.raises(BadRowError, match=rf"{topic}\[0\]@6 .*expected 8 bytes"):
        sink.run(stop_at_end=True)
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(0,)]
    assert offsets(pg_dsn, table)[(topic, 0)][0] is None
    # It stops again at the same record on restart: never skipped.
    with pytest.raises(BadRowError):
        PostgresSink(topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers,
                     value_serde="long").run(stop_at_end=True)  # fmt: skip


# A table of the user's own, for the upsert bad-row tests: PostgreSQL rejects a label longer
# than three characters (it does not fit its column) and a negative n (a constraint).
CHECKED_TOTALS = (
    "CREATE TABLE {} (key text PRIMARY KEY, label varchar(3), n integer CHECK (n >= 0), "
    "kafka_topic text NOT NULL, kafka_partition integer NOT NULL, kafka_offset bigint NOT NULL, "
    "kafka_timestamp timestamptz)"
)


def total(n: object, label: str = "ok") -> bytes:
    return json.dumps({"label": label, "n": n}).encode()


def test_bad_records_of_a_table_go_to_the_dead_letter_topic_and_each_key_keeps_its_last_good_value(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("totals")
    dead = topic_factory("dead")
    table = table_name("totals")
    query(pg_dsn, CHECKED_TOTALS.format(table))
    # (key, value, why it is bad or None). No good record of a key follows one that PostgreSQL
    # rejects, so what must happen does not depend on where the sink cuts its batches.
    records: list[tuple[bytes | None, bytes | None, str | None]] = [
        (b"f", total(7), None),
        (b"a", total(1, "a1"), None),
        (b"b", total(5), None),
        (b"c", total(3), None),
        (b"e", total(9), None),
    ]
    for i in range(120):
        records.append((f"k{i % 30}".encode(), total(i), None))
        if i == 20:
            records += [(b"c2", total("two"), "is not a valid integer")]
        if i == 50:
            records += [
                (None, total(1), "needs a key"),
                (b"c2", total(22), None),
                (b"d", total(99_999_999_999), "is not a valid integer"),  # out of its range
                (b"e", None, None),
            ]
        if i == 80:
            # Good and bad records of one key side by side, so that they usually share a batch:
            # the bad one is rejected after the batch's reduction had dropped the good one.
            records += [
                (b"a", total(2, "a2"), None),
                (b"a", total(3, "toolong"), "value too long"),
                (b"b", total(6), None),
                (b"b", total(-1), "check constraint"),
                (b"b", total(-2), "check constraint"),
                (b"c", total("three"), "is not a valid integer"),
                (b"g", total(4, "toolong"), "value too long"),
            ]
    records += [
        (b"e", total(-3), "check constraint"),  # after a tombstone: the key stays deleted
        (b"f", total(-4), "check constraint"),
    ]
    produce(bootstrap_servers, topic, [(k, v, BASE + i) for i, (k, v, _why) in enumerate(records)],
            partition=0)  # fmt: skip

    progress = PostgresSink(
        topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers, mode="upsert",
        value_serde="json", value_schema="label string, n int", on_bad_row="dead_letter",
        dead_letter_topic=dead, max_batch_records=40, commit_interval_ms=50,
    ).run(stop_at_end=True)  # fmt: skip

    # The oracle: the last good record of each key, as if the bad ones were never produced.
    last_good: dict[str, tuple[int, str, int]] = {}
    for offset, (key, value, why) in enumerate(records):
        if why is not None:
            continue
        assert key is not None
        if value is None:
            last_good.pop(key.decode(), None)
        else:
            fields = json.loads(value)
            last_good[key.decode()] = (fields["n"], fields["label"], offset)
    rows = query(pg_dsn, f"SELECT key, n, label, kafka_offset FROM {table}")
    assert {key: (n, label, offset) for key, n, label, offset in rows} == last_good
    assert last_good["a"][:2] == (2, "a2") and last_good["b"][0] == 6 and last_good["f"][0] == 7
    assert {"d", "e", "g"}.isdisjoint(last_good)

    bad = {offset: why for offset, (_k, _v, why) in enumerate(records) if why is not None}
    assert progress.dead_letters == len(bad) == 10
    letters = read_all(bootstrap_servers, dead)
    by_offset = {int(dict(m.headers())["fluvial.source.offset"]): m for m in letters}
    assert len(letters) == len(by_offset) and sorted(by_offset) == sorted(bad)
    for offset, why in bad.items():
        letter = by_offset[offset]
        headers = dict(letter.headers())
        assert why.encode() in headers["fluvial.sink.error"], (offset, headers)
        assert headers["fluvial.source.topic"] == topic.encode()
        assert headers["fluvial.source.partition"] == b"0"
        key, value, _why = records[offset]
        assert (letter.key(), letter.value(), letter.timestamp()[1]) == (key, value, BASE + offset)
    assert offsets(pg_dsn, table)[(topic, 0)][0] == len(records)


@pytest.mark.parametrize(
    ("bad_key", "bad_value", "reason"),
    [
        (b"k3", total(-1), "rejected by PostgreSQL: new row .* violates check constraint"),
        (b"k3", total("x"), "value field 'n': 'x' \\(str\\) is not a valid integer"),
        (None, total(1), "a table row needs a key"),
    ],
    ids=["rejected", "not an integer", "null key"],
)
def test_a_bad_record_stops_a_table_sink_and_nothing_of_its_batch_commits(
    bad_key: bytes | None, bad_value: bytes, reason: str,
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name,
) -> None:  # fmt: skip
    topic = topic_factory("totals")
    table = table_name("totals")
    query(pg_dsn, CHECKED_TOTALS.format(table))

    def sink() -> PostgresSink:
        return PostgresSink(topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers,
                            mode="upsert", value_serde="json", value_schema="label string, n int",
                            commit_interval_ms=2000)  # fmt: skip

    produce(bootstrap_servers, topic, [(f"k{i}".encode(), total(i), BASE + i) for i in range(5)],
            partition=0)  # fmt: skip
    assert sink().run(stop_at_end=True).rows_written == 5
    before = query(pg_dsn, f"SELECT key, n, kafka_offset FROM {table} ORDER BY key")

    # One batch (all of it is in the topic before the sink reads it, well within the commit
    # interval): updates, a tombstone, a new key, and a bad record after a good one of its key.
    batch = [(b"k0", total(10)), (b"k1", total(11)), (b"k2", None), (b"k3", total(13)),
             (bad_key, bad_value), (b"k5", total(15))]  # fmt: skip
    produce(bootstrap_servers, topic, [(k, v, BASE + 5 + i) for i, (k, v) in enumerate(batch)],
            partition=0)  # fmt: skip
    with pytest.raises(BadRowError, match=rf"{topic}\[0\]@9 .*{reason}"):
        sink().run(stop_at_end=True)
    assert query(pg_dsn, f"SELECT key, n, kafka_offset FROM {table} ORDER BY key") == before
    assert offsets(pg_dsn, table)[(topic, 0)][0] == 5
    # It stops again at the same record on restart: never skipped.
    with pytest.raises(BadRowError, match=rf"{topic}\[0\]@9 "):
        sink().run(stop_at_end=True)
    assert query(pg_dsn, f"SELECT key, n, kafka_offset FROM {table} ORDER BY key") == before


def test_a_new_instance_fences_the_old_one(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("views")
    table = table_name("views")
    produce(bootstrap_servers, topic, [(b"k", b"v0", BASE)])

    def sink() -> PostgresSink:
        return PostgresSink(topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers,
                            commit_interval_ms=20)  # fmt: skip

    old = sink()
    failures: list[BaseException] = []

    def run_old() -> None:
        try:
            old.run()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run_old)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while old.progress().rows_written < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        new = sink()
        new_thread = threading.Thread(target=new.run)
        new_thread.start()
        while new.progress().epoch == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert new.progress().epoch == 2
        produce(bootstrap_servers, topic, [(b"k", f"v{i}".encode(), BASE) for i in range(1, 50)])
        thread.join(60)
        assert not thread.is_alive()
        assert len(failures) == 1 and isinstance(failures[0], SinkFencedError)
        assert "epoch 2" in str(failures[0])
        while new.progress().rows_written < 49 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        old.stop()
        new.stop()
        new_thread.join(60)
    values = [r[0] for r in query(pg_dsn, f"SELECT value FROM {table} ORDER BY kafka_offset")]
    assert values == [f"v{i}" for i in range(50)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"value_serde": "avro"}, "value_serde='avro' is unknown"),
        ({"value_serde": "json", "value_schema": "period"}, "is not 'name type'"),
        ({"value_serde": "json", "value_schema": "period decimal"}, "unknown type 'decimal'"),
        ({"value_schema": "period long"}, "needs value_serde='json'"),
        ({"value_serde": "json", "value_schema": "kafka_offset long"}, "clash"),
        ({"mode": "merge"}, "mode='merge' is unknown"),
        ({"on_bad_row": "dead_letter"}, "needs dead_letter_topic"),
        ({"on_bad_row": "skip"}, r"on_bad_row='skip' is unknown: use 'fail' \(stop the sink\)"),
        ({"dead_letter_topic": "d"}, "on_bad_row='fail' stops at bad rows"),
        ({"window_size_ms": 5000, "session_windows": True}, "exclude each other"),
        ({"sink_id": "a b"}, "sink_id 'a b' is invalid"),
    ],
)
def test_configuration_errors_are_found_before_anything_runs(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PostgresSink("t", table="t", dsn="postgresql://x", bootstrap_servers="x:1", **kwargs)


def test_an_existing_table_without_the_sinks_columns_or_key_is_refused(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    topic = topic_factory("totals")
    table = table_name("totals")
    query(pg_dsn, f"CREATE TABLE {table} (key text, value bigint)")
    with pytest.raises(ConfigError, match=r"lacks the column\(s\) \['kafka_topic'"):
        PostgresSink(topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers,
                     mode="upsert", value_serde="long").run(stop_at_end=True)  # fmt: skip
    query(pg_dsn, f"ALTER TABLE {table} ADD COLUMN kafka_topic text, ADD COLUMN kafka_partition "
                  "int, ADD COLUMN kafka_offset bigint, ADD COLUMN kafka_timestamp timestamptz")  # fmt: skip
    with pytest.raises(ConfigError, match=r"no primary key or unique index on \(key\)"):
        PostgresSink(topic, table=table, dsn=pg_dsn, bootstrap_servers=bootstrap_servers,
                     mode="upsert", value_serde="long").run(stop_at_end=True)  # fmt: skip
    with pytest.raises(psycopg.Error):
        query(pg_dsn, "SELECT 1 FROM no_such_table")


def test_the_live_lag_reaches_zero_once_everything_is_written(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name
) -> None:
    """Read after each commit (and on a timer between commits): never the backlog of before
    the last batch."""
    topic = topic_factory("views", partitions=2)
    produce(bootstrap_servers, topic, [(b"k%d" % i, b"v", BASE + i) for i in range(200)])
    sink = PostgresSink(topic, table=table_name("views"), dsn=pg_dsn,
                        bootstrap_servers=bootstrap_servers, commit_interval_ms=50)  # fmt: skip
    thread = threading.Thread(target=sink.run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while sink.progress().rows_written < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sink.progress().rows_written == 200
        written = time.monotonic()
        while sink.progress().lag != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sink.progress().lag == 0
        assert time.monotonic() - written < 5  # after the commit, not seconds later
    finally:
        sink.stop()
        thread.join(60)
