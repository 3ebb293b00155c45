"""The read_committed verifier of the fault matrix: every committed record against the input.

- the input topic holds what the input producer had acknowledged, per key and in order, so
  the oracle is computed over the input that was actually produced. A broker kill can make the
  (idempotent) input producer write a batch twice without an error: such repeats of
  acknowledged records are counted as ``input_duplicates`` and are input like any other;
  an acknowledged record missing, or a record never sent, fails the check;
- the echo output equals the input, per key and in order;
- every aggregate revision is a prefix aggregate of its key's input, one per input record;
- the final aggregates equal the oracle;
- the final aggregate of each bucket of keys (:func:`bucket_of`) equals the oracle's over the
  bucket's input. Behind that key change every repartition partition holds records of every
  upstream task, which a downstream task takes merged by writer (catch-up completeness), out of
  offset order: a restart that resumed anywhere but where each writer was would count records
  twice or lose them.

Under at-least-once it checks only that nothing is lost (duplicates are allowed).
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from fluvial import serdes
from fluvial.kafka.consumed import consume

LONG = serdes.long()
BUCKETS = 4


def bucket_of(key: str) -> str:
    """The bucket of input keys a second aggregate of the verify app groups ``key`` into."""
    return f"bucket-{zlib.crc32(key.encode()) % BUCKETS}"


@dataclass
class VerifyReport:
    """One scenario of the matrix: one fault kind, its own app id and topics, its own check."""

    fault: str
    seed: int
    guarantee: str
    engine: str
    commit_interval_ms: int
    requested: int = 0
    injected: int = 0
    produced: int = 0
    records: int = 0
    echoed: int = 0
    duplicates: int = 0
    lost: int = 0
    input_duplicates: int = 0  # repeats the input producer wrote (see the module docstring)
    bad_revisions: int = 0
    wrong_finals: int = 0
    task_retries: int = 0
    recovery_s: list[float] = field(default_factory=list)  # per fault: until it recovered
    wall_s: float = 0.0
    verdict: str = "FAIL"
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.fault}: {self.injected}/{self.requested} faults, records {self.records}, "
            f"duplicates {self.duplicates}, lost {self.lost}, bad revisions {self.bad_revisions}, "
            f"wrong finals {self.wrong_finals}"
            + (f", input repeats {self.input_duplicates}" if self.input_duplicates else "")
            + f" -> {self.verdict}"
        )


def prefix_aggregates(values: list[int]) -> list[dict[str, int]]:
    """The oracle: the aggregate after each of a key's input records, in order."""
    out, total, lo, hi = [], 0, None, None
    for count, value in enumerate(values, start=1):
        total += value
        lo = value if lo is None else min(lo, value)
        hi = value if hi is None else max(hi, value)
        out.append({"sum": total, "count": count, "min": lo, "max": hi})
    return out


def read_committed(
    bootstrap: str, topic: str, client_config: dict[str, str] | None = None
) -> list[tuple[str, bytes | None, int]]:
    """(key, value, partition) of every committed record of ``topic``, per partition in order."""
    consumer = Consumer({
        **(client_config or {}), "bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True,
    })  # fmt: skip
    metadata = consumer.list_topics(topic, timeout=30)
    partitions = sorted(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, -2) for p in partitions])
    pending = set(partitions)
    records: list[tuple[str, bytes | None, int]] = []
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        for msg in consume(consumer, 5000, 0.5):
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            key = msg.key()
            if key is None:
                raise ValueError(
                    f"{topic}-{msg.partition()} holds a record without a key at offset "
                    f"{msg.offset()}: every record of the verify app's topics has one"
                )
            records.append((key.decode(), msg.value(), msg.partition()))
    consumer.close()
    if pending:
        raise TimeoutError(f"could not read {topic} to its end in 120 s")
    return records


def input_repeats(acknowledged: list[int], held: list[int]) -> int | None:
    """How many records of ``held`` repeat earlier acknowledged ones, if ``held`` is the
    acknowledged records in order with only such repeats added; otherwise ``None``."""
    matched, repeats = 0, 0
    seen: set[int] = set()
    for value in held:
        if matched < len(acknowledged) and value == acknowledged[matched]:
            seen.add(value)
            matched += 1
        elif value in seen:
            repeats += 1
        else:
            return None
    return repeats if matched == len(acknowledged) else None


