"""``fluvial bench``: run workloads on fluvial and its peers, and write reports."""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from fluvial.bench.environment import describe
from fluvial.bench.nexmark.cli import nexmark_app
from fluvial.bench.results import Results, console
from fluvial.bench.systems import ALL_SYSTEMS, PEER_NAMES
from fluvial.bench.workloads import WORKLOADS
from fluvial.cli_support import lazy_console, new_app

bench_app = new_app(
    help="Benchmarks: fluvial and its peers side by side on the same Kafka and input.",
    no_args_is_help=True,
)
out = lazy_console()

Records = Annotated[int, typer.Option(help="Input records (throughput mode)")]
Partitions = Annotated[int, typer.Option(help="Partitions of every input and output topic")]
Guarantee = Annotated[str, typer.Option(help="exactly_once_v2 or at_least_once")]
CommitMs = Annotated[int, typer.Option("--commit-interval-ms", help="Commit interval (ms)")]
Engine = Annotated[str, typer.Option(help="fluvial's engine: local, spark or both")]
Peers = Annotated[
    str,
    typer.Option(help=f"Peers to run too, comma-separated, or 'all': {', '.join(PEER_NAMES)}"),
]
JsonOut = Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here")]
Bootstrap = Annotated[
    str | None,
    typer.Option(help="Use this Kafka instead of starting a private local one"),
]
Rate = Annotated[
    int | None,
    typer.Option(help="Latency mode: produce this many records/s instead of pre-loading"),
]
Seconds = Annotated[float, typer.Option(help="Latency mode: how long to measure")]
Master = Annotated[str, typer.Option(help="Spark master for --engine spark and spark-ss")]
ClientConfig = Annotated[
    Path | None,
    typer.Option(
        "--client-config",
        help="Kafka client settings of --bootstrap-servers' cluster (security.protocol, sasl.*, "
        "ssl.*; librdkafka key=value lines) (default: $FLUVIAL_KAFKA_CLIENT_CONFIG), as for "
        "fluvial run; FLUVIAL_KAFKA_CLIENT_<SETTING> variables override single settings. "
        "Secured clusters run fluvial only, not the peers",
    ),
]


def _security(
    bootstrap: str | None, path: Path | None
) -> tuple[str | None, dict[str, str], Path | None]:
    """(bootstrap servers, client settings, the file fluvial's processes read them from)."""
    import os

    from fluvial.errors import FluvialError
    from fluvial.kafka.security import (
        CLIENT_CONFIG_ENV,
        check_connection,
        client_settings,
        split_bootstrap,
    )

    try:
        settings_bootstrap, settings = split_bootstrap(client_settings(path))
        bootstrap = bootstrap or settings_bootstrap
        if settings and bootstrap is None:
            raise FluvialError(
                "client settings are for an existing cluster: give its bootstrap servers "
                "(--bootstrap-servers, or bootstrap.servers in the settings file)"
            )
        if bootstrap:
            check_connection(bootstrap, settings)
    except FluvialError as error:
        console.print(f"[bold red]error:[/] {error}", highlight=False)
        raise typer.Exit(code=1) from None
    chosen = path or (Path(os.environ[CLIENT_CONFIG_ENV]) if os.environ.get(CLIENT_CONFIG_ENV)
                      else None)  # fmt: skip
    return bootstrap, settings, chosen


def _systems(engine: str, peers: str, baseline: Path | None = None) -> list[str]:
    engines = ["local", "spark"] if engine == "both" else [engine]
    for e in engines:
        if e not in ("local", "spark"):
            raise typer.BadParameter(f"unknown engine {e!r}: use local, spark or both")
    names = [f"fluvial-{e}" for e in engines]
    if baseline is not None:
        from fluvial.bench import systems

        source = baseline.resolve()
        if not (source / "fluvial" / "__init__.py").exists():
            raise typer.BadParameter(
                f"--baseline-src {baseline} has no fluvial package: give a checkout's src folder"
            )
        systems.BASELINE_SOURCE = source
        names.append("fluvial-baseline")
    chosen = list(PEER_NAMES) if peers == "all" else [p for p in peers.split(",") if p]
    for peer in chosen:
        if peer not in PEER_NAMES:
            raise typer.BadParameter(f"unknown peer {peer!r}: use {', '.join(PEER_NAMES)} or all")
    return names + chosen


