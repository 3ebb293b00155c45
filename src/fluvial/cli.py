"""The ``fluvial`` command line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from fluvial.errors import FluvialError
from fluvial.kafka.local import DEFAULT_HEAP, DEFAULT_PORT, KAFKA_VERSION, LocalKafka

app = typer.Typer(
    help="fluvial: Kafka Streams for Python, exactly-once on Apache Kafka and Apache Spark.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
kafka_app = typer.Typer(help="Run a local Apache Kafka (KRaft) for development and tests.")
app.add_typer(kafka_app, name="kafka")
from fluvial.bench.cli import bench_app  # noqa: E402 - beside the other sub-apps

app.add_typer(bench_app, name="bench")

console = Console(stderr=True)
out = Console()

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Directory holding the cluster's data and logs [default: ~/.fluvial/kafka-PORT].",
    ),
]
PortOption = Annotated[
    int, typer.Option("--port", help="Port of the first broker; broker N listens on PORT+N-1.")
]


def _fail(error: Exception) -> None:
    console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=1)


def _cluster(data_dir: Path | None, port: int, brokers: int = 1, heap: str = DEFAULT_HEAP):
    return LocalKafka(data_dir, port=port, brokers=brokers, heap=heap)


@kafka_app.command("start")
def kafka_start(
    data_dir: DataDirOption = None,
    port: PortOption = DEFAULT_PORT,
    brokers: Annotated[int, typer.Option(help="Number of brokers (3 gives RF 3, min ISR 2).")] = 1,
    heap: Annotated[str, typer.Option(help="Maximum JVM heap per broker, e.g. 512m or 1g.")] = (
        DEFAULT_HEAP
    ),
) -> None:
    """Start a local cluster (idempotent); prints its bootstrap.servers when it is ready."""
    try:
        cluster = _cluster(data_dir, port, brokers, heap)
        if cluster.is_running():
            console.print(f"already running in {cluster.data_dir}")
        else:
            started = time.monotonic()
            with console.status("starting Apache Kafka") as status:
                cluster.start(progress=lambda msg: status.update(msg))
            console.print(
                f"Apache Kafka {KAFKA_VERSION} is ready: {cluster.brokers} broker(s), "
                f"data in {cluster.data_dir} ({time.monotonic() - started:.1f} s)"
            )
        out.print(cluster.bootstrap_servers, highlight=False)
    except FluvialError as error:
        _fail(error)


@kafka_app.command("stop")
def kafka_stop(data_dir: DataDirOption = None, port: PortOption = DEFAULT_PORT) -> None:
    """Stop a local cluster; its data directory is kept for the next start."""
    cluster = _cluster(data_dir, port)
    running = [n for n in cluster.node_ids() if cluster.pid(n) is not None]
    cluster.stop()
    console.print(f"stopped {len(running)} broker(s); data kept in {cluster.data_dir}")


@kafka_app.command("status")
def kafka_status(
    data_dir: DataDirOption = None,
    port: PortOption = DEFAULT_PORT,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Show whether a local cluster runs, its brokers and bootstrap servers. Exit 1 if down."""
    cluster = _cluster(data_dir, port)
    status = cluster.status()
    if as_json:
        out.print_json(json.dumps(status))
    else:
        state = "[green]serving[/]" if status["serving"] else "[red]not serving[/]"
        out.print(f"{state}  bootstrap.servers={status['bootstrap_servers']}  ({cluster.data_dir})")
        for node_id, node in status["brokers"].items():  # type: ignore[attr-defined]
            pid = node["pid"] or "-"
            out.print(f"  broker {node_id}: port {node['port']} pid {pid}")
    if not status["serving"]:
        raise typer.Exit(code=1)


@kafka_app.command("logs")
def kafka_logs(
    data_dir: DataDirOption = None,
    port: PortOption = DEFAULT_PORT,
    broker: Annotated[int, typer.Option(help="Which broker's log.")] = 1,
    lines: Annotated[int, typer.Option("-n", "--lines", help="How many lines.")] = 50,
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="Keep printing new lines.")
    ] = False,
) -> None:
    """Print the end of a broker's log."""
    cluster = _cluster(data_dir, port)
    path = cluster.log_file(broker)
    if not path.exists():
        _fail(FluvialError(f"no log at {path}: has this cluster been started?"))
    if follow:
        subprocess.run(["tail", "-n", str(lines), "-F", str(path)], check=False)
    else:
        sys.stdout.write("".join(path.read_text(errors="replace").splitlines(True)[-lines:]))


