"""The Nexmark table: per query, guarantee and cache setting, each fluvial engine beside Kafka
Streams, with the ratios fluvial / Kafka Streams of one results file.

``fluvial bench nexmark`` prints it when its runs are done, and ``fluvial bench report`` writes
it as Markdown; both read it from :func:`table_rows`. Ratios are only taken between runs of
the same results file (the same broker, input and machine load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Run = dict[str, Any]
KAFKA_STREAMS = "kafka-streams"


@dataclass(frozen=True)
class Row:
    """One query at one guarantee and cache setting: a fluvial engine's run and Kafka Streams'.

    A run is None when it was not part of the results; a run that failed or was skipped is
    kept, and its numbers are then absent.
    """

    query: str
    guarantee: str
    cache: bool
    engine: str  # fluvial-local or fluvial-spark
    fluvial: Run | None
    kafka_streams: Run | None
    flink_per_core: int | None

    @staticmethod
    def _ok(run: Run | None) -> Run | None:
        return run if run is not None and run.get("status") == "ok" else None

    def _pair(self, field: str) -> tuple[float, float] | None:
        ours, theirs = self._ok(self.fluvial), self._ok(self.kafka_streams)
        if ours is None or theirs is None or not theirs[field]:
            return None
        return ours[field], theirs[field]

    @property
    def cpu_ratio(self) -> float | None:
        """fluvial's CPU µs per event over Kafka Streams' (below 1: fluvial spends less)."""
        pair = self._pair("cpu_us_per_record")
        return pair[0] / pair[1] if pair else None

    @property
    def throughput_ratio(self) -> float | None:
        """fluvial's events/s over Kafka Streams' (above 1: fluvial is faster)."""
        pair = self._pair("throughput_rps")
        return pair[0] / pair[1] if pair else None

    def value(self, side: str, field: str) -> float | None:
        """``field`` of the fluvial or kafka-streams run, if it ran to its end."""
        run = self._ok(self.fluvial if side == "fluvial" else self.kafka_streams)
        return None if run is None else run[field]

    def notes(self) -> list[str]:
        """Why a side has no numbers: its run failed or was skipped."""
        found = []
        for name, run in (("fluvial", self.fluvial), (KAFKA_STREAMS, self.kafka_streams)):
            if run is not None and run.get("status") != "ok":
                found.append(f"{name} {run['status']}: {run.get('reason', '')}".strip())
        return found


def _query_number(query: str) -> int:
    return int(query[1:]) if query[1:].isdigit() else 10**6


def table_rows(runs: list[Run]) -> list[Row]:
    """Rows in query order (q0, q1, ..., q22), then guarantee, cache, engine."""
    nexmark = [r for r in runs if r.get("query") and r.get("mode") == "throughput"]
    by: dict[tuple[str, str, bool, str], Run] = {}
    flink: dict[str, int | None] = {}
    for r in nexmark:
        cached = r["system"].endswith("+cache")
        by[(r["query"], r["guarantee"], cached, r["system"].removesuffix("+cache"))] = r
        flink.setdefault(r["query"], r.get("flink_per_core_events_per_s"))
    # One row per fluvial engine that ran (the local engine, the Spark engine, or both).
    engines = sorted({k[3] for k in by if k[3].startswith("fluvial-")}) or ["fluvial-local"]
    settings = sorted({k[:3] for k in by}, key=lambda k: (_query_number(k[0]), k[0], k[1], k[2]))
    rows = []
    for query, guarantee, cached in settings:
        for engine in engines:
            ours = by.get((query, guarantee, cached, engine))
            if ours is None and len(engines) > 1:
                continue
            theirs = by.get((query, guarantee, cached, KAFKA_STREAMS))
            rows.append(Row(query, guarantee, cached, engine, ours, theirs, flink.get(query)))
    return rows


def _number(value: float | None, form: str) -> str:
    return "" if value is None else format(value, form)


def row_cells(row: Row) -> list[str]:
    """The cells of the printed and the Markdown table, in :data:`HEADERS`' order."""
    label = row.query
    if row.engine != "fluvial-local":
        label = f"{row.query} ({row.engine.removeprefix('fluvial-')})"
    return [
        label,
        row.guarantee.replace("_v2", ""),
        "on" if row.cache else "off",
        _number(row.value("fluvial", "throughput_rps"), ",.0f"),
        _number(row.value(KAFKA_STREAMS, "throughput_rps"), ",.0f"),
        _number(row.throughput_ratio, ".2f"),
        _number(row.value("fluvial", "cpu_us_per_record"), ".1f"),
        _number(row.value(KAFKA_STREAMS, "cpu_us_per_record"), ".1f"),
        _number(row.cpu_ratio, ".2f"),
        f"{row.flink_per_core:,}" if row.flink_per_core else "",
    ]