def run_bench(
    workloads: list[str],
    systems: list[str],
    guarantees: list[str],
    commit_intervals: list[int],
    *,
    records: int,
    partitions: int,
    bootstrap: str | None,
    json_out: Path | None,
    rate: int | None = None,
    seconds: float = 20.0,
    master: str = "local[2]",
    profile_dir: Path | None = None,
    client_config: dict[str, str] | None = None,
    client_config_file: Path | None = None,
    cache_max_bytes: int = 0,
    catch_up_completeness: bool = True,
) -> dict[str, Any]:
    """Run every combination; returns the results document (also written to ``json_out``)."""
    from fluvial.bench.harness import kafka, new_spec, run_latency, run_throughput
    from fluvial.bench.systems import make_system

    results = Results(json_out)
    # SIGTERM unwinds like Ctrl-C: the run's processes are stopped and the private Kafka too.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    with tempfile.TemporaryDirectory(prefix="fluvial-bench-") as work, kafka(bootstrap) as servers:
        console.print(f"bench: Kafka at {servers}; work in {work}", highlight=False)
        for workload in workloads:
            for guarantee in guarantees:
                for commit_ms in commit_intervals:
                    for name in systems:
                        system = make_system(name)
                        spec = new_spec(
                            workload, system=name, records=records, partitions=partitions,
                            guarantee=guarantee, commit_ms=commit_ms, bootstrap=servers,
                            work_root=Path(work), spark_master=master,
                            profile_dir=profile_dir if name.startswith("fluvial") else None,
                            client_config=client_config,
                            client_config_file=client_config_file,
                            cache_max_bytes=cache_max_bytes,
                            catch_up_completeness=catch_up_completeness,
                        )  # fmt: skip
                        if rate:
                            run = run_latency(system, spec, rate=rate, seconds=seconds)
                        else:
                            run = run_throughput(system, spec)
                        results.add(run)
    return results.data


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _workload_command(workload: str):  # noqa: ANN202 - a typer command
    def command(
        records: Records = 100_000,
        partitions: Partitions = 1,
        guarantee: Guarantee = "exactly_once_v2",
        commit_interval_ms: CommitMs = 100,
        engine: Engine = "local",
        peers: Peers = "",
        json_out: JsonOut = None,
        bootstrap_servers: Bootstrap = None,
        rate: Rate = None,
        seconds: Seconds = 20.0,
        master: Master = "local[2]",
        profile: Annotated[
            Path | None,
            typer.Option(help="Profile fluvial with py-spy; collapsed stacks go to this folder"),
        ] = None,
        client_config: ClientConfig = None,
        baseline_src: Annotated[
            Path | None,
            typer.Option(
                help="Also run the fluvial of this checkout's src folder (fluvial-baseline), "
                "on the same broker and input: a change against its baseline in one run"
            ),
        ] = None,
        cache_max_bytes: Annotated[
            int,
            typer.Option(
                help="fluvial's record cache budget in bytes (0: off, as in the Kafka Streams "
                "peer; 10485760 is fluvial's default). Results name such runs fluvial-...+cache; "
                "peers keep their own settings"
            ),
        ] = 0,
        kafka_streams_stream_time: Annotated[
            bool,
            typer.Option(
                "--kafka-streams-stream-time",
                help="Run fluvial with Kafka Streams' stream time across repartition topics "
                "(catch_up_completeness=False); results are named fluvial-...+kstime",
            ),
        ] = False,
    ) -> None:
        bootstrap, settings, settings_file = _security(bootstrap_servers, client_config)
        run_bench(
            [workload], _systems(engine, peers, baseline_src), [guarantee], [commit_interval_ms],
            records=records, partitions=partitions, bootstrap=bootstrap,
            json_out=json_out, rate=rate, seconds=seconds, master=master, profile_dir=profile,
            client_config=settings, client_config_file=settings_file,
            cache_max_bytes=_non_negative(cache_max_bytes, "--cache-max-bytes"),
            catch_up_completeness=not kafka_streams_stream_time,
        )  # fmt: skip

    command.__doc__ = f"Workload {workload}: {WORKLOADS[workload].description}."
    return command


