"""Running cases: fluvial's TopologyTestDriver in this process, Kafka Streams' in a JVM.

Both sides produce the same result shape, so comparing them is comparing two dicts:

- ``outputs``: for every sink topic, its records in write order as
  ``[key hex, value hex, timestamp, [[header key, header value hex], ...]]``;
- ``stores``: for every named store, its final rows ``[key, value, timestamp]`` sorted by key,
  where a windowed key reads ``key@start@end`` and a session store's rows carry no timestamp (-1);
- ``error``: set instead of the two above when the case failed to build or run.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from fluvial import children, serdes
from fluvial.config import StreamsConfig
from fluvial.jvm import java_executable
from fluvial.state.base import from_timestamped_bytes
from fluvial.testing import TopologyTestDriver
from fluvial.verify.differential.build import build_topology

STRING = serdes.string()
BYTES = serdes.bytes_()
NO_TIMESTAMP = -1


def _show(value: Any) -> str | None:
    return None if value is None else str(value)


def _store_rows(driver: TopologyTestDriver, name: str, kind: str) -> list[list[Any]]:
    store: Any = driver.get_state_store(name)
    spec = next(s for t in driver.tasks for s in t.subtopology.stores if s.name == name)
    key_serde, value_serde = spec.key_serde, spec.value_serde
    assert key_serde is not None and value_serde is not None
    rows: list[list[Any]] = []
    if kind == "kv":
        for key, (value, timestamp) in store.all():
            rows.append([key_serde.deserialize(None, key),
                         _show(value_serde.deserialize(None, value)), timestamp])  # fmt: skip
    elif kind == "window":
        size = spec.window_size_ms
        for key, start, raw in store.all():
            value, timestamp = from_timestamped_bytes(raw)
            shown = f"{key_serde.deserialize(None, key)}@{start}@{start + size}"
            rows.append([shown, _show(value_serde.deserialize(None, value)), timestamp])
    elif kind == "session":
        for entry in store.all():
            shown = f"{key_serde.deserialize(None, entry.key)}@{entry.start_ms}@{entry.end_ms}"
            rows.append([shown, _show(value_serde.deserialize(None, entry.value)), NO_TIMESTAMP])
    else:
        raise ValueError(f"unknown store kind {kind!r}")
    rows.sort(key=lambda row: row[0])
    return rows


def compared_stores(case: dict[str, Any]) -> list[tuple[str, str]]:
    """The stores whose final contents are compared: named, and not versioned (Kafka Streams'
    versioned stores cannot be listed; their contents show in the as-of joins they serve)."""
    return [
        (n["store"], n["store_kind"])
        for n in case["nodes"]
        if n.get("store") and n.get("store_kind") not in (None, "versioned")
    ]


def sink_topics(case: dict[str, Any]) -> list[str]:
    return [n["topic"] for n in case["nodes"] if n["op"] == "to"]


def run_fluvial(case: dict[str, Any]) -> dict[str, Any]:
    """The case in fluvial's TopologyTestDriver, caching off, with the case's store backend."""
    result: dict[str, Any] = {"id": case["id"]}
    try:
        topology = build_topology(case)
        config = StreamsConfig(application_id="differential", cache_max_bytes=0)
        with TopologyTestDriver(
            topology, config, store_type=case.get("store_type", "rocksdb")
        ) as driver:
            inputs: dict[str, Any] = {}
            for topic, key, value, timestamp in case["inputs"]:
                if topic not in inputs:
                    inputs[topic] = driver.create_input_topic(topic, STRING, STRING)
                inputs[topic].pipe_input(key, value, timestamp_ms=timestamp)
            outputs = {}
            for topic in sink_topics(case):
                records = driver.create_output_topic(topic, BYTES, BYTES).read_records()
                outputs[topic] = [
                    [None if r.key is None else r.key.hex(),
                     None if r.value is None else r.value.hex(),
                     r.timestamp_ms,
                     [[k, None if v is None else v.hex()] for k, v in r.headers]]
                    for r in records
                ]  # fmt: skip
            stores = {name: _store_rows(driver, name, kind) for name, kind in compared_stores(case)}
        result["outputs"] = outputs
        result["stores"] = stores
    except Exception as error:  # noqa: BLE001 - a failing case is a result, compared like others
        result["error"] = f"{type(error).__name__}: {error}"
    return result


class JvmLineProcess:
    """A reference JVM spoken to in JSON lines on stdin/stdout, its log in a temporary file;
    closing it ends its input and waits ``CLOSE_WAIT_S`` before killing it."""

    CLOSE_WAIT_S = 30.0
    _proc: subprocess.Popen[str]
    _log: Any

    def _tail(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-3000:]

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(self.CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReferenceProcess(JvmLineProcess):
    """One JVM serving cases to Kafka Streams' TopologyTestDriver: a case line in, a result
    line out. Its log (warnings only) goes to a temporary file, never to a pipe it could fill."""

    def __init__(self, *, heap_mb: int = 384) -> None:
        from fluvial.verify.differential.reference import build_reference_jar

        jar = build_reference_jar()
        self._log = tempfile.TemporaryFile(prefix="fluvial-differential-jvm-")  # noqa: SIM115
        cmd = [
            java_executable(), f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", str(jar), "dev.fluvial.reference.differential.DifferentialMain", "-", "-",
        ]  # fmt: skip
        self._proc = children.popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        self._lock = threading.Lock()

    def run(self, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Results in case order. A writer thread feeds the JVM while this thread reads, so
        neither pipe fills up."""
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        with self._lock:
            if proc.poll() is not None:
                raise RuntimeError(f"the Kafka Streams runner exited: {self._tail()}")

            def write() -> None:
                assert proc.stdin is not None
                for case in cases:
                    proc.stdin.write(json.dumps(case) + "\n")
                proc.stdin.flush()

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            results: list[dict[str, Any]] = []
            for _ in cases:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(
                        f"the Kafka Streams runner stopped after {len(results)} of {len(cases)} "
                        f"cases: {self._tail()}"
                    )
                results.append(json.loads(line))
            writer.join()
            return results