# -- applications ---------------------------------------------------------------------------------


def _load(app_file: Path):  # noqa: ANN202 - returns LoadedApp
    from fluvial.runtime.loader import load_app

    try:
        return load_app(app_file)
    except FluvialError as error:
        _fail(error)


@app.command("describe")
def describe(
    app_file: Annotated[Path, typer.Argument(help="The application: APP.py")],
    fmt: Annotated[str, typer.Option("--format", help="text, dot or mermaid")] = "text",
) -> None:
    """Print an application's sub-topologies, sources, processors, stores and sinks."""
    loaded = _load(app_file)
    app_id = loaded.config.application_id if loaded.config else None
    description = loaded.topology.describe(app_id)
    if fmt == "text":
        out.print(str(description), highlight=False, markup=False, soft_wrap=True)
    elif fmt in ("dot", "mermaid"):
        render = getattr(description, f"to_{fmt}", None)
        if render is None:
            _fail(FluvialError(f"--format {fmt} is not available yet; use --format text"))
        out.print(render(), highlight=False, markup=False, soft_wrap=True)
    else:
        _fail(FluvialError(f"unknown --format {fmt!r}: use text, dot or mermaid"))


@app.command("run")
def run(
    app_file: Annotated[Path, typer.Argument(help="The application: APP.py")],
    engine: Annotated[str, typer.Option(help="spark (the default) or local (in this process)")] = (
        "spark"
    ),
    master: Annotated[str, typer.Option(help="Spark master for --engine spark")] = "local[*]",
    guarantee: Annotated[str | None, typer.Option(help="exactly_once_v2 or at_least_once")] = None,
    commit_interval_ms: Annotated[int | None, typer.Option(help="Commit interval (ms)")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers")] = None,
    application_id: Annotated[str | None, typer.Option(help="Override the application id")] = None,
    state_dir: Annotated[Path | None, typer.Option(help="Where local state lives")] = None,
    workers: Annotated[int | None, typer.Option(help="Number of worker slots")] = None,
    prometheus_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics")
    ] = None,
    quiet: Annotated[bool, typer.Option(help="No live status line")] = False,
) -> None:
    """Run an application until Ctrl-C or SIGTERM, which commit and stop."""
    from fluvial.config import StreamsConfig
    from fluvial.runtime.runner import run_application

    loaded = _load(app_file)
    overrides = {
        "processing_guarantee": guarantee,
        "commit_interval_ms": commit_interval_ms,
        "bootstrap_servers": bootstrap_servers,
        "application_id": application_id,
        "state_dir": str(state_dir) if state_dir else None,
    }
    try:
        base = loaded.config or StreamsConfig()
        config = base.with_overrides(**{k: v for k, v in overrides.items() if v is not None})
        if engine == "spark":
            from fluvial.spark.runner import run_spark_application

            code = run_spark_application(
                app_file, config, master=master, workers=workers, console=console,
                prometheus_port=prometheus_port, live=not quiet,
            )  # fmt: skip
        elif engine == "local":
            code = run_application(
                loaded.topology, config, workers=workers, console=console,
                prometheus_port=prometheus_port, live=not quiet,
            )  # fmt: skip
        else:
            raise FluvialError(f"unknown engine {engine!r}: use --engine spark or --engine local")
    except FluvialError as error:
        _fail(error)
    raise typer.Exit(code=code)


@app.command("reset")
def reset(
    application_id: Annotated[str, typer.Argument(help="The application id to reset")],
    bootstrap_servers: Annotated[str, typer.Option(help="Kafka bootstrap servers")] = (
        "127.0.0.1:9092"
    ),
    state_dir: Annotated[Path, typer.Option(help="The application's state_dir")] = Path(
        "/tmp/fluvial"
    ),
) -> None:
    """Reset an application so that it reprocesses its input from scratch.

    Deletes its committed offsets (inputs are read again from the earliest), its internal
    topics (repartition, changelog) and its local state. Stop the application first.
    """
    from fluvial.runtime.reset import reset_application

    try:
        report = reset_application(application_id, bootstrap_servers, state_dir)
    except FluvialError as error:
        _fail(error)
    console.print(
        f"reset {application_id}: committed offsets "
        f"{'deleted' if report.group_deleted else 'none found'}; "
        f"{len(report.deleted_topics)} internal topic(s) deleted; local state "
        f"{'wiped at ' + str(report.state_wiped) if report.state_wiped else 'none found'}"
    )
    for topic in report.deleted_topics:
        console.print(f"  deleted {topic}")