for _name in WORKLOADS:
    bench_app.command(_name)(_workload_command(_name))

bench_app.add_typer(nexmark_app, name="nexmark")


def _non_negative(value: int, option: str) -> int:
    if value < 0:
        raise typer.BadParameter(f"{option} must not be negative, got {value}")
    return value


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


@bench_app.command("matrix")
def matrix(
    workloads: Annotated[str, typer.Option(help="Comma-separated workloads")] = ",".join(WORKLOADS),
    guarantees: Annotated[str, typer.Option(help="Comma-separated guarantees")] = (
        "at_least_once,exactly_once_v2"
    ),
    commit_intervals: Annotated[str, typer.Option(help="Comma-separated ms")] = "100,1000,30000",
    records: Records = 50_000,
    partitions: Partitions = 1,
    engine: Engine = "local",
    peers: Peers = "",
    json_out: JsonOut = Path("bench-matrix.json"),
    bootstrap_servers: Bootstrap = None,
    master: Master = "local[2]",
    client_config: ClientConfig = None,
) -> None:
    """Every workload at both guarantees and commit intervals 100 ms, 1 s and 30 s."""
    for w in _csv(workloads):
        if w not in WORKLOADS:
            raise typer.BadParameter(f"unknown workload {w!r}: use {', '.join(WORKLOADS)}")
    bootstrap, settings, settings_file = _security(bootstrap_servers, client_config)
    run_bench(
        _csv(workloads), _systems(engine, peers), _csv(guarantees),
        [int(c) for c in _csv(commit_intervals)], records=records, partitions=partitions,
        bootstrap=bootstrap, json_out=json_out, master=master, client_config=settings,
        client_config_file=settings_file,
    )  # fmt: skip


@bench_app.command("queries")
def queries(
    records: Annotated[int, typer.Option(help="Page views pre-loaded for each run")] = 200_000,
    clients: Annotated[int, typer.Option(help="Query client processes")] = 2,
    engine: Annotated[str, typer.Option(help="local or spark")] = "local",
    rate: Annotated[
        float, typer.Option(help="Queries/s offered over all clients (0: back to back)")
    ] = 0.0,
    modes: Annotated[
        str,
        typer.Option(
            help="How committed reads are served, compared in one run: in-process, reader "
            "(a reader process beside the application), or both"
        ),
    ] = "in-process,reader",
    connections: Annotated[int, typer.Option(help="Keep-alive connections per client process")] = 4,
    depth: Annotated[
        int, typer.Option(help="Requests pipelined per connection when back to back")
    ] = 8,
    rounds: Annotated[
        int, typer.Option(help="Run every variant this many times; report the medians")
    ] = 1,
    bootstrap: Bootstrap = None,
    json_out: JsonOut = None,
    client_config: ClientConfig = None,
) -> None:
    """Interactive query load on a running Figure 2 app: queries/s, p50/p99, throughput lost,
    and the CPU of the application, its reader, the query clients and the broker."""
    from fluvial.bench.queries import MODES, run_query_bench

    chosen = tuple(_csv(modes))
    if rate < 0 or min(clients, connections, depth, rounds) < 1:
        raise typer.BadParameter(
            "--rate must be >= 0; --clients, --connections, --depth and --rounds >= 1"
        )
    if not chosen or any(m not in MODES for m in chosen):
        raise typer.BadParameter(f"--modes takes {', '.join(MODES)}")
    bootstrap, settings, settings_file = _security(bootstrap, client_config)
    result = run_query_bench(bootstrap, records=records, clients=clients, engine=engine,
                             rate=rate, modes=chosen, connections=connections,
                             depth=depth, rounds=rounds, client_config=settings,
                             client_config_file=settings_file)  # fmt: skip
    alone = result["without_queries"]
    medians = " (medians)" if rounds > 1 else ""
    lines = [f"processing alone{medians} {alone['processing_rps']:,} rec/s, cpu "
             f"{alone['cpu_cores']}, load {alone['load_average']}"]  # fmt: skip
    for mode, loaded in result["with_queries"].items():
        lines.append(
            f"{mode}: processing {loaded['processing_rps']:,} rec/s "
            f"(lost {100 * loaded['processing_throughput_lost']:.1f}%); queries "
            f"{loaded.get('queries_per_s', 0):,}/s answered, p50 {loaded.get('query_p50_ms')} ms, "
            f"p99 {loaded.get('query_p99_ms')} ms, statuses {loaded.get('statuses')}; cpu "
            f"{loaded['cpu_cores']}; load {loaded['load_average']}"
        )
    console.print("\n".join(lines), highlight=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=1) + "\n")


