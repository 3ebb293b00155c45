"""The ACLs ``fluvial acls`` derives from a topology, without a broker."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.acls import authorization_error, derive_acls
from fluvial.cli import app
from fluvial.errors import StreamsError
from fluvial.runtime.client_calls import transactional_id
from fluvial.runtime.epoch import driver_transactional_id
from fluvial.sinks import PostgresSink


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


def counts_sink(**overrides: object) -> PostgresSink:
    settings: dict = {"table": "pageview_counts", "mode": "upsert", "value_serde": "long",
                      "window_size_ms": 5000, "on_bad_row": "dead_letter",
                      "dead_letter_topic": "counts-dead-letters", **overrides}  # fmt: skip
    return PostgresSink("counts", **settings)


def test_egress_sinks_read_their_topics_under_the_applications_principal() -> None:
    """Each sink reads the output read_committed, names a group it never commits to (its
    consumer only looks up the coordinator: DESCRIBE) and writes its dead letters."""
    topology, config = figure2("exactly_once_v2")
    sink = counts_sink()
    derived = {
        (r.resource_type, r.pattern, r.name, r.operation)
        for r in derive_acls(topology, config, [sink])
    }
    assert derived - rules("exactly_once_v2") == {
        ("TOPIC", "LITERAL", "counts", "READ"),
        ("GROUP", "LITERAL", "fluvial-sink-pageview_counts", "DESCRIBE"),
        ("TOPIC", "LITERAL", "counts-dead-letters", "WRITE"),
    }
    assert sink.group_id == "fluvial-sink-pageview_counts"


def test_sinks_sharing_a_topic_need_its_rule_once() -> None:
    topology, config = figure2("at_least_once")
    sinks = [
        counts_sink(),
        counts_sink(table="archive", mode="append", on_bad_row="fail", dead_letter_topic=None),
    ]
    derived = [
        (r.resource_type, r.pattern, r.name, r.operation)
        for r in derive_acls(topology, config, sinks)
    ]
    assert len(derived) == len(set(derived))
    assert ("TOPIC", "LITERAL", "counts", "READ") in derived
    assert ("GROUP", "LITERAL", "fluvial-sink-archive", "DESCRIBE") in derived


EGRESS_APP = """
from fluvial import KeyValue, StreamsConfig, TimeWindows, serdes
from fluvial.sinks import PostgresSink


def build(builder):
    (builder.stream("views", key_serde=serdes.string(), value_serde=serdes.json())
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=5000, grace_ms=2000))
        .count()
        .to_stream()
        .to("counts", key_serde=serdes.time_windowed(serdes.string(), 5000),
            value_serde=serdes.long()))


config = StreamsConfig(application_id="pv", processing_guarantee="exactly_once_v2")
egress = [
    PostgresSink("counts", table="pageview_counts", mode="upsert", value_serde="long",
                 window_size_ms=5000, on_bad_row="dead_letter",
                 dead_letter_topic="counts-dead-letters"),
]
"""


def test_fluvial_acls_covers_the_egress_an_app_declares(tmp_path: Path) -> None:
    path = tmp_path / "pv_egress.py"
    path.write_text(EGRESS_APP)
    printed = CliRunner().invoke(app, ["acls", str(path), "--principal", "User:pv-app"])
    assert printed.exit_code == 0, printed.output
    lines = [line.split("  #")[0].split() for line in printed.stdout.splitlines()]
    assert ["ALLOW", "User:pv-app", "READ", "TOPIC", "LITERAL", "counts"] in lines
    assert ["ALLOW", "User:pv-app", "DESCRIBE", "GROUP", "LITERAL",
            "fluvial-sink-pageview_counts"] in lines  # fmt: skip
    assert ["ALLOW", "User:pv-app", "WRITE", "TOPIC", "LITERAL", "counts-dead-letters"] in lines
    assert ["ALLOW", "User:pv-app", "WRITE", "TOPIC", "LITERAL", "counts"] in lines  # the app's
