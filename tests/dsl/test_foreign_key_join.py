"""Foreign-key table joins through subscription and response topics, including fk changes."""

from __future__ import annotations

import pytest

from fluvial import Materialized, StreamsBuilder, serdes
from fluvial.processor import ConsumedRecord
from fluvial.testing import TopologyTestDriver

S, J = serdes.string(), serdes.json()


def fk_topology(left: bool):
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=S, value_serde=J)
    customers = builder.table("customers", key_serde=S, value_serde=S)
    join = orders.left_join if left else orders.join
    join(
        customers,
        lambda order, name: f"{order['item']} for {name}",
        foreign_key_extractor=lambda order: order["customer"],
        materialized=Materialized.as_("order-view"),
    ).to_stream().to("out", value_serde=S)
    return builder.build()


TRANSCRIPT = [
    # (topic, key, value) -> expected output per kind ("all" when both agree)
    (("customers", "c1", "Ann"), []),
    (("customers", "c2", "Bob"), []),
    (("orders", "o1", {"customer": "c1", "item": "tea"}), [("o1", "tea for Ann")]),
    # The foreign key changes: o1 leaves c1 and joins c2.
    (("orders", "o1", {"customer": "c2", "item": "tea"}), [("o1", "tea for Bob")]),
    (("customers", "c1", "Annie"), []),  # o1 no longer follows c1
    (("customers", "c2", "Bobby"), [("o1", "tea for Bobby")]),
    (("orders", "o2", {"customer": "c2", "item": "jam"}), [("o2", "jam for Bobby")]),
    (("customers", "c2", "Rob"), [("o1", "tea for Rob"), ("o2", "jam for Rob")]),
    # Moves to a customer that does not exist (yet).
    (
        ("orders", "o1", {"customer": "c3", "item": "tea"}),
        {"inner": [("o1", None)], "left": [("o1", "tea for None")]},
    ),
    (("customers", "c3", "Cy"), [("o1", "tea for Cy")]),
    (("customers", "c3", None), {"inner": [("o1", None)], "left": [("o1", "tea for None")]}),
    (("orders", "o2", None), [("o2", None)]),  # a deleted left row deletes its result
    (("customers", "c2", "Bo"), []),  # nobody follows c2 any more
    (
        ("orders", "o3", {"customer": "c9", "item": "pie"}),
        {"inner": [], "left": [("o3", "pie for None")]},
    ),
]


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_foreign_key_join_follows_foreign_key_changes(store_type, kind):
    topology = fk_topology(kind == "left")
    with TopologyTestDriver(topology, store_type=store_type) as driver:
        inputs = {
            "orders": driver.create_input_topic("orders", S, J),
            "customers": driver.create_input_topic("customers", S, S),
        }
        out = driver.create_output_topic("out", S, S)
        for step, (event, expected) in enumerate(TRANSCRIPT):
            topic, key, value = event
            inputs[topic].pipe_input(key, value, timestamp_ms=step)
            want = expected[kind] if isinstance(expected, dict) else expected
            assert out.read_key_values() == want, (step, event)
        view = driver.get_key_value_store("order-view").to_dict()
        if kind == "inner":
            assert view == {}
        else:
            assert view == {"o1": "tea for None", "o3": "pie for None"}
        subscriptions = next(s for s in topology.stores if "SUBSCRIPTION-STATE-STORE" in s)
        remaining = list(driver.get_state_store(subscriptions).all())
        assert len(remaining) == 2, "o1 -> c3 and o3 -> c9: old subscriptions were removed"


def test_stale_responses_for_a_replaced_left_value_are_dropped(store_type):
    builder = StreamsBuilder()
    orders = builder.table(
        "orders", materialized=Materialized().with_caching_disabled(), key_serde=S, value_serde=J
    )
    customers = builder.table("customers", key_serde=S, value_serde=S)
    orders.join(
        customers,
        lambda order, name: f"{order['item']} for {name}",
        foreign_key_extractor=lambda order: order["customer"],
        materialized=Materialized().with_caching_disabled(),  # every result shows
    ).to_stream().to("out", value_serde=S)
    with TopologyTestDriver(builder.build(), store_type=store_type) as driver:
        driver.create_input_topic("customers", S, S).pipe_input("c1", "Ann", timestamp_ms=1)
        out = driver.create_output_topic("out", S, S)
        # Both updates are processed before either subscription is answered, as happens when
        # the response topic lags: the answer to "tea" finds "cake" and must be dropped.
        task = driver._task_by_topic["orders"]
        for offset, item in enumerate(["tea", "cake"]):
            value = J.serialize("orders", {"customer": "c1", "item": item})
            task.add_records("orders", 0, [ConsumedRecord(b"o1", value, 2 + offset, offset)])
        driver._run_until_idle()
        driver.commit()
        assert out.read_key_values() == [("o1", "cake for Ann")]


def test_foreign_key_join_topics_and_copartitioning():
    topology = fk_topology(left=False)
    internal = {t.name: t for t in topology.internal_topics("app")}
    registration = next(t for n, t in internal.items() if "REGISTRATION" in n)
    response = next(t for n, t in internal.items() if "RESPONSE" in n)
    assert registration.follows == ("customers",), "subscriptions are partitioned like fks"
    assert response.follows == ("orders",), "responses go back to the left table's partitions"
    groups = topology.copartition_groups("app")
    assert {"customers", registration.name} in groups
    assert {"orders", response.name} in groups