@bench_app.command("setup")
def setup_peers(
    peers: Annotated[str, typer.Option(help="Peers to install, or 'all'")] = "all",
) -> None:
    """Install the peers: Quix Streams and Faust in private virtual environments (uv), the
    Kafka Streams reference app with Maven. Spark Structured Streaming comes with pyspark."""
    from rich.table import Table

    from fluvial.bench.setup import setup_all

    chosen = [
        p
        for p in _systems("local", peers)
        if p in PEER_NAMES and not p.startswith(("spark-ss", "ceiling"))
    ]
    table = Table("peer", "status")
    for peer, status in setup_all(chosen).items():
        table.add_row(peer, status)
    out.print(table)


@bench_app.command("hotpath")
def hotpath(
    workload: Annotated[str, typer.Option(help="figure2, passthrough or windowed")] = "figure2",
    records: Records = 200_000,
    commit_every: Annotated[int, typer.Option(help="Input records per commit")] = 2_000,
    repeat: Annotated[int, typer.Option(help="Runs; the report gives each and the best")] = 3,
    cache_max_bytes: Annotated[int, typer.Option(help="Record cache budget (0: off)")] = 0,
    json_out: JsonOut = None,
) -> None:
    """fluvial's own CPU per input record, in this process: tasks, stores and commit steps
    without a broker (see fluvial/bench/hotpath.py). The output digest pins the results."""
    from fluvial.bench.hotpath import run_hotpath

    if workload not in WORKLOADS:
        raise typer.BadParameter(f"unknown workload {workload!r}: use {', '.join(WORKLOADS)}")
    runs = []
    for _ in range(repeat):
        run = run_hotpath(workload, records, commit_every, cache_max_bytes=cache_max_bytes)
        runs.append(run)
        console.print(
            f"{workload}: {run['cpu_us_per_record']:6.2f} µs/record CPU  "
            f"({run['records']:,} records, {run['cpu_s']:.2f} s CPU, {run['wall_s']:.2f} s wall)  "
            f"out {run['output_records']:,}  changelog {run['changelog_records']:,}  "
            f"digest {run['output_digest']}",
            highlight=False,
        )
    best = min(r["cpu_us_per_record"] for r in runs)
    console.print(f"best: {best:.2f} µs/record", highlight=False)
    if json_out is not None:
        data = {"environment": describe(), "runs": runs, "best_cpu_us_per_record": best}
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(data, indent=1) + "\n")


