"""The benchmark workloads: their input data and their fluvial topologies.

Every system under test reads the same bytes: page views as compact JSON
(``{"category": ..., "period": ...}``) keyed by a UTF-8 string, with event timestamps that mostly
increase and sometimes step back within the grace period, as real click streams do. Peers get
the same topics and write their own equivalent pipelines (see ``fluvial.bench.peers``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fluvial import StreamsBuilder

CATEGORIES = ("news", "sports", "tech", "travel")
PERIODS = (10_000, 35_000, 45_000, 60_000)  # a quarter of the views are too short to count
FIGURE2_WINDOW_MS, FIGURE2_GRACE_MS = 5_000, 2_000
WINDOWED_KEYS = 100_000
WINDOWED_WINDOW_MS, WINDOWED_GRACE_MS = 10_000, 2_000
JOIN_USERS = 10_000
REGIONS = ("emea", "amer", "apac")
FIGURE2_USERS = 1_000


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    # The table topic a stream-table join reads beside its stream input, if any.
    has_table: bool = False

    @property
    def title(self) -> str:
        return self.name


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "figure2",
            "the paper's Figure 2: filter long views, re-key by category (repartition), "
            "5 s tumbling windows with 2 s grace, count",
        ),
        Workload(
            "passthrough",
            "stateless: filter long views, add a field to the value, write out (one hop)",
        ),
        Workload(
            "windowed",
            f"windowed count over {WINDOWED_KEYS:,} keys: 10 s tumbling windows, 2 s grace, "
            "no repartition",
        ),
        Workload(
            "join",
            f"stream-table join: each view looks up its user's row in a {JOIN_USERS:,}-row "
            "table read from a co-partitioned topic",
            has_table=True,
        ),
    )
}


@dataclass(frozen=True)
class InputRecord:
    key: bytes
    value: bytes
    timestamp_ms: int


def _dumps(obj: object) -> bytes:
    # Sorted keys and compact separators: byte for byte what fluvial's json serde writes.
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def generate_input(
    workload: str, records: int, *, base_ms: int, seed: int = 8, step_ms: int = 10
) -> Iterator[InputRecord]:
    """The stream input: ``records`` page views starting at ``base_ms``.

    About one in ten steps back by up to 1.5 s, inside every workload's 2 s grace, so the
    out-of-order path is exercised and no system drops anything for lateness.
    """
    rng = random.Random(seed)
    keys = {
        "windowed": WINDOWED_KEYS,
        "join": JOIN_USERS,
    }.get(workload, FIGURE2_USERS)
    prefix = b"k" if workload == "windowed" else b"user-"
    # Pre-encode the few distinct values: generation must not be the bottleneck of pre-loading.
    values = [_dumps({"category": c, "period": p}) for c in CATEGORIES for p in PERIODS]
    for i in range(records):
        ts = base_ms + i * step_ms
        if rng.random() < 0.1:
            ts -= rng.randint(1, 1_500)
        yield InputRecord(
            prefix + str(rng.randrange(keys)).encode(), values[rng.randrange(len(values))], ts
        )


def view_value(category: str, period: int, sent_ms: int) -> bytes:
    """A page view for the latency mode: ``sent`` carries the wall-clock time of production."""
    return _dumps({"category": category, "period": period, "sent": sent_ms})


def generate_table(workload: str, *, base_ms: int) -> Iterator[InputRecord]:
    """The table rows of a join workload, timestamped before every stream record."""
    if not WORKLOADS[workload].has_table:
        return
    for user in range(JOIN_USERS):
        region = REGIONS[user % len(REGIONS)]
        yield InputRecord(f"user-{user}".encode(), _dumps({"region": region}), base_ms - 10_000)


# -- fluvial's pipelines --------------------------------------------------------------------------


def build_topology(
    builder: StreamsBuilder, workload: str, input_topic: str, output_topic: str, table_topic: str
) -> None:
    """Add ``workload``'s pipeline to ``builder``."""
    from fluvial import KeyValue, TimeWindows, serdes

    views = builder.stream(input_topic, key_serde=serdes.string(), value_serde=serdes.json())
    if workload == "figure2":
        (
            views.filter(lambda key, view: view["period"] >= 30000)
            .map(lambda key, view: KeyValue(view["category"], view))
            .group_by_key()
            .windowed_by(
                TimeWindows.of_size_and_grace(size_ms=FIGURE2_WINDOW_MS, grace_ms=FIGURE2_GRACE_MS)
            )
            .count()
            .to_stream()
            .to(
                output_topic,
                key_serde=serdes.time_windowed(serdes.string(), FIGURE2_WINDOW_MS),
                value_serde=serdes.long(),
            )
        )
    elif workload == "passthrough":
        (
            views.filter(lambda key, view: view["period"] >= 30000)
            .map_values(lambda view: {**view, "long": True})
            .to(output_topic)
        )
    elif workload == "windowed":
        (
            views.group_by_key()
            .windowed_by(
                TimeWindows.of_size_and_grace(
                    size_ms=WINDOWED_WINDOW_MS, grace_ms=WINDOWED_GRACE_MS
                )
            )
            .count()
            .to_stream()
            .to(
                output_topic,
                key_serde=serdes.time_windowed(serdes.string(), WINDOWED_WINDOW_MS),
                value_serde=serdes.long(),
            )
        )
    elif workload == "join":
        users = builder.table(table_topic, key_serde=serdes.string(), value_serde=serdes.json())
        views.join(users, lambda view, user: {**view, "region": user["region"]}).to(output_topic)
    else:
        raise ValueError(f"unknown workload {workload!r}: use one of {', '.join(WORKLOADS)}")