def verify_outputs(
    bootstrap: str, input_topic: str, echo_topic: str, agg_topic: str, exactly_once: bool,
    report: VerifyReport, *, sent: dict[str, list[int]] | None = None,
    client_config: dict[str, str] | None = None, bucket_topic: str | None = None,
) -> None:  # fmt: skip
    """Compare the committed outputs with the input, record by record.

    ``sent`` holds the values the input producer had acknowledged, per key in order: the input
    topic must hold exactly these (no acknowledged record lost by the brokers, none doubled).
    ``bucket_topic``: the per-bucket aggregates, whose finals are checked too."""
    inputs: dict[str, list[int]] = defaultdict(list)
    for key, value, _p in read_committed(bootstrap, input_topic, client_config):
        number = LONG.deserialize(input_topic, value)
        if number is None:
            raise ValueError(f"{input_topic} holds a tombstone of {key}: the input has none")
        inputs[key].append(number)
    input_intact = True
    if sent is not None:
        report.produced = sum(len(v) for v in sent.values())
        for key in sorted(sent.keys() | inputs.keys()):
            repeats = input_repeats(sent.get(key, []), inputs.get(key, []))
            if repeats is not None:
                report.input_duplicates += repeats
            else:
                input_intact = False
                if len(report.problems) < 10:
                    report.problems.append(
                        f"input of {key}: the topic holds {len(inputs.get(key, []))} records, "
                        f"the producer had {len(sent.get(key, []))} acknowledged"
                    )
    echoes: dict[str, list[int | None]] = defaultdict(list)  # a tombstone counts as wrong
    for key, value, _p in read_committed(bootstrap, echo_topic, client_config):
        echoes[key].append(LONG.deserialize(echo_topic, value))
    report.records = sum(len(v) for v in inputs.values())
    report.echoed = sum(len(v) for v in echoes.values())
    for key, expected in inputs.items():
        echoed = echoes.get(key, [])
        remaining = list(echoed)
        for number in expected:
            if number in remaining:
                remaining.remove(number)
            else:
                report.lost += 1
        report.duplicates += len(remaining)
        if exactly_once and echoed != expected and len(report.problems) < 10:
            report.problems.append(f"echo of {key} differs from its input")
    for key in echoes.keys() - inputs.keys():
        report.duplicates += len(echoes[key])  # output for a key that was never input
    revisions: dict[str, list[dict[str, int]]] = defaultdict(list)
    for key, value, _p in read_committed(bootstrap, agg_topic, client_config):
        revisions[key].append(json.loads(value) if value is not None else {})
    for key, values in inputs.items():
        prefixes = prefix_aggregates(values)
        got = revisions.get(key, [])
        final = got[-1] if got else {}
        if exactly_once:
            bad = sum(1 for a, b in zip(got, prefixes, strict=False) if a != b)
            bad += abs(len(got) - len(prefixes))
            report.bad_revisions += bad
            if final != prefixes[-1]:
                report.wrong_finals += 1
                if len(report.problems) < 10:
                    report.problems.append(f"{key}: final {final} != oracle {prefixes[-1]}")
        elif final.get("count", 0) < len(values):
            report.wrong_finals += 1  # at-least-once may repeat, never lose
    if bucket_topic is not None:
        _check_buckets(bootstrap, bucket_topic, inputs, exactly_once, report, client_config)
    clean = input_intact and report.lost == 0 and report.wrong_finals == 0
    if exactly_once:
        clean = clean and report.duplicates == 0 and report.bad_revisions == 0
    report.verdict = "PASS" if clean else "FAIL"


def bucket_finals(
    bootstrap: str, bucket_topic: str, client_config: dict[str, str] | None = None
) -> dict[str, dict[str, int]]:
    """The last committed aggregate of each bucket."""
    finals: dict[str, dict[str, int]] = {}
    for key, value, _p in read_committed(bootstrap, bucket_topic, client_config):
        finals[key] = json.loads(value) if value is not None else {}
    return finals


def _check_buckets(
    bootstrap: str, bucket_topic: str, inputs: dict[str, list[int]], exactly_once: bool,
    report: VerifyReport, client_config: dict[str, str] | None,
) -> None:  # fmt: skip
    """Each bucket's final aggregate against the oracle over its keys' input (sum, count, min
    and max do not depend on the order the bucket took its records in)."""
    by_bucket: dict[str, list[int]] = defaultdict(list)
    for key, values in inputs.items():
        by_bucket[bucket_of(key)].extend(values)
    finals = bucket_finals(bootstrap, bucket_topic, client_config)
    for bucket, values in sorted(by_bucket.items()):
        expected = prefix_aggregates(values)[-1]
        final = finals.get(bucket, {})
        wrong = final != expected if exactly_once else final.get("count", 0) < len(values)
        if wrong:
            report.wrong_finals += 1
            if len(report.problems) < 10:
                report.problems.append(f"{bucket}: final {final} != oracle {expected}")
