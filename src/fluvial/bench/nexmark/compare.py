"""Nexmark results compared: fluvial's committed output against Kafka Streams' on the same
input, and against each query's plain-Python oracle.

- **Final results.** For every query, the last value of every key (a null value deletes the
  key) must be the same bytes on both systems' output topics, and decode to the oracle's value.
- **Revision sequences** where their order is fixed by the input: the queries whose every
  record is a result (q0–q2, q13, q14, q20–q22, in the order of their partition), q8 and q9
  (each result comes from one input record in partition order). Elsewhere a key's revisions
  come from several upstream tasks through a repartition topic, in an order that depends on
  timing.
- The oracle gives those stream queries the list of results per key in input order, and every
  other query the final value per key; q12 (processing-time windows) compares the bids per
  bidder over all its windows.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluvial.bench.nexmark import model
from fluvial.bench.nexmark.generator import generate, write
from fluvial.bench.nexmark.queries import QUERIES, expected
from fluvial.bench.nexmark.runner import Settings, read_committed, run_fluvial, run_kafka_streams
from fluvial.kafka.admin import TopicSpec, create_topics

#: Queries whose every output record is a result: compared as sequences per key.
STREAMS = frozenset({"q0", "q1", "q2", "q13", "q14", "q20", "q21", "q22"})
#: Queries whose revisions per key come in an order the input fixes.
ORDERED = STREAMS | {"q8", "q9"}
#: q12 counts in processing-time windows: which window a bid lands in depends on when it was
#: read, so runs compare by what does not, the bids per bidder over all windows.
TIMING_DEPENDENT = frozenset({"q12"})
SHOWN = 5  # differences listed per comparison

Records = list[tuple[bytes, bytes | None]]


@dataclass
class Comparison:
    """One query's results on both systems and against its oracle."""

    query: str
    fluvial_records: int
    kafka_streams_records: int
    keys: int
    with_kafka_streams: list[str] = field(default_factory=list)
    with_oracle: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.with_kafka_streams and not self.with_oracle

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query, "ok": self.ok, "keys": self.keys,
            "fluvial_records": self.fluvial_records,
            "kafka_streams_records": self.kafka_streams_records,
            "differences_with_kafka_streams": self.with_kafka_streams,
            "differences_with_oracle": self.with_oracle,
        }  # fmt: skip


def per_key(records: Records) -> dict[bytes, list[bytes | None]]:
    out: dict[bytes, list[bytes | None]] = {}
    for key, value in records:
        out.setdefault(key, []).append(value)
    return out


def finals(records: Records) -> dict[bytes, bytes]:
    """The last value per key, keys whose last value is null (deleted) left out."""
    last: dict[bytes, bytes | None] = {}
    for key, value in records:
        last[key] = value
    return {k: v for k, v in last.items() if v is not None}


def _short(data: Any, limit: int = 160) -> str:
    text = data.decode(errors="replace") if isinstance(data, bytes) else repr(data)
    return text if len(text) <= limit else text[:limit] + "..."


def _differences(left: dict[Any, Any], right: dict[Any, Any], names: tuple[str, str]) -> list[str]:
    found = []
    for key in sorted(set(left) | set(right), key=repr):
        a, b = left.get(key), right.get(key)
        if a != b:
            found.append(f"key {_short(key)}: {names[0]} {_short(a)} / {names[1]} {_short(b)}")
    if len(found) > SHOWN:
        return found[:SHOWN] + [f"... {len(found) - SHOWN} more keys differ"]
    return found


def compare(
    query: str,
    fluvial: Records,
    kafka_streams: Records | None,
    events: list[dict[str, Any]] | None,
    partitions: int,
) -> Comparison:
    """Compare one query's output records (either side may be skipped with None)."""
    if query in TIMING_DEPENDENT:
        return _compare_totals(query, fluvial, kafka_streams, events)
    ordered = query in ORDERED
    ours = per_key(fluvial) if ordered else finals(fluvial)
    result = Comparison(query, len(fluvial), len(kafka_streams or []), len(ours))
    if kafka_streams is not None:
        theirs = per_key(kafka_streams) if ordered else finals(kafka_streams)
        result.with_kafka_streams = _differences(ours, theirs, ("fluvial", "kafka-streams"))
        if ordered:  # the final values too, for a clear message when only they differ
            result.with_kafka_streams += _differences(
                finals(fluvial), finals(kafka_streams), ("fluvial final", "kafka-streams final")
            )[: SHOWN if result.with_kafka_streams else None]
    if events is not None:
        want = expected(QUERIES[query], events, partitions)
        if query in STREAMS:
            got: dict[str, Any] = {
                k.decode(): [None if v is None else json.loads(v) for v in vs]
                for k, vs in per_key(fluvial).items()
            }
        else:
            got = {k.decode(): json.loads(v) for k, v in finals(fluvial).items()}
        result.with_oracle = _differences(got, want, ("fluvial", "oracle"))
    return result


