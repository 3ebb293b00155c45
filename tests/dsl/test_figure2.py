"""The paper's Figure 2 pipeline, as a transcript: records in (out of order), revisions out.

filter -> map -> group_by_key -> 5 s windows with 2 s grace -> count -> to. Each update emits a
revised count at once; a late record inside grace revises its window; a record later than grace
is dropped, counted, and leaves the output untouched.
"""

from __future__ import annotations

import struct

import pytest

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.records import Window, Windowed
from fluvial.testing import TopologyTestDriver

SIZE, GRACE = 5000, 2000


def figure2():
    builder = StreamsBuilder()
    (
        builder.stream("pageview-events", key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=SIZE, grace_ms=GRACE))
        .count()
        .to_stream()
        .to("pageview-windowed-counts")
    )
    return builder.build()


def view(category: str, period: int = 40000) -> dict:
    return {"category": category, "period": period}


# (user, page view, timestamp) in arrival order, and the revision each one causes (or None).
TRANSCRIPT = [
    # record                           expected revision (key, window start, count, timestamp)
    (("u1", view("news"), 1000), ("news", 0, 1, 1000)),
    (("u2", view("sport"), 1500), ("sport", 0, 1, 1500)),
    (("u3", view("news", period=10), 1600), None),  # filtered out: period too short
    (("u1", view("news"), 6000), ("news", 5000, 1, 6000)),
    (("u4", view("news"), 3000), ("news", 0, 2, 3000)),  # out of order, window still open
    (
        ("u5", view("news"), 8000),
        ("news", 5000, 2, 8000),
    ),  # stream time 8000: [0,5000) closes at 7000
    (("u6", view("news"), 4999), None),  # later than grace: dropped, output untouched
    (("u7", view("sport"), 10500), ("sport", 10000, 1, 10500)),
    (("u8", view("news"), 9999), ("news", 5000, 3, 9999)),  # late but inside grace (close 10000)
    (
        ("u9", view("news"), 12000),
        ("news", 10000, 1, 12000),
    ),  # stream time 12000: closes [5000,10000)
    (("u0", view("news"), 7000), None),  # dropped: [5000,10000) closed at stream time 12000
]


@pytest.mark.parametrize("step", range(len(TRANSCRIPT)))
def test_each_record_emits_exactly_its_revision(step, store_type):
    with TopologyTestDriver(figure2(), store_type=store_type) as driver:
        inp = driver.create_input_topic("pageview-events", serdes.string(), serdes.json())
        out = driver.create_output_topic(
            "pageview-windowed-counts", serdes.time_windowed(serdes.string(), SIZE), serdes.long()
        )
        for (user, page_view, ts), _ in TRANSCRIPT[:step]:
            inp.pipe_input(user, page_view, timestamp_ms=ts)
        out.read_records()
        (user, page_view, ts), expected = TRANSCRIPT[step]
        inp.pipe_input(user, page_view, timestamp_ms=ts)
        got = [
            (r.key.key, r.key.window.start_ms, r.value, r.timestamp_ms) for r in out.read_records()
        ]
        assert got == ([] if expected is None else [expected])


def test_whole_transcript_and_dropped_records(store_type):
    with TopologyTestDriver(
        figure2(), StreamsConfig(application_id="pageviews"), store_type=store_type
    ) as driver:
        inp = driver.create_input_topic("pageview-events", serdes.string(), serdes.json())
        out = driver.create_output_topic(
            "pageview-windowed-counts", serdes.time_windowed(serdes.string(), SIZE), serdes.long()
        )
        inp.pipe_records(record for record, _ in TRANSCRIPT)
        records = out.read_records()
        assert [(r.key, r.value) for r in records] == [
            (Windowed(k, Window(start, start + SIZE)), count)
            for _, rev in TRANSCRIPT
            if rev is not None
            for (k, start, count, _ts) in [rev]
        ]
        assert driver.metrics()["dropped-records"] == 2
        final = driver.get_window_store("KSTREAM-AGGREGATE-STATE-STORE-0000000003")
        assert final.fetch("news", 10000) == 1
        assert final.fetch("sport", 10000) == 1


def test_output_bytes_are_kafka_streams_windowed_keys_and_long_counts():
    with TopologyTestDriver(figure2()) as driver:
        inp = driver.create_input_topic("pageview-events", serdes.string(), serdes.json())
        raw = driver.create_output_topic(
            "pageview-windowed-counts", serdes.bytes_(), serdes.bytes_()
        )
        inp.pipe_input("u1", view("news"), timestamp_ms=6001)
        inp.pipe_input("u2", view("news"), timestamp_ms=7000)
        assert raw.read_key_values() == [
            (b"news" + struct.pack(">q", 5000), struct.pack(">q", 1)),
            (b"news" + struct.pack(">q", 5000), struct.pack(">q", 2)),
        ]


def test_late_record_leaves_store_and_output_untouched():
    with TopologyTestDriver(figure2()) as driver:
        inp = driver.create_input_topic("pageview-events", serdes.string(), serdes.json())
        out = driver.create_output_topic(
            "pageview-windowed-counts", serdes.time_windowed(serdes.string(), SIZE), serdes.long()
        )
        inp.pipe_input("u1", view("news"), timestamp_ms=1000)
        inp.pipe_input("u1", view("news"), timestamp_ms=20000)
        out.read_records()
        before = driver.metrics().get("dropped-records", 0)
        inp.pipe_input("u1", view("news"), timestamp_ms=2000)  # window [0,5000) closed at 7000
        assert out.is_empty()
        assert driver.metrics()["dropped-records"] == before + 1
        store = driver.get_window_store("KSTREAM-AGGREGATE-STATE-STORE-0000000003")
        assert store.fetch("news", 20000 - 20000 % SIZE) == 1


def test_the_count_behind_the_repartition_never_decodes_the_views_again(store_type):
    """The windowed count never looks at values, so the task reading the repartition topic
    hands it the bytes: each view is decoded once, where it enters, with the same output."""
    decoded = []
    json = serdes.json()

    def deserialize(data: bytes) -> object:
        decoded.append(data)
        return json.deserialize(None, data)

    counting = serdes.Serde(lambda obj: json.serialize(None, obj), deserialize, "counting-json")
    builder = StreamsBuilder()
    (
        builder.stream("pageview-events", key_serde=serdes.string(), value_serde=counting)
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key(key_serde=serdes.string(), value_serde=counting)
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=SIZE, grace_ms=GRACE))
        .count()
        .to_stream()
        .to("pageview-windowed-counts")
    )
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        inp = driver.create_input_topic("pageview-events", serdes.string(), serdes.json())
        out = driver.create_output_topic(
            "pageview-windowed-counts", serdes.time_windowed(serdes.string(), SIZE), serdes.long()
        )
        inp.pipe_records(record for record, _ in TRANSCRIPT)
        got = [(r.key.key, r.key.window.start_ms, r.value, r.timestamp_ms)
               for r in out.read_records()]  # fmt: skip
    assert got == [rev for _, rev in TRANSCRIPT if rev is not None]
    # Once per view where it enters; none of the long views again behind the repartition topic.
    assert len(decoded) == len(TRANSCRIPT)
