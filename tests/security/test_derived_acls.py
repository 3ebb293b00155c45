"""The ACLs ``fluvial acls`` derives from a topology, without a broker."""

from __future__ import annotations

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.acls import authorization_error, derive_acls
from fluvial.errors import StreamsError
from fluvial.runtime.epoch import driver_transactional_id
from fluvial.runtime.worker import transactional_id


def figure2(guarantee: str) -> tuple[object, StreamsConfig]:
    builder = StreamsBuilder()
    (
        builder.stream("views", key_serde=serdes.string(), value_serde=serdes.json())
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=5000, grace_ms=2000))
        .count()
        .to_stream()
        .to(
            "counts",
            key_serde=serdes.time_windowed(serdes.string(), 5000),
            value_serde=serdes.long(),
        )  # fmt: skip
    )
    config = StreamsConfig(application_id="pv", processing_guarantee=guarantee)
    return builder.build(), config


def rules(guarantee: str) -> set[tuple[str, str, str, str]]:
    topology, config = figure2(guarantee)
    return {
        (r.resource_type, r.pattern, r.name, r.operation) for r in derive_acls(topology, config)
    }


def test_exactly_once_needs_the_transactional_ids_and_the_drivers_group() -> None:
    derived = rules("exactly_once_v2")
    assert ("TOPIC", "LITERAL", "views", "READ") in derived
    assert ("TOPIC", "LITERAL", "counts", "WRITE") in derived
    assert ("GROUP", "LITERAL", "pv", "READ") in derived
    # Committed repartition records are deleted, which Kafka authorizes as DELETE.
    assert ("TOPIC", "PREFIXED", "pv-", "DELETE") in derived
    # One prefix covers the driver's transactional id and every slot's.
    assert ("TRANSACTIONAL_ID", "PREFIXED", "pv-", "WRITE") in derived
    assert driver_transactional_id("pv").startswith("pv-")
    assert transactional_id("pv", 7).startswith("pv-")
    assert ("GROUP", "LITERAL", "pv-driver", "READ") in derived


def test_at_least_once_needs_neither() -> None:
    derived = rules("at_least_once")
    assert not [r for r in derived if r[0] == "TRANSACTIONAL_ID"]
    assert ("GROUP", "LITERAL", "pv-driver", "READ") not in derived
    assert ("GROUP", "LITERAL", "pv", "READ") in derived


def test_only_a_refusal_is_an_authorization_error() -> None:
    """Other failures keep their own handling (a restart from the last commit), and on a plain
    cluster a timeout is not taken for a hidden refusal: nothing asks the brokers."""
    topology, config = figure2("exactly_once_v2")
    for failure in (
        StreamsError("commit failed and the transaction was aborted: 3 message(s) failed delivery"),
        StreamsError("read offsets failed: Local: Timed out"),
        StreamsError("the consumer failed: Broker: Not leader for partition"),
    ):
        assert authorization_error(topology, config, failure) is None
