"""``fluvial bench report``: a markdown table and PNG plots from one or more results files.

Ratios are only ever computed between runs of the same results file: a ratio across files
would compare runs that did not share a machine state, which the issue's targets rule out.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fluvial.bench.environment import one_line
from fluvial.errors import FluvialError

Run = dict[str, Any]
EOS, ALOS = "exactly_once_v2", "at_least_once"
SYSTEM_ORDER = (
    "fluvial-local", "fluvial-local+cache", "fluvial-baseline", "fluvial-baseline+cache",
    "fluvial-spark", "fluvial-spark+cache", "kafka-streams", "quix", "faust", "spark-ss",
    "spark-ss-eos",
    "ceiling", "ceiling-json",
)  # fmt: skip


def load(files: Iterable[Path]) -> list[tuple[dict[str, Any], list[Run]]]:
    docs = []
    for path in files:
        data = json.loads(Path(path).read_text())
        docs.append((data["environment"], data["runs"]))
    if not docs:
        raise FluvialError("no results files given: pass the JSON of 'fluvial bench ... --json'")
    return docs


def _key(run: Run) -> tuple[str, str, str, int]:
    return (run["system"], run["workload"], run["guarantee"], run["commit_interval_ms"])


def throughput_index(runs: list[Run]) -> dict[tuple[str, str, str, int], float]:
    """Mean throughput per (system, workload, guarantee, commit interval) of successful runs."""
    values: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    for run in runs:
        if run["mode"] == "throughput" and run["status"] == "ok":
            values[_key(run)].append(run["throughput_rps"])
    return {k: statistics.mean(v) for k, v in values.items()}


def targets(runs: list[Run]) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for each issue target that these runs can answer."""
    t = throughput_index(runs)
    rows: list[tuple[str, str, str]] = []

    def ratio_row(label: str, num: Any, den: Any, goal: float) -> None:
        if num in t and den in t:
            ratio = t[num] / t[den]
            rows.append((label, f"{ratio:.2f}x", "met" if ratio >= goal else "not met"))

    fig2 = ("figure2", EOS, 100)
    ratio_row("figure2 EOS 100 ms: fluvial >= 3x Quix Streams",
              ("fluvial-local", *fig2), ("quix", *fig2), 3.0)  # fmt: skip
    ratio_row("figure2 EOS 100 ms: fluvial >= 5x Faust",
              ("fluvial-local", *fig2), ("faust", *fig2), 5.0)  # fmt: skip
    ratio_row("figure2 EOS 100 ms: fluvial >= 1x Kafka Streams (1 thread)",
              ("fluvial-local", *fig2), ("kafka-streams", *fig2), 1.0)  # fmt: skip
    ratio_row("figure2 EOS 100 ms: fluvial >= 0.6x the hand-written ceiling",
              ("fluvial-local", *fig2), ("ceiling", *fig2), 0.6)  # fmt: skip
    ratio_row("figure2 EOS 100 ms, fluvial's record cache on: fluvial >= 5x Quix Streams",
              ("fluvial-local+cache", *fig2), ("quix", *fig2), 5.0)  # fmt: skip
    for system, workload, guarantee, commit in sorted(t):
        if guarantee == EOS and commit == 100 and system.startswith("fluvial"):
            alos = (system, workload, ALOS, 100)
            if alos in t:
                overhead = 1 - t[(system, workload, EOS, 100)] / t[alos]
                rows.append((f"{workload} on {system}: EOS overhead vs ALOS at 100 ms <= 10%",
                             f"{overhead:+.0%}", "met" if overhead <= 0.10 else "not met"))  # fmt: skip
    for _system, workload, guarantee, commit in sorted(t):
        if _system == "fluvial-local" and commit == 1000:
            ratio_row(f"{workload} {guarantee} 1 s: Spark engine >= 85% of local",
                      ("fluvial-spark", workload, guarantee, 1000),
                      ("fluvial-local", workload, guarantee, 1000), 0.85)  # fmt: skip
    for run in runs:
        if run["mode"] == "latency" and run["status"] == "ok" and run["system"] == "fluvial-local":
            bound = run["commit_interval_ms"] + 50
            p99 = run["latency_p99_ms"]
            rows.append((f"{run['workload']} {run['guarantee']} {run['commit_interval_ms']} ms: "
                         f"p99 latency <= commit interval + 50 ms ({bound} ms)",
                         f"{p99:.0f} ms", "met" if p99 <= bound else "not met"))  # fmt: skip
    return rows