@bench_app.command("restore")
def restore(
    keys: Annotated[
        int, typer.Option(help="Keys of the restored store (rows of its changelog)")
    ] = 1_000_000,
    partitions: Partitions = 3,
    value_bytes: Annotated[int, typer.Option(help="Bytes of each value")] = 100,
    systems: Annotated[
        str, typer.Option(help="Comma-separated: fluvial-local, kafka-streams")
    ] = "fluvial-local,kafka-streams",
    bootstrap_servers: Bootstrap = None,
    json_out: JsonOut = None,
) -> None:
    """fluvial and Kafka Streams restoring the same changelog of a key-value store (N keys, the
    same bytes) into a fresh state directory, one after the other: records/s and CPU µs per
    record of the restoring process, and their ratios (see fluvial/bench/restore.py)."""
    from fluvial.bench.restore import SYSTEMS, run_restore_bench

    chosen = tuple(_csv(systems))
    for name in chosen:
        if name not in SYSTEMS:
            raise typer.BadParameter(f"unknown system {name!r}: use {', '.join(SYSTEMS)}")
    for value, option in ((keys, "--keys"), (partitions, "--partitions")):
        if value < 1:
            raise typer.BadParameter(f"{option} must be at least 1, got {value}")
    run_restore_bench(keys=keys, partitions=partitions, value_bytes=max(0, value_bytes),
                      bootstrap=bootstrap_servers, json_out=json_out, systems=chosen)  # fmt: skip


@bench_app.command("hotspots")
def hotspots(
    profile: Annotated[Path, typer.Argument(help="A py-spy profile written by --profile")],
    top: Annotated[int, typer.Option(help="How many functions to list")] = 25,
    thread: Annotated[str, typer.Option(help="Only stacks of threads whose name has this")] = "",
) -> None:
    """The functions a profile spends its time in, by self and by inclusive time."""
    from fluvial.bench.hotspots import format_hotspots

    out.print(format_hotspots(profile, top=top, thread_filter=thread), highlight=False)


@bench_app.command("report")
def report(
    files: Annotated[list[Path], typer.Argument(help="JSON results of 'fluvial bench ... --json'")],
    out: Annotated[Path, typer.Option(help="Directory for report.md and the PNG plots")] = Path(
        "bench-report"
    ),
    history: Annotated[
        Path | None,
        typer.Option(
            help="A JSON file of earlier runs: the given results are added to it (once each) "
            "and the report ends with a table of every run it holds"
        ),
    ] = None,
) -> None:
    """Write a markdown table and PNG plots (throughput, EOS overhead, latency, engines)."""
    from fluvial.bench.report import write_report

    path = write_report(files, out, history)
    console.print(f"wrote {path} and its plots", highlight=False)


