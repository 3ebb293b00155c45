"""The test driver runs the runtime's store stack: RocksDB stores under their transactional
layer, whose writes each commit applies."""

from __future__ import annotations

from fluvial import Materialized, StreamsBuilder, serdes
from fluvial.testing import TopologyTestDriver

S = serdes.string()


def test_driver_commits_rocksdb_stores_through_their_transactional_layer() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(
        materialized=Materialized.as_("counts")
    ).to_stream().to("out", value_serde=serdes.long())
    with TopologyTestDriver(builder.build(), store_type="rocksdb") as driver:
        inp = driver.create_input_topic("in", S, S)
        layer = driver.get_store_stack("counts").transactional
        assert layer is not None, "the driver's RocksDB store has the runtime's layer"
        inp.pipe_input("a", "x", timestamp_ms=1)
        inp.pipe_input("a", "y", timestamp_ms=2)
        # Auto-commit after each record: nothing is left buffered, the offset is the changelog's.
        assert layer.uncommitted_count == 0
        assert layer.committed_offset == len(driver.changelog("counts")) == 2
        assert driver.get_key_value_store("counts").get("a") == 2


def test_without_auto_commit_writes_wait_in_the_layer_until_commit() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(
        materialized=Materialized.as_("counts").with_caching_disabled()
    ).to_stream().to("out", value_serde=serdes.long())
    with TopologyTestDriver(builder.build(), store_type="rocksdb", auto_commit=False) as driver:
        inp = driver.create_input_topic("in", S, S)
        layer = driver.get_store_stack("counts").transactional
        assert layer is not None
        inp.pipe_input("a", "x", timestamp_ms=1)
        assert layer.uncommitted_count == 1
        assert driver.get_key_value_store("counts").get("a") == 1  # reads see the buffer
        driver.commit()
        assert layer.uncommitted_count == 0 and layer.committed_offset == 1
