"""The results of a ``fluvial bench`` run: each run printed as it ends and kept in the JSON file.

Shared by the workload matrix (:mod:`fluvial.bench.cli`) and the Nexmark matrix
(:mod:`fluvial.bench.nexmark.bench`), which the command line of the first mounts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fluvial.bench.environment import describe
from fluvial.cli_support import lazy_console

console = lazy_console(stderr=True, soft_wrap=True)  # rich is imported when it first prints


class Results:
    """Collects runs and rewrites the JSON file after each, so a long matrix keeps what ran."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "environment": describe(),
            "command": " ".join(["fluvial", "bench", *sys.argv[2:]]),
            "runs": [],
        }

    def add(self, run: dict[str, Any]) -> None:
        self.data["runs"].append(run)
        print_run(run)
        self.save()

    def save(self) -> None:
        """Rewrite the file with what the results hold now."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.data, indent=1) + "\n")


def print_run(run: dict[str, Any]) -> None:
    head = (
        f"{run['system']:<16} {run['workload']:<11} {run['guarantee']:<15} "
        f"{run['commit_interval_ms']:>6} ms"
    )
    if run["status"] != "ok":
        console.print(f"{head}  {run['status']}: {run.get('reason', '')}", highlight=False)
        if run.get("log_tail"):
            console.print(run["log_tail"], highlight=False, markup=False)
        return
    if run["mode"] == "throughput":
        console.print(
            f"{head}  cpu {run['cpu_s_per_million']:6.2f} µs/rec  "
            f"{run['throughput_rps']:>9,.0f} rec/s  {run['seconds']:6.2f} s  rss {run['peak_rss_mb']:6.0f} MiB  "
            f"in {run['input_committed']:,}/{run['input_records']:,}  "
            f"out {run['output_records']:,}  (startup {run['startup_s']:.1f} s)",
            highlight=False,
        )
    else:
        console.print(
            f"{head}  p50 {run['latency_p50_ms']:7.1f} ms  p99 {run['latency_p99_ms']:7.1f} ms  "
            f"max {run['latency_max_ms']:7.1f} ms  ({run['results_measured']:,} results at "
            f"{run['rate']}/s)  rss {run['peak_rss_mb']:6.0f} MiB",
            highlight=False,
        )