@bench_app.command("startup")
def startup(
    runs: Annotated[int, typer.Option(help="Launches; the summary gives the median and range")] = 5,
    engine: Annotated[str, typer.Option(help="spark or local")] = "spark",
    master: Master = "local[2]",
    records: Annotated[int, typer.Option(help="Input records written before each launch")] = 200,
    guarantee: Guarantee = "exactly_once_v2",
    spark_conf: Annotated[
        list[str] | None,
        typer.Option("--spark-conf", metavar="KEY=VALUE", help="Passed on to fluvial run"),
    ] = None,
    json_out: JsonOut = None,
    bootstrap_servers: Bootstrap = None,
    baseline_src: Annotated[
        Path | None,
        typer.Option(
            help="Also launch the fluvial of this checkout's src folder, alternating with this "
            "one on the same broker: a change against its baseline in one run"
        ),
    ] = None,
) -> None:
    """Seconds from `fluvial run` to its first committed output record, with where they go
    (application loaded, Spark session, first lease, Python worker, slot start, first commit)."""
    from rich.table import Table

    from fluvial.bench.startup import SPARK_PHASES, run_startup_bench

    if engine not in ("spark", "local"):
        raise typer.BadParameter(f"--engine {engine!r}: use spark or local")
    if runs < 1:
        raise typer.BadParameter("--runs must be at least 1")
    if baseline_src is not None and not (baseline_src / "fluvial" / "__init__.py").exists():
        raise typer.BadParameter(
            f"--baseline-src {baseline_src} has no fluvial package: give a checkout's src folder"
        )
    extra = [arg for item in spark_conf or [] for arg in ("--spark-conf", item)]
    data = run_startup_bench(
        runs=runs, engine=engine, master=master, records=records, guarantee=guarantee,
        bootstrap=bootstrap_servers, extra_args=extra,
        say=lambda line: console.print(line, highlight=False),
        baseline=baseline_src.resolve() if baseline_src else None,
    )  # fmt: skip
    for name, system in data["systems"].items():
        summary = system["summary"]
        first = summary["first_output_s"]
        table = Table("phase (ends when)", "median s", "min s", "max s", "median CPU s",
                      title=f"{name}: {summary['runs']} run(s)")  # fmt: skip
        cpu = summary.get("cpu_s", {})
        for key, what in SPARK_PHASES:
            if key in summary["phases"]:
                span = summary["phases"][key]
                used = f"{cpu[key]['median']:.2f}" if key in cpu else ""
                table.add_row(what, f"{span['median']:.2f}", f"{span['min']:.2f}",
                              f"{span['max']:.2f}", used)  # fmt: skip
        total = f"[bold]{cpu['total']['median']:.2f}[/]" if "total" in cpu else ""
        table.add_row("[bold]first committed output, from launch[/]",
                      f"[bold]{first['median']:.2f}[/]", f"{first['min']:.2f}",
                      f"{first['max']:.2f}", total)  # fmt: skip
        out.print(table)
    if json_out is not None:
        data = {"environment": describe(), "command": " ".join(["fluvial", "bench", *sys.argv[2:]]),
                **data}  # fmt: skip
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(data, indent=1) + "\n")


@bench_app.command("postgres-sink")
def postgres_sink(
    records: Records = 200_000,
    partitions: Partitions = 2,
    batch: Annotated[int, typer.Option(help="Records per transaction, for every writer")] = 10_000,
    writers: Annotated[
        str, typer.Option(help="Comma-separated: insert-loop, copy, fluvial, fluvial-upsert")
    ] = "insert-loop,copy,fluvial,fluvial-upsert",
    dsn: Annotated[
        str | None,
        typer.Option(envvar="FLUVIAL_BENCH_DSN", help="PostgreSQL to use (default: a private one)"),
    ] = None,
    json_out: JsonOut = None,
    bootstrap_servers: Bootstrap = None,
    client_config: ClientConfig = None,
) -> None:
    """The PostgreSQL sink (rows and offsets in one transaction) against a plain INSERT loop
    and against COPY without offsets, on the same topic and database in the same run."""
    from rich.table import Table

    from fluvial.bench.postgres_sink import run_postgres_sink_bench

    bootstrap, settings, _settings_file = _security(bootstrap_servers, client_config)
    data = run_postgres_sink_bench(
        records=records, partitions=partitions, batch=batch, writers=_csv(writers),
        bootstrap=bootstrap, dsn=dsn, client_config=settings,
        say=lambda line: console.print(line, highlight=False),
    )  # fmt: skip
    data = {"environment": describe(), "command": " ".join(["fluvial", "bench", *sys.argv[2:]]),
            **data}  # fmt: skip
    table = Table("writer", "records/s", "seconds", "vs COPY", "vs INSERT loop")
    for run in data["runs"]:
        table.add_row(
            run["writer"], f"{run['rows_per_s']:,.0f}", f"{run['seconds']:.2f}",
            f"{run.get('vs_copy', 0):.2f}x", f"{run.get('vs_insert_loop', 0):.2f}x",
        )  # fmt: skip
    out.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(data, indent=1) + "\n")


__all__ = ["bench_app", "ALL_SYSTEMS"]