def prepare_side_inputs(queries: list[str], bootstrap: str, topics: dict[str, str]) -> None:
    """Write the side inputs some queries read beside the events (q13's table)."""
    for query in queries:
        module = QUERIES[query]
        if hasattr(module, "fill_side_input"):
            module.fill_side_input(bootstrap, module.side_input_topic(topics))


def _compare_totals(
    query: str, fluvial: Records, kafka_streams: Records | None, events: list[dict[str, Any]] | None
) -> Comparison:
    """q12: each run's final rows summed per bidder (the query module's ``per_bidder``)."""
    module = QUERIES[query]

    def totals(records: Records) -> dict[str, Any]:
        rows = {k: json.loads(v) for k, v in finals(records).items()}
        return {str(k): v for k, v in module.per_bidder(rows).items()}

    ours = totals(fluvial)
    result = Comparison(query, len(fluvial), len(kafka_streams or []), len(ours))
    if kafka_streams is not None:
        result.with_kafka_streams = _differences(
            ours, totals(kafka_streams), ("fluvial", "kafka-streams")
        )
    if events is not None:
        want = {str(k): v for k, v in module.oracle(events).items()}
        result.with_oracle = _differences(ours, want, ("fluvial", "oracle"))
    return result


def run_comparison(
    queries: list[str],
    *,
    events: int,
    partitions: int,
    bootstrap: str,
    jar: Path,
    settings: Settings | None = None,
    seed: int = 0,
    rate: int = model.DEFAULT_RATE,
    work_dir: Path | None = None,
    kafka_streams: bool = True,
    timeout_s: float = 900,
    say: Any = print,
) -> list[Comparison]:
    """Generate the input once, run every query on both systems at once, compare the outputs."""
    settings = settings or Settings()
    token = uuid.uuid4().hex[:8]
    prefix = f"nexmark-{token}"
    with tempfile.TemporaryDirectory(prefix="fluvial-nexmark-") as tmp:
        work = work_dir or Path(tmp)
        written = write(bootstrap, prefix, events, partitions=partitions, seed=seed, rate=rate)
        say(f"wrote {written.events:,} events to {prefix}-* ({partitions} partitions) in "
            f"{written.seconds:.1f} s ({written.events_per_s:,.0f} events/s)")  # fmt: skip
        topics = written.topics
        prepare_side_inputs(queries, bootstrap, topics)
        fluvial_out = {q: f"{prefix}-fluvial-{q}" for q in queries}
        several = len(queries) > 1
        ks_out = f"{prefix}-kstreams"
        ks_outputs = {q: f"{ks_out}-{q}" if several else ks_out for q in queries}
        create_topics(
            bootstrap,
            [TopicSpec(t, partitions) for t in [*fluvial_out.values(), *ks_outputs.values()]],
        )
        failures: list[BaseException] = []

        def kafka_streams_side() -> None:
            try:
                run_kafka_streams(jar, queries, bootstrap, prefix, ks_out, f"{prefix}-kstreams",
                                  settings, work / "kafka-streams.log", timeout_s=timeout_s)  # fmt: skip
            except BaseException as error:  # noqa: BLE001 - reported below, with fluvial's
                failures.append(error)

        started = time.monotonic()
        thread = threading.Thread(target=kafka_streams_side, name="nexmark-kafka-streams")
        if kafka_streams:
            thread.start()
        try:
            run_fluvial(queries, bootstrap, topics, fluvial_out,
                        {q: f"{prefix}-fluvial-{q}" for q in queries}, work / "state", settings,
                        timeout_s=timeout_s)  # fmt: skip
        finally:
            if kafka_streams:
                thread.join()
        if failures:
            raise failures[0]
        say(f"ran {', '.join(queries)} on both systems in {time.monotonic() - started:.1f} s")
        values = generate(events, seed=seed, base_ms=written.base_ms, rate=rate)
        results = []
        for query in queries:
            ours = read_committed(bootstrap, fluvial_out[query])
            theirs = read_committed(bootstrap, ks_outputs[query]) if kafka_streams else None
            results.append(compare(query, ours, theirs, values, partitions))
        return results