@app.command("demo")
def demo(
    events: Annotated[int, typer.Option(help="How many page views to produce")] = 4000,
    seconds: Annotated[float, typer.Option(help="Over how many seconds")] = 40.0,
) -> None:
    """The main job: Figure 2 on Spark under exactly-once, crashed part-way, then checked.

    Starts a private local Kafka, runs the pipeline with the Spark engine, kills a Python
    worker and the driver part-way, shows live revisions and the final windowed counts, and
    ends with a verdict from a Spark batch job that recounts the input. Cleans up after itself.
    """
    from fluvial.demo import run_demo

    try:
        code = run_demo(events, seconds, console=out)
    except FluvialError as error:
        _fail(error)
    raise typer.Exit(code=code)


@app.command("verify")
def verify(
    seed: Annotated[int, typer.Option(help="Seed of the input and the fault schedule")] = 1,
    guarantee: Annotated[str, typer.Option(help="exactly_once_v2 or at_least_once")] = (
        "exactly_once_v2"
    ),
    engine: Annotated[str, typer.Option(help="local or spark")] = "local",
    records: Annotated[
        int,
        typer.Option(
            help="Input records per fault kind, at least: the input runs on until every fault "
            "has been injected and recovered from"
        ),
    ] = 6000,
    faults: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated fault kinds, one scenario each. local: kill-app,zombie,"
            "kill-broker (the default); spark: kill-spark-worker,kill-app (the default),kill-broker"
        ),
    ] = None,
    fault_count: Annotated[int, typer.Option(help="Faults to inject per fault kind")] = 3,
    duration_s: Annotated[
        float,
        typer.Option(
            help="Pacing: the input flows at --records per --duration-s, for at least this "
            "many seconds per fault kind, and the faults are spread over it. Slow faults "
            "extend the input; they never fail a run"
        ),
    ] = 30.0,
    timeout_s: Annotated[
        float | None,
        typer.Option(
            help="Give up on a fault kind after this many seconds, naming the fault or "
            "recovery not seen (default: --duration-s + 300 s + 120 s per fault)"
        ),
    ] = None,
    commit_interval_ms: Annotated[int, typer.Option(help="Commit interval of the app")] = 500,
    spark_lease_ms: Annotated[int, typer.Option(help="Lease length under --engine spark")] = 4000,
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Use this cluster instead of a private 3-broker one")
    ] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="Write the report here")] = None,
) -> None:
    """Run the exactly-once fault matrix and check the output record by record.

    Each fault kind runs as its own scenario (fresh application id and topics on one
    three-broker cluster), so each row of the table counts only its own faults and records.
    The input flows until every fault has been injected and recovered from, so the records
    checked grow with the time the faults take.
    """
    from rich.table import Table

    from fluvial.verify.matrix import TABLE_HEADER, report_json, run_matrix

    kinds = tuple(f.strip() for f in (faults or "").split(",") if f.strip()) or None
    # SIGTERM unwinds like Ctrl-C, so the run's apps and brokers are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        report = run_matrix(
            seed=seed, guarantee=guarantee, engine=engine, records=records, faults=kinds,
            fault_count=fault_count, duration_s=duration_s, timeout_s=timeout_s,
            commit_interval_ms=commit_interval_ms, spark_lease_ms=spark_lease_ms,
            bootstrap_servers=bootstrap_servers,
            progress=lambda msg: console.print(f"verify: {msg}", highlight=False),
        )  # fmt: skip
    except ValueError as error:
        _fail(FluvialError(str(error)))
    for scenario in report.scenarios:
        for problem in scenario.problems:
            console.print(f"  problem ({scenario.fault}): {problem}", highlight=False)
    if json_file is not None:
        json_file.write_text(report_json(report))
    table = Table(*TABLE_HEADER)
    for row in report.table_rows():
        table.add_row(*row)
    out.print(table)
    out.print(
        f"seed {seed}, {guarantee}, engine {engine}, commit every {commit_interval_ms} ms, "
        f"input of at least {records} records over {duration_s:g} s per fault kind, "
        f"{report.wall_s:g} s wall -> {report.verdict}",
        highlight=False,
    )
    raise typer.Exit(code=0 if report.verdict == "PASS" else 1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