def markdown(
    docs: list[tuple[dict[str, Any], list[Run]]],
    plots: list[str],
    history: list[dict[str, Any]] | None = None,
) -> str:
    lines = ["# fluvial bench report", ""]
    for env, runs in docs:
        lines += [f"*{one_line(env)}*", ""]
        if any(r["mode"] == "throughput" for r in runs):
            lines += [
                "| system | workload | guarantee | commit | records | throughput (rec/s) | "
                "CPU µs / record | peak RSS (MiB) | startup (s) | output records | load |",
                "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in sorted((r for r in runs if r["mode"] == "throughput"), key=_sort_key):
                head = (f"| {r['system']} | {r['workload']} | {_guarantee(r)} | "
                        f"{r['commit_interval_ms']} ms | {r['records']:,} |")  # fmt: skip
                if r["status"] == "ok":
                    lines.append(
                        f"{head} {r['throughput_rps']:,.0f} | {r['cpu_s_per_million']:.1f} | "
                        f"{r['peak_rss_mb']:.0f} | {r['startup_s']:.1f} | "
                        f"{r['output_records']:,} | {_load(r)} |"
                    )
                else:
                    lines.append(f"{head} {r['status']}: {r.get('reason', '')} | | | | | |")
            lines.append("")
        latency = [r for r in runs if r["mode"] == "latency"]
        if latency:
            lines += [
                "| system | workload | guarantee | commit | rate (rec/s) | p50 (ms) | p90 (ms) | "
                "p99 (ms) | max (ms) | results |",
                "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
            ]
            for r in sorted(latency, key=_sort_key):
                head = (f"| {r['system']} | {r['workload']} | {r['guarantee']} | "
                        f"{r['commit_interval_ms']} ms | {r['rate']:,} |")  # fmt: skip
                if r["status"] == "ok":
                    lines.append(
                        f"{head} {r['latency_p50_ms']:.1f} | {r['latency_p90_ms']:.1f} | "
                        f"{r['latency_p99_ms']:.1f} | {r['latency_max_ms']:.1f} | "
                        f"{r['results_measured']:,} |"
                    )
                else:
                    lines.append(f"{head} {r['status']}: {r.get('reason', '')} | | | | |")
            lines.append("")
        lines += nexmark_markdown(runs)
        rows = targets(runs)
        if rows:
            lines += ["Targets (ratios of throughput within this run):", ""]
            lines += ["| target | measured | verdict |", "|---|---:|---|"]
            lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
            lines.append("")
        lines += ["Configuration of each system:", ""]
        seen = set()
        for r in sorted(runs, key=_sort_key):
            key = (r["system"], r["guarantee"], r["commit_interval_ms"])
            if key in seen or r["status"] == "skipped":
                continue
            seen.add(key)
            cfg = ", ".join(f"`{k}={v}`" for k, v in r["config"].items())
            lines.append(f"- **{r['system']}** ({r.get('version', '')}): {cfg}")
        skipped = {(r["system"], r.get("reason", "")) for r in runs if r["status"] == "skipped"}
        for system, reason in sorted(skipped):
            lines.append(f"- **{system}** skipped some runs: {reason}")
        lines.append("")
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    if history:
        lines += ["", *history_markdown(history)]
    return "\n".join(lines) + "\n"


def _nexmark_runs(runs: list[Run]) -> list[Run]:
    return [r for r in runs if r.get("query") and r["mode"] == "throughput" and r["status"] == "ok"]


def nexmark_markdown(runs: list[Run]) -> list[str]:
    """Nexmark: per query and setting, fluvial against Kafka Streams (CPU per event and
    throughput as ratios within the run) beside Flink's published per-core figure."""
    from fluvial.bench.nexmark.table import HEADERS, row_cells, table_rows

    rows = [r for r in table_rows(runs) if r.value("fluvial", "throughput_rps") is not None
            or r.value("kafka-streams", "throughput_rps") is not None]  # fmt: skip
    if not rows:
        return []
    lines = [
        "Nexmark: per query, guarantee and cache setting (ratios: fluvial / kafka-streams in "
        "this run; Flink's figure is Flink's own set-up, generated source and no Kafka I/O):",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|---|---|---|" + "---:|" * (len(HEADERS) - 3),
    ]
    lines += ["| " + " | ".join(row_cells(row)) + " |" for row in rows]
    return [*lines, ""]


def plot_nexmark(runs: list[Run], caption: str, path: Path) -> bool:
    """Events/s per Nexmark query, one bar per system and cache setting, exactly-once runs."""
    nexmark = [r for r in _nexmark_runs(runs) if r["guarantee"] == EOS]
    if not nexmark:
        return False
    queries = sorted({r["query"] for r in nexmark}, key=lambda q: int(q[1:]))
    systems = sorted({r["system"] for r in nexmark})
    value = {(r["query"], r["system"]): r["throughput_rps"] for r in nexmark}
    fig, ax = _figure(caption, width=max(7, 1.1 * len(queries) + 3))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        xs = [q + i * width for q in range(len(queries)) if (queries[q], system) in value]
        ys = [value[(query, system)] for query in queries if (query, system) in value]
        ax.bar(xs, ys, width, label=system)
    ax.set_xticks([q + 0.4 - width / 2 for q in range(len(queries))])
    ax.set_xticklabels(queries)
    ax.set_ylabel("input events / s (exactly-once)")
    ax.set_title("Nexmark: throughput per query (same Kafka, same input, one thread each)")
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def _load(run: Run) -> str:
    """The 1-minute load average at the start and the end of the run, where recorded."""
    start, end = run.get("load_average"), run.get("load_average_end")
    if not start:
        return ""
    return f"{start[0]:.1f} → {end[0]:.1f}" if end else f"{start[0]:.1f}"


def _guarantee(run: Run) -> str:
    # Spark's Kafka sink has no exactly-once mode: say what actually ran.
    if run["system"] == "spark-ss" and run["guarantee"] == EOS:
        return "at_least_once (no EOS sink)"
    return run["guarantee"]


def _sort_key(run: Run) -> tuple[Any, ...]:
    order = SYSTEM_ORDER.index(run["system"]) if run["system"] in SYSTEM_ORDER else 99
    return (run["workload"], run["guarantee"], run["commit_interval_ms"], order)


# -- history ----------------------------------------------------------------------------------

HISTORY_FIELDS = (
    "system", "workload", "guarantee", "commit_interval_ms", "records", "throughput_rps",
    "cpu_us_per_record", "load_average",
)  # fmt: skip


def update_history(
    path: Path, docs: list[tuple[dict[str, Any], list[Run]]]
) -> list[dict[str, Any]]:
    """Add each results file's throughput runs to the history file, once per file (by its
    date), and return every entry, oldest first. Earlier numbers so stay beside new ones."""
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"entries": []}
    entries: list[dict[str, Any]] = data["entries"]
    known = {entry["date"] for entry in entries}
    for env, runs in docs:
        rows = [
            {field: run.get(field) for field in HISTORY_FIELDS}
            for run in sorted(runs, key=_sort_key)
            if run["mode"] == "throughput" and run["status"] == "ok"
        ]
        if rows and env["date"] not in known:
            entries.append({"date": env["date"], "note": "", "runs": rows})
            known.add(env["date"])
    entries.sort(key=lambda entry: entry["date"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return entries


def history_markdown(entries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## History",
        "",
        "Every run kept in the history file, oldest first. Each group of rows shares one run and "
        "one machine state; compare systems within a group, not across groups.",
        "",
        "| date | note | system | workload | guarantee | commit | records | rec/s | "
        "CPU µs / record | load |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for entry in entries:
        for run in entry["runs"]:
            commit, records = run.get("commit_interval_ms"), run.get("records")
            cpu, load = run.get("cpu_us_per_record"), run.get("load_average")
            cells = [
                entry["date"], entry.get("note", ""), run["system"], run["workload"],
                run["guarantee"], "" if commit is None else f"{commit} ms",
                "" if records is None else f"{records:,}", f"{run['throughput_rps']:,.0f}",
                "" if cpu is None else f"{cpu:.1f}", f"{load[0]:.1f}" if load else "",
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return lines


# -- plots ------------------------------------------------------------------------------------


def _figure(caption: str, width: float = 9, height: float = 4.8):  # noqa: ANN202
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    fig.text(0.01, 0.01, caption, fontsize=7, color="#555555")
    return fig, ax


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)


def plot_throughput(runs: list[Run], caption: str, path: Path) -> bool:
    """Grouped bars: throughput per system, one group per (workload, guarantee, commit)."""
    t = throughput_index(runs)
    groups = sorted({(w, g, c) for (_s, w, g, c) in t}, key=lambda x: (x[0], x[1], x[2]))
    # Only groups with more than one system compare anything.
    groups = [grp for grp in groups if sum(1 for s in SYSTEM_ORDER if (s, *grp) in t) > 1]
    if not groups:
        return False
    systems = [s for s in SYSTEM_ORDER if any((s, *grp) in t for grp in groups)]
    fig, ax = _figure(caption, width=max(7, 2.2 * len(groups) + 3))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        xs = [g + i * width for g in range(len(groups)) if (system, *groups[g]) in t]
        ys = [t[(system, *grp)] for grp in groups if (system, *grp) in t]
        bars = ax.bar(xs, ys, width, label=system)
        ax.bar_label(bars, labels=[f"{y / 1000:.1f}k" for y in ys], fontsize=7)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{w}\n{g.replace('_v2', '')}, {c} ms" for w, g, c in groups], fontsize=8)
    ax.set_ylabel("input records / s")
    ax.set_title("Throughput per system (same Kafka, same input)")
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def plot_eos_overhead(runs: list[Run], caption: str, path: Path) -> bool:
    """EOS throughput loss versus ALOS, per commit interval, one line per (system, workload)."""
    t = throughput_index(runs)
    series: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for system, workload, guarantee, commit in sorted(t):
        if guarantee == EOS and (system, workload, ALOS, commit) in t:
            overhead = 1 - t[(system, workload, EOS, commit)] / t[(system, workload, ALOS, commit)]
            series[(system, workload)].append((commit, 100 * overhead))
    if not series:
        return False
    fig, ax = _figure(caption)
    for (system, workload), points in sorted(series.items()):
        xs, ys = zip(*sorted(points), strict=True)
        ax.plot(xs, ys, marker="o", label=f"{system} {workload}")
    ax.axhline(10, color="#999999", linestyle="--", linewidth=1)
    ax.text(ax.get_xlim()[0], 10.5, "target: 10%", fontsize=7, color="#777777")
    ax.set_xscale("log")
    ax.set_xlabel("commit interval (ms)")
    ax.set_ylabel("EOS throughput loss vs ALOS (%)")
    ax.set_title("Cost of exactly-once per commit interval")
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def plot_latency(runs: list[Run], caption: str, path: Path) -> bool:
    """The distribution (CDF) of end-to-end latency of each latency run."""
    latency = [r for r in runs if r["mode"] == "latency" and r["status"] == "ok"]
    latency = [r for r in latency if r.get("latency_sample_ms")]
    if not latency:
        return False
    fig, ax = _figure(caption)
    for r in sorted(latency, key=_sort_key):
        values = r["latency_sample_ms"]
        ys = [100 * (i + 1) / len(values) for i in range(len(values))]
        label = (f"{r['system']} {r['workload']} {r['guarantee'].replace('_v2', '')} "
                 f"{r['commit_interval_ms']} ms (p99 {r['latency_p99_ms']:.0f} ms)")  # fmt: skip
        ax.plot(values, ys, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (ms): input timestamp to read_committed result")
    ax.set_ylabel("results (%)")
    ax.set_title(f"Latency distribution at a fixed input rate ({latency[0]['rate']} records/s)")
    ax.legend(fontsize=7)
    _save(fig, path)
    return True


def plot_engines(runs: list[Run], caption: str, path: Path) -> bool:
    """fluvial's Spark engine against its local engine, per workload and configuration."""
    t = throughput_index(runs)
    groups = sorted(
        {
            (w, g, c)
            for (s, w, g, c) in t
            if s == "fluvial-spark" and ("fluvial-local", w, g, c) in t
        }
    )
    if not groups:
        return False
    fig, ax = _figure(caption, width=max(7, 1.6 * len(groups) + 3))
    for i, system in enumerate(("fluvial-local", "fluvial-spark")):
        ys = [t[(system, *grp)] for grp in groups]
        bars = ax.bar([g + i * 0.4 for g in range(len(groups))], ys, 0.4, label=system)
        ax.bar_label(bars, labels=[f"{y / 1000:.1f}k" for y in ys], fontsize=7)
    for g, grp in enumerate(groups):
        ratio = t[("fluvial-spark", *grp)] / t[("fluvial-local", *grp)]
        ax.text(g + 0.2, 0, f"{ratio:.0%}", ha="center", va="bottom", fontsize=8, color="white")
    ax.set_xticks([g + 0.2 for g in range(len(groups))])
    ax.set_xticklabels([f"{w}\n{g.replace('_v2', '')}, {c} ms" for w, g, c in groups], fontsize=8)
    ax.set_ylabel("input records / s")
    ax.set_title("fluvial: Spark engine vs local engine (ratio at the foot of each pair)")
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def write_report(files: list[Path], out: Path, history: Path | None = None) -> Path:
    """Write ``out/report.md`` and its PNG plots; returns the markdown's path.

    With ``history``, the runs of ``files`` are added to that JSON file (once each) and the
    report ends with every run the file holds."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as error:
        raise FluvialError(
            "the report's plots need matplotlib: run 'uv sync --group bench' (or "
            "'uv run --group bench fluvial bench report ...')"
        ) from error
    docs = load(files)
    out.mkdir(parents=True, exist_ok=True)
    runs = [r for _env, rs in docs for r in rs]
    caption = one_line(docs[-1][0])
    plots = []
    # Nexmark runs have a plot of their own: one bar group per query would bury the workloads'.
    workloads = [r for r in runs if not r.get("query")]
    for name, plot, shown in (
        ("throughput", plot_throughput, workloads),
        ("eos-overhead", plot_eos_overhead, workloads),
        ("latency", plot_latency, runs),
        ("engines", plot_engines, runs),
        ("nexmark", plot_nexmark, runs),
    ):
        path = out / f"{name}.png"
        if plot(shown, caption, path):
            plots.append(str(path))
    entries = update_history(history, docs) if history is not None else None
    report = out / "report.md"
    report.write_text(markdown(docs, plots, entries))
    return report
