"""Record-at-a-time KStream operations, each as records in and records out."""

from __future__ import annotations

from fluvial import Branched, KeyValue, Named, Repartitioned, StreamsBuilder, serdes
from fluvial.testing import TopologyTestDriver

S = serdes.string()


def run(build, records, outputs=("out",), in_topics=("in",)):
    builder = StreamsBuilder()
    streams = [builder.stream(t, key_serde=S, value_serde=S) for t in in_topics]
    build(*streams)
    with TopologyTestDriver(builder.build()) as driver:
        inputs = {t: driver.create_input_topic(t, S, S) for t in in_topics}
        outs = {t: driver.create_output_topic(t, S, S) for t in outputs}
        for row in records:
            topic, (key, value, ts) = (row[0], row[1:]) if len(row) == 4 else (in_topics[0], row)
            inputs[topic].pipe_input(key, value, timestamp_ms=ts)
        result = {t: o.read_key_values() for t, o in outs.items()}
    return result if len(outputs) > 1 else result[outputs[0]]


RECORDS = [("a", "1", 1), ("b", "22", 2), ("c", "333", 3)]


def test_filter_and_filter_not():
    assert run(lambda s: s.filter(lambda k, v: len(v) > 1).to("out"), RECORDS) == [
        ("b", "22"),
        ("c", "333"),
    ]
    assert run(lambda s: s.filter_not(lambda k, v: len(v) > 1).to("out"), RECORDS) == [("a", "1")]


def test_map_accepts_key_value_and_tuples():
    out = run(lambda s: s.map(lambda k, v: KeyValue(v, k)).to("out"), RECORDS[:1])
    assert out == [("1", "a")]
    assert run(lambda s: s.map(lambda k, v: (k.upper(), v)).to("out"), RECORDS[:1]) == [("A", "1")]


def test_map_values_flat_map_and_flat_map_values():
    assert run(lambda s: s.map_values(lambda v: v + "!").to("out"), RECORDS[:1]) == [("a", "1!")]
    assert run(
        lambda s: s.map_values(lambda k, v: k + v, with_key=True).to("out"), RECORDS[:1]
    ) == [("a", "a1")]
    assert run(
        lambda s: s.flat_map(lambda k, v: [(k + c, c) for c in v]).to("out"), RECORDS[1:2]
    ) == [("b2", "2"), ("b2", "2")]
    assert (
        run(lambda s: s.flat_map_values(lambda v: list(v)).to("out"), RECORDS[2:])
        == [("c", "3")] * 3
    )


def test_select_key_peek_and_foreach():
    seen: list = []
    out = run(
        lambda s: (
            s.peek(lambda k, v: seen.append(("peek", k))).select_key(lambda k, v: v).to("out")
        ),
        RECORDS[:2],
    )
    assert out == [("1", "1"), ("22", "22")]
    assert seen == [("peek", "a"), ("peek", "b")]
    each: list = []
    run(lambda s: s.foreach(lambda k, v: each.append((k, v))), RECORDS[:1], outputs=("unused",))
    assert each == [("a", "1")]


def test_merge_interleaves_both_inputs():
    out = run(
        lambda a, b: a.merge(b).to("out"),
        [("left", "x", "1", 5), ("right", "y", "2", 6)],
        in_topics=("left", "right"),
    )
    assert out == [("x", "1"), ("y", "2")]


def test_split_routes_to_first_matching_branch_and_default():
    def build(s):
        branches = (
            s.split(Named.as_("route-"))
            .branch(lambda k, v: len(v) == 1, Branched.as_("short"))
            .branch(lambda k, v: len(v) <= 3, Branched.as_("medium"))
            .default_branch(Branched.as_("long"))
        )
        assert set(branches) == {"route-short", "route-medium", "route-long"}
        for name, topic in [("route-short", "s"), ("route-medium", "m"), ("route-long", "l")]:
            branches[name].to(topic)

    out = run(build, RECORDS + [("d", "4444", 4), ("e", "5", 5)], outputs=("s", "m", "l"))
    assert out == {
        "s": [("a", "1"), ("e", "5")],
        "m": [("b", "22"), ("c", "333")],
        "l": [("d", "4444")],
    }


def test_split_with_function_and_no_default_drops_unmatched():
    def build(s):
        branches = (
            s.split()
            .branch(
                lambda k, v: k == "a", Branched.with_function(lambda b: b.map_values(str.upper))
            )
            .no_default_branch()
        )
        (only,) = branches.values()
        only.to("out")

    assert run(build, [("a", "x", 1), ("b", "y", 2)]) == [("a", "X")]


def test_repartition_goes_through_a_named_internal_topic():
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).repartition(
        Repartitioned(name="rekeyed", num_partitions=3)
    ).to("out")
    topology = builder.build()
    (topic,) = [t for t in topology.internal_topics("app") if t.kind == "repartition"]
    assert topic.name == "app-rekeyed-repartition"
    assert topic.num_partitions == 3
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", timestamp_ms=1)
        assert driver.create_output_topic("out", S, S).read_key_values() == [("k", "v")]