def run_reference(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cases in a JVM of their own (for one-off use; sessions keep a :class:`ReferenceProcess`)."""
    with ReferenceProcess() as reference:
        return reference.run(cases)


@dataclass
class Comparison:
    """How one case's fluvial result compares with Kafka Streams'."""

    case_id: str
    records: int = 0  # output records and store rows compared
    differences: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not self.differences


def compare(expected: dict[str, Any], actual: dict[str, Any]) -> Comparison:
    """Kafka Streams' result (``expected``) against fluvial's (``actual``)."""
    comparison = Comparison(expected["id"])
    diffs = comparison.differences
    if "error" in expected or "error" in actual:
        if "error" in expected and "error" in actual:
            return comparison  # both refuse the case
        diffs.append(
            f"error: Kafka Streams {expected.get('error')!r}, fluvial {actual.get('error')!r}"
        )
        return comparison
    for topic in sorted(set(expected["outputs"]) | set(actual["outputs"])):
        want, got = expected["outputs"].get(topic, []), actual["outputs"].get(topic, [])
        comparison.records += max(len(want), len(got))
        diffs.extend(_first_difference(f"topic {topic}", want, got))
    for name in sorted(set(expected["stores"]) | set(actual["stores"])):
        want, got = expected["stores"].get(name, []), actual["stores"].get(name, [])
        comparison.records += max(len(want), len(got))
        diffs.extend(_first_difference(f"store {name}", want, got))
    return comparison


def _first_difference(where: str, want: list[Any], got: list[Any]) -> Iterable[str]:
    if want == got:
        return []
    first = next(
        (i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
        min(len(want), len(got)),
    )
    return [
        f"{where}: Kafka Streams has {len(want)} records, fluvial {len(got)}; first difference "
        f"at index {first}: Kafka Streams {want[first] if first < len(want) else '<none>'}, "
        f"fluvial {got[first] if first < len(got) else '<none>'}"
    ]