HEADERS = [
    "query", "guarantee", "cache", "fluvial events/s", "kafka-streams events/s",
    "throughput ratio", "fluvial CPU µs/event", "kafka-streams CPU µs/event", "CPU ratio",
    "Flink per core",
]  # fmt: skip


def summary(rows: list[Row]) -> dict[str, Any]:
    """The CPU ratios in short: how many rows have one, how many are at or below 1."""
    ratios = [r.cpu_ratio for r in rows if r.cpu_ratio is not None]
    return {
        "rows": len(rows),
        "with_cpu_ratio": len(ratios),
        "cpu_ratio_at_most_1": sum(1 for r in ratios if r <= 1.0),
        "cpu_ratio_max": max(ratios, default=None),
        "cpu_ratio_min": min(ratios, default=None),
    }


def as_dicts(rows: list[Row]) -> list[dict[str, Any]]:
    """The rows as the results file keeps them (``"table"``)."""
    return [
        {
            "query": r.query,
            "guarantee": r.guarantee,
            "cache": r.cache,
            "engine": r.engine,
            "fluvial_events_per_s": r.value("fluvial", "throughput_rps"),
            "kafka_streams_events_per_s": r.value(KAFKA_STREAMS, "throughput_rps"),
            "throughput_ratio": r.throughput_ratio,
            "fluvial_cpu_us_per_event": r.value("fluvial", "cpu_us_per_record"),
            "kafka_streams_cpu_us_per_event": r.value(KAFKA_STREAMS, "cpu_us_per_record"),
            "cpu_ratio": r.cpu_ratio,
            "fluvial_output_records": r.value("fluvial", "output_records"),
            "kafka_streams_output_records": r.value(KAFKA_STREAMS, "output_records"),
            "notes": r.notes(),
        }  # fmt: skip
        for r in rows
    ]


def print_table(rows: list[Row]) -> None:
    """The table on the console (stderr), plain columns that read the same in a log file;
    failed and skipped runs are named under it."""
    from fluvial.bench.results import console

    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False)

    widths = (11, 6, 5, 12, 12, 6, 12, 12, 6)
    heads = ("query", "guar.", "cache", "fluvial ev/s", "KS ev/s", "ratio", "fluvial µs/ev",
             "KS µs/ev", "ratio")  # fmt: skip

    def line(cells: tuple[str, ...] | list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i > 2 else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    say("Nexmark, fluvial / kafka-streams (KS), ratios within this run:")
    say(line(heads))
    for row in rows:
        cells = row_cells(row)[:9]
        cells[1] = "eos" if row.guarantee == "exactly_once_v2" else "alos"
        say(line(cells))
    for row in rows:
        for note in row.notes():
            say(f"{row.query} {row.guarantee} cache {'on' if row.cache else 'off'}: {note}")
    s = summary(rows)
    say(
        f"CPU ratio fluvial / kafka-streams <= 1 on {s['cpu_ratio_at_most_1']} of "
        f"{s['with_cpu_ratio']} rows that have one ({s['rows']} rows)"
    )
