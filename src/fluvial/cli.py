"""The ``fluvial`` command line."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from fluvial import children
from fluvial.cli_support import lazy_console, new_app
from fluvial.client_options import ClientConfigOption, client_settings_or_exit
from fluvial.errors import FluvialError
from fluvial.kafka.local import DEFAULT_HEAP, DEFAULT_PORT, KAFKA_VERSION, LocalKafka

app = new_app(
    help="fluvial: Kafka Streams for Python, exactly-once on Apache Kafka and Apache Spark. "
    "Errors are one message; add --debug anywhere on the command line for their tracebacks.",
    no_args_is_help=True,
)
kafka_app = new_app(help="Run a local Apache Kafka (KRaft) for development and tests.")
app.add_typer(kafka_app, name="kafka")
from fluvial.bench.cli import bench_app  # noqa: E402 - beside the other sub-apps

app.add_typer(bench_app, name="bench")
from fluvial.sinks.cli import sink_app  # noqa: E402 - beside the other sub-apps

app.add_typer(sink_app, name="sink")
from fluvial.kafka.tools_cli import tail, topics_app  # noqa: E402 - beside the other sub-apps

app.add_typer(topics_app, name="topics")
app.command("tail")(tail)

console = lazy_console(stderr=True)
out = lazy_console()

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Directory holding the cluster's data and logs (default: ~/.fluvial/kafka-PORT).",
    ),
]
PortOption = Annotated[
    int, typer.Option("--port", help="Port of the first broker; broker N listens on PORT+N-1.")
]


def _env_client_config_file() -> Path | None:
    import os

    from fluvial.kafka.security import CLIENT_CONFIG_ENV

    value = os.environ.get(CLIENT_CONFIG_ENV)
    return Path(value) if value else None


def _check_secured(bootstrap: str | None, settings: dict[str, str]) -> None:
    """Connect once first: a wrong protocol, password or CA fails here, clearly."""
    from fluvial.kafka.security import check_connection

    if bootstrap:
        check_connection(bootstrap, settings)


# --debug anywhere on the command line: errors come with their tracebacks (main() sets it).
_debug = False


def _fail(error: Exception) -> NoReturn:
    if _debug:
        import traceback

        console.print(
            "".join(traceback.format_exception(error)), highlight=False, markup=False,
            soft_wrap=True,
        )  # fmt: skip
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
    secure: Annotated[
        bool,
        typer.Option(
            help="A SASL_SSL listener (SCRAM-SHA-512), TLS from a CA made in the data dir, and "
            "ACLs enforced (StandardAuthorizer) with the admin as super-user."
        ),
    ] = False,
    credentials_file: Annotated[
        Path | None,
        typer.Option(
            help="With --secure: NAME=PASSWORD lines, the admin's among them; the other users "
            "are created too (default: the admin's password from $FLUVIAL_KAFKA_ADMIN_PASSWORD)."
        ),
    ] = None,
    admin_user: Annotated[str, typer.Option(help="With --secure: the super-user's name.")] = (
        "admin"
    ),
) -> None:
    """Start a local cluster (idempotent); prints its bootstrap.servers when it is ready."""
    from fluvial.kafka.security import read_credentials

    try:
        credentials = None
        existing = LocalKafka(data_dir, port=port)
        if secure and not existing.is_running():
            if credentials_file is not None or not existing.admin_config_file.exists():
                credentials = read_credentials(credentials_file, admin=admin_user)
        elif credentials_file is not None and not secure:
            raise FluvialError("--credentials-file is for a --secure cluster")
        cluster = LocalKafka(
            data_dir, port=port, brokers=brokers, heap=heap, secure=secure, credentials=credentials
        )
        if secure and not cluster.secure:
            raise FluvialError(
                f"the cluster in {cluster.data_dir} was made without --secure: use another "
                "--data-dir (or --port) for a secured one"
            )
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
        if cluster.secure:
            settings = cluster.client_config()
            console.print(
                "client settings (librdkafka):\n"
                f"  bootstrap.servers={cluster.bootstrap_servers}\n"
                f"  security.protocol={settings['security.protocol']}\n"
                f"  sasl.mechanism={settings['sasl.mechanism']}\n"
                f"  ssl.ca.location={settings['ssl.ca.location']}\n"
                f"  sasl.username={settings['sasl.username']}  (and its sasl.password)\n"
                f"The admin's settings, password included, are in {cluster.admin_config_file} "
                "(mode 0600): pass --client-config FILE or set FLUVIAL_KAFKA_CLIENT_CONFIG.",
                highlight=False,
                soft_wrap=True,
            )
    except FluvialError as error:
        _fail(error)


@kafka_app.command("add-user")
def kafka_add_user(
    name: Annotated[str, typer.Argument(help="The SCRAM user's name (its principal: User:NAME).")],
    data_dir: DataDirOption = None,
    port: PortOption = DEFAULT_PORT,
    password_file: Annotated[
        Path | None,
        typer.Option(
            help="A file whose first line is the password (default: $FLUVIAL_KAFKA_USER_PASSWORD)."
            " Never on the command line."
        ),
    ] = None,
) -> None:
    """Add a SCRAM user to a running --secure cluster (or set an existing user's password)."""
    from fluvial.kafka.security import read_user_password

    try:
        password = read_user_password(name, password_file)
        cluster = _cluster(data_dir, port)
        if not cluster.secure:
            raise FluvialError(
                f"the cluster in {cluster.data_dir} is not --secure: it has no users to add"
            )
        if not cluster.is_running():
            raise FluvialError(
                f"the cluster in {cluster.data_dir} is not running: start it with "
                "'fluvial kafka start --secure' first"
            )
        cluster.add_users({name: password})
    except FluvialError as error:
        _fail(error)
    console.print(
        f"user {name!r} is ready (principal User:{name}); it holds no ACLs yet: grant them "
        "with 'fluvial acls APP.py --principal User:" + name + " --apply'",
        highlight=False,
        soft_wrap=True,
    )


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
    from fluvial.kafka.local import find_cluster_on_port

    cluster = _cluster(data_dir, port)
    if not (cluster.data_dir / "cluster.json").exists():
        # Nothing was started in that directory: look for the cluster by its port instead.
        found = find_cluster_on_port(port) if data_dir is None else None
        if found is None:
            where = f"in {cluster.data_dir}" if data_dir is not None else f"on port {port}"
            console.print(
                f"not serving: no local cluster {where} (fluvial kafka start"
                f"{'' if data_dir is None else ' --data-dir ' + str(data_dir)} --port {port} "
                "starts one)",
                highlight=False, soft_wrap=True,
            )  # fmt: skip
            if as_json:
                out.print_json(json.dumps({"serving": False, "data_dir": None, "port": port}))
            raise typer.Exit(code=1)
        cluster = _cluster(found, port)
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
        children.run(["tail", "-n", str(lines), "-F", str(path)], check=False)
    else:
        sys.stdout.write("".join(path.read_text(errors="replace").splitlines(True)[-lines:]))


# -- applications ---------------------------------------------------------------------------------


def _load(app_file: Path):  # noqa: ANN202 - returns LoadedApp
    from fluvial.loader import load_app

    try:
        return load_app(app_file)
    except FluvialError as error:
        _fail(error)


AllowStateLossOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-state-loss",
        metavar="NAME",
        help="The last deployment's store or repartition topic NAME may be left behind (its "
        "state lost), or, if its topic is missing, recreated empty; repeatable or "
        "comma-separated. Without it such a start is refused",
    ),
]


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
        _print_generated_names(loaded.topology)
        from fluvial.sinks.egress import declared_egress

        try:
            egress = declared_egress(app_file)
        except FluvialError as error:
            _fail(error)
        for sink in egress:
            out.print(f"Egress: {sink.describe()}", highlight=False, markup=False)
    elif fmt in ("dot", "mermaid"):
        render = getattr(description, f"to_{fmt}", None)
        if render is None:
            _fail(FluvialError(f"--format {fmt} is not available yet; use --format text"))
        out.print(render(), highlight=False, markup=False, soft_wrap=True)
    else:
        _fail(FluvialError(f"unknown --format {fmt!r}: use text, dot or mermaid"))


def _print_generated_names(topology) -> None:  # noqa: ANN001 - a Topology
    """Mark every store and repartition topic whose name was generated from its position."""
    from fluvial.topology.layout import layout_of, naming_hint

    generated = [r for r in layout_of(topology) if r.generated]
    if not generated:
        return
    out.print(
        f"Generated names ({len(generated)}): these hold state under names numbered by "
        "operator position; adding or removing an operator before them renames them, and the "
        "next version would start them empty (fluvial run refuses, and fluvial upgrade can "
        "carry them over). Name them to keep them stable:",
        highlight=False, markup=False, soft_wrap=True,
    )  # fmt: skip
    for resource in generated:
        out.print(f"  * {resource.describe()}: {naming_hint(resource)}",
                  highlight=False, markup=False, soft_wrap=True)  # fmt: skip


def _print_settings(value: bool) -> None:
    """``--help-config``: the table of StreamsConfig's settings, then exit (APP.py not needed)."""
    if value:
        import shutil

        from fluvial.config import settings_text

        typer.echo(settings_text(min(shutil.get_terminal_size().columns, 100)))
        raise typer.Exit()


@app.command("run")
def run(
    app_file: Annotated[Path, typer.Argument(help="The application: APP.py")],
    help_config: Annotated[
        bool,
        typer.Option(
            "--help-config",
            is_eager=True,
            callback=_print_settings,
            help="Print every StreamsConfig setting (APP.py's config) with its default and "
            "meaning, and exit",
        ),
    ] = False,
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
    serve: Annotated[
        str | None,
        typer.Option(
            help="Serve interactive queries, health and metrics over HTTP on HOST:PORT "
            "(host 127.0.0.1 unless given); a bearer token is required when "
            "FLUVIAL_SERVE_TOKEN is set",
        ),
    ] = None,
    reader_process: Annotated[
        bool | None,
        typer.Option(
            "--reader-process/--no-reader-process",
            help="Answer --serve's committed queries from a separate reader process that reads "
            "the stores' files, off the processing process's CPU (local engine; default: on "
            "under exactly_once_v2)",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option(help="No live status line")] = False,
    stop_timeout_s: Annotated[
        float,
        typer.Option(
            help="On SIGTERM or Ctrl-C, exit without the final commit if stopping takes longer "
            "(Kafka unreachable); the next start resumes from the last commit"
        ),
    ] = 15.0,
    client_config: ClientConfigOption = None,
    pack: Annotated[
        bool | None,
        typer.Option(
            "--pack/--no-pack",
            help="Ship fluvial and its dependencies to the Spark executors as a packed "
            "environment (fluvial pack; spark.archives) (default: on for cluster masters, "
            "off for local). --no-pack when the workers have fluvial installed",
        ),
    ] = None,
    spark_conf: Annotated[
        list[str] | None,
        typer.Option(
            "--spark-conf",
            metavar="KEY=VALUE",
            help="A Spark setting for --engine spark, as spark-submit --conf; repeatable "
            "(e.g. --spark-conf spark.executor.memory=2g --spark-conf spark.ui.port=4040). "
            "FLUVIAL_SPARK_CONF=k=v,k2=v2 is read too; these win",
        ),
    ] = None,
    allow_state_loss: AllowStateLossOption = None,
) -> None:
    """Run an application until Ctrl-C or SIGTERM, which commit and stop."""
    from fluvial.compiled import announce
    from fluvial.config import StreamsConfig
    from fluvial.runtime.deployments import DeploymentPolicy
    from fluvial.runtime.runner import run_application

    announce()  # one line when the engine runs interpreted
    deployment = DeploymentPolicy(allow_state_loss=_names(allow_state_loss))
    extra_spark_conf = None
    try:
        if spark_conf and engine != "spark":
            raise FluvialError("--spark-conf is for --engine spark")
        if engine == "spark":
            from fluvial.spark.engine import parse_spark_conf

            extra_spark_conf = parse_spark_conf(spark_conf or [])
    except FluvialError as error:
        _fail(error)
    loaded = _load(app_file)
    overrides: dict[str, object] = {
        "processing_guarantee": guarantee,
        "commit_interval_ms": commit_interval_ms,
        "bootstrap_servers": bootstrap_servers,
        "application_id": application_id,
        "state_dir": str(state_dir) if state_dir else None,
    }
    settings_bootstrap, settings = client_settings_or_exit(client_config)
    if settings:
        overrides["client_config"] = {
            **(loaded.config or StreamsConfig()).client_config,
            **settings,
        }
    if bootstrap_servers is None:
        overrides["bootstrap_servers"] = settings_bootstrap
    egress = None
    try:
        base = loaded.config or StreamsConfig()
        config = base.with_overrides(**{k: v for k, v in overrides.items() if v is not None})
        if engine == "spark" and reader_process:
            raise FluvialError(
                "--reader-process is for the local engine: on Spark, each executor's Python "
                "worker answers for its own slots"
            )
        egress = _start_egress(app_file, config)
        if engine == "spark":
            from fluvial.spark.runner import run_spark_application

            code = run_spark_application(
                app_file, config, master=master, workers=workers, console=console,
                prometheus_port=prometheus_port, live=not quiet, serve=serve,
                stop_timeout_s=stop_timeout_s, pack=pack, spark_conf=extra_spark_conf,
                deployment=deployment,
            )  # fmt: skip
        elif engine == "local":
            code = run_application(
                loaded.topology, config, workers=workers, console=console,
                prometheus_port=prometheus_port, live=not quiet, serve=serve,
                stop_timeout_s=stop_timeout_s, app_file=app_file, reader=reader_process,
                deployment=deployment,
            )  # fmt: skip
        else:
            raise FluvialError(f"unknown engine {engine!r}: use --engine spark or --engine local")
    except FluvialError as error:
        if egress is not None:
            egress.stop()
        _fail(error)
    if egress is not None:
        egress.stop()
        if egress.errors and code == 0:
            code = 1
    raise typer.Exit(code=code)


def _names(values: list[str] | None) -> frozenset[str]:
    """Repeated or comma-separated names."""
    return frozenset(n.strip() for v in values or [] for n in v.split(",") if n.strip())


@app.command("upgrade")
def upgrade(
    app_file: Annotated[Path, typer.Argument(help="The application's new version: APP.py")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be carried over; record nothing")
    ] = False,
    allow_state_loss: AllowStateLossOption = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers")] = None,
    client_config: ClientConfigOption = None,
) -> None:
    """Carry a running application's state over to a new version of its topology.

    Where a change only moved generated names (an operator added before a count shifts the
    count's store and repartition topic numbers), each moved store and repartition topic of
    this version is mapped onto the last deployment's topic, so the new version continues from
    the old state; nothing is copied. Ambiguous matches (two alike operators) are refused.
    Stop the application first, then upgrade, then run it as usual.
    """
    from fluvial.config import StreamsConfig
    from fluvial.runtime.deployments import DeploymentPolicy, commit_deployment, plan_deployment
    from fluvial.runtime.reset import refuse_if_running

    loaded = _load(app_file)
    try:
        settings_bootstrap, settings = client_settings_or_exit(client_config)
        overrides: dict[str, object] = {}
        if bootstrap_servers or settings_bootstrap:
            overrides["bootstrap_servers"] = bootstrap_servers or settings_bootstrap
        if settings:
            overrides["client_config"] = {**(loaded.config or StreamsConfig()).client_config,
                                          **settings}  # fmt: skip
        config = (loaded.config or StreamsConfig()).with_overrides(**overrides)
        from fluvial.kafka.security import check_connection

        check_connection(config.bootstrap_servers, config.client_config)
        from confluent_kafka.admin import AdminClient

        from fluvial.runtime.clients import admin_settings

        admin = AdminClient(admin_settings(config))
        if not dry_run:
            refuse_if_running(admin, config.application_id, doing="upgrading")
        policy = DeploymentPolicy(allow_state_loss=_names(allow_state_loss), upgrade=True)
        plan = plan_deployment(loaded.topology, config, policy, admin)
        verb = "would carry" if dry_run else "carries"
        app_id = config.application_id
        if not plan.carried and not plan.lost:
            console.print(f"upgrade {app_id}: nothing to carry over; this version keeps every "
                          "store and repartition topic of the last deployment", soft_wrap=True)  # fmt: skip
        for move in plan.carried:
            console.print(
                f"upgrade {app_id}: {verb} {move.old.describe()} -> {move.new.name} "
                f"(keeps topic {app_id}-{move.old.topic})",
                highlight=False, soft_wrap=True,
            )  # fmt: skip
        for resource in plan.lost:
            console.print(f"upgrade {app_id}: leaves behind {resource.describe()}, as allowed",
                          highlight=False, soft_wrap=True)  # fmt: skip
        if dry_run:
            console.print(f"upgrade {app_id}: dry run, nothing recorded", soft_wrap=True)
            return
        commit_deployment(plan, config, topics_created=False)
        console.print(f"upgrade {app_id}: recorded; start the new version with "
                      f"'fluvial run {app_file}'", highlight=False, soft_wrap=True)  # fmt: skip
    except FluvialError as error:
        _fail(error)


def _start_egress(app_file: Path, config):  # noqa: ANN001, ANN202 - returns Egress | None
    """The sinks an APP.py declares in ``egress``, started beside the application."""
    from fluvial.sinks.egress import Egress, declared_egress

    sinks = declared_egress(app_file)
    if not sinks:
        return None
    from fluvial.acls import check_sink_access

    egress = Egress(
        sinks, bootstrap_servers=config.bootstrap_servers, client_config=config.client_config,
        say=lambda line: console.print(line, highlight=False, soft_wrap=True),
    )  # fmt: skip
    # A missing ACL stops the run here, with the rules to add, before any sink reads.
    check_sink_access(egress.sinks)
    egress.start()
    return egress


@app.command("reset")
def reset(
    application: Annotated[
        str,
        typer.Argument(
            help="The application: its APP.py (exact internal topics from its topology), or "
            "its application id"
        ),
    ],
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(help="Kafka bootstrap servers (default: APP.py's, else 127.0.0.1:9092)"),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(help="The application's state_dir (default: APP.py's, else /tmp/fluvial)"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be deleted, and delete nothing")
    ] = False,
    client_config: ClientConfigOption = None,
) -> None:
    """Reset an application so that it reprocesses its input from scratch.

    Deletes its committed offsets (inputs are read again from the earliest), its internal
    topics (repartition, changelog) and its local state. Stop the application first. Given an
    id, a topic another application could own (shop-eu-totals-changelog, resetting shop) stops
    the reset before anything is deleted: give the APP.py instead.
    """
    from fluvial.config import StreamsConfig, to_millis
    from fluvial.runtime.reset import apply_reset, plan_reset

    internal: list[str] | None = None
    application_id = application
    app_config = None
    if application.endswith(".py") or Path(application).is_file():
        loaded = _load(Path(application))
        app_config = loaded.config or StreamsConfig()
        application_id = app_config.application_id
        additional = to_millis(app_config.windowstore_changelog_additional_retention_ms)
        internal = [t.name for t in loaded.topology.internal_topics(
            application_id, additional_retention_ms=additional)]  # fmt: skip
    try:
        settings_bootstrap, settings = client_settings_or_exit(client_config)
        if settings_bootstrap and bootstrap_servers is None:
            bootstrap_servers = settings_bootstrap
        if app_config is not None:
            bootstrap_servers = bootstrap_servers or app_config.bootstrap_servers
            settings = settings or {k: str(v) for k, v in app_config.client_config.items()}
            state_dir = state_dir or Path(app_config.state_dir)
        bootstrap_servers = bootstrap_servers or "127.0.0.1:9092"
        state_dir = state_dir or Path("/tmp/fluvial")
        from fluvial.kafka.security import check_connection

        check_connection(bootstrap_servers, settings)
        plan = plan_reset(application_id, bootstrap_servers, state_dir, settings,
                          internal_topics=internal)  # fmt: skip
        if dry_run:
            console.print(
                f"reset {application_id} (dry run, nothing deleted) would delete:", soft_wrap=True
            )
            for group in plan.groups:
                console.print(f"  consumer group {group}", soft_wrap=True)
            for topic in plan.topics:
                console.print(f"  topic {topic}", soft_wrap=True)
            console.print(
                f"  local state {plan.state}" if plan.state else "  no local state", soft_wrap=True
            )
            return
        report = apply_reset(plan, bootstrap_servers, settings)
    except FluvialError as error:
        _fail(error)
    console.print(
        f"reset {application_id}: committed offsets "
        f"{'deleted' if report.group_deleted else 'none found'}; "
        f"{len(report.deleted_topics)} internal topic(s) deleted; local state "
        f"{'wiped at ' + str(report.state_wiped) if report.state_wiped else 'none found'}"
    )
    for topic in report.deleted_topics:
        console.print(f"  deleted {topic}", soft_wrap=True)


@app.command("status")
def status(
    app_file: Annotated[Path, typer.Argument(help="The application: APP.py")],
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers")] = None,
    application_id: Annotated[str | None, typer.Option(help="Override the application id")] = None,
    client_config: ClientConfigOption = None,
) -> None:
    """Show a running (or stopped) application's lag per topic, source and repartition topics
    alike, and whether it has caught up: from its committed offsets in Kafka, so from any
    terminal. Exits 0 when caught up, 3 when behind."""
    from fluvial.config import StreamsConfig
    from fluvial.runtime.app_lag import BEHIND_EXIT_CODE, read_application_lag, status_report

    loaded = _load(app_file)
    settings_bootstrap, settings = client_settings_or_exit(client_config)
    base = loaded.config or StreamsConfig()
    overrides = {"bootstrap_servers": bootstrap_servers or settings_bootstrap,
                 "application_id": application_id,
                 "client_config": {**base.client_config, **settings} if settings else None}  # fmt: skip
    try:
        config = base.with_overrides(**{k: v for k, v in overrides.items() if v is not None})
        from fluvial.kafka.security import check_connection

        check_connection(config.bootstrap_servers,
                         {k: str(v) for k, v in config.client_config.items()})  # fmt: skip
        lag = read_application_lag(loaded.topology, config)
    except FluvialError as error:
        _fail(error)
    for line in status_report(lag):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(code=0 if lag.caught_up else BEHIND_EXIT_CODE)


@app.command("acls")
def acls(
    app_file: Annotated[Path, typer.Argument(help="The application: APP.py")],
    principal: Annotated[
        str, typer.Option(help="Who runs the application, e.g. User:pageviews-app")
    ],
    apply: Annotated[
        bool, typer.Option("--apply", help="Create the ACLs (with admin client settings)")
    ] = False,
    application_id: Annotated[str | None, typer.Option(help="Override the application id")] = None,
    guarantee: Annotated[
        str | None, typer.Option(help="exactly_once_v2 or at_least_once (as fluvial run)")
    ] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka bootstrap servers")] = None,
    client_config: ClientConfigOption = None,
    kafka_acls: Annotated[
        bool, typer.Option("--kafka-acls-commands", help="Print kafka-acls.sh commands instead")
    ] = False,
) -> None:
    """Print the ACLs an application needs, derived from its topology; --apply creates them.

    Read on its inputs, write on its outputs and dead-letter topic, create/read/write on its
    internal topics (prefix APPLICATION_ID-), read on its consumer group, and under
    exactly-once write on its transactional ids (prefix APPLICATION_ID-) and read on the
    driver's group (APPLICATION_ID-driver). Its egress sinks (egress = [...] in APP.py) add
    read on their topics, describe on their groups (fluvial-sink-SINK_ID) and write on their
    dead-letter topics.
    """
    from fluvial.acls import apply_acls, derive_acls, parse_principal
    from fluvial.config import StreamsConfig
    from fluvial.sinks.egress import declared_egress

    loaded = _load(app_file)
    try:
        parse_principal(principal)
        overrides = {"application_id": application_id, "processing_guarantee": guarantee}
        base = loaded.config or StreamsConfig()
        config = base.with_overrides(**{k: v for k, v in overrides.items() if v is not None})
        rules = derive_acls(loaded.topology, config, declared_egress(app_file))
        for rule in rules:
            line = rule.kafka_acls_command(principal) if kafka_acls else rule.line(principal)
            out.print(line, highlight=False, markup=False, soft_wrap=True)
        if apply:
            settings_bootstrap, settings = client_settings_or_exit(client_config)
            bootstrap = bootstrap_servers or settings_bootstrap or config.bootstrap_servers
            from fluvial.kafka.security import check_connection

            check_connection(bootstrap, settings)
            count = apply_acls(rules, principal, bootstrap, settings)
            console.print(f"created {count} ACL(s) for {principal} on {bootstrap}")
    except FluvialError as error:
        _fail(error)


@app.command("pack")
def pack(
    force: Annotated[bool, typer.Option("--force", help="Build anew even if an archive exists")] = (
        False
    ),
    output_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where archives are kept (default: $FLUVIAL_PACK_DIR or ~/.cache/fluvial/pack)"
        ),
    ] = None,
) -> None:
    """Pack fluvial and its dependencies for Spark executors that lack them.

    Builds a virtual environment archive (venv-pack) once and reuses it until this environment
    changes; prints its path. `fluvial run --master spark://...` ships it by itself. For
    spark-submit: --archives PATH#fluvial-env with PYSPARK_PYTHON=./fluvial-env/bin/python
    (see docs/production.md).
    """
    from fluvial.spark.pack import ENV_NAME, ensure_packed

    try:
        packed = ensure_packed(
            force=force, directory=output_dir, say=lambda line: console.print(line, highlight=False)
        )
    except FluvialError as error:
        _fail(error)
    console.print(
        f"{'built' if packed.built else 'reused'} {packed.archive.name}: fluvial and "
        f"{len(packed.distributions)} distributions; ship it with "
        f"spark.archives={packed.archive}#{ENV_NAME} and "
        f"PYSPARK_PYTHON={packed.executor_python}",
        highlight=False,
        soft_wrap=True,
    )
    out.print(str(packed.archive), highlight=False, markup=False, soft_wrap=True)


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
            "kill-broker (the default); spark: kill-spark-worker,kill-app,zombie (the default),"
            "kill-broker"
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
    client_config: ClientConfigOption = None,
    differential: Annotated[
        int | None,
        typer.Option(
            "--differential",
            help="Instead of the fault matrix: run N generated topologies on fluvial and on "
            "Kafka Streams (both test drivers, no broker) and compare every record",
        ),
    ] = None,
    partitions: Annotated[
        int | None,
        typer.Option(
            help="With --differential: run the cases on real Kafka with input topics of this "
            "many partitions, Kafka Streams and fluvial (--engine) side by side, on "
            "--bootstrap-servers or a private local broker",
        ),
    ] = None,
) -> None:
    """Run the exactly-once fault matrix and check the output record by record.

    Each fault kind runs as its own scenario (fresh application id and topics on one
    three-broker cluster), so each row of the table counts only its own faults and records.
    The input flows until every fault has been injected and recovered from, so the records
    checked grow with the time the faults take.

    With ``--differential N`` it runs N generated differential cases instead (see
    docs/semantics.md).
    """
    from rich.table import Table

    if partitions is not None and differential is None:
        _fail(FluvialError("--partitions goes with --differential N: add --differential 100"))
    if differential is not None:
        _verify_differential(differential, seed, json_file, partitions, engine, bootstrap_servers)

    from fluvial.verify.matrix import TABLE_HEADER, report_json, run_matrix

    kinds = tuple(f.strip() for f in (faults or "").split(",") if f.strip()) or None
    settings_bootstrap, settings = client_settings_or_exit(client_config)
    if bootstrap_servers is None:
        bootstrap_servers = settings_bootstrap
    settings_file = client_config or _env_client_config_file()
    try:
        _check_secured(bootstrap_servers, settings)
    except FluvialError as error:
        _fail(error)
    # SIGTERM unwinds like Ctrl-C, so the run's apps and brokers are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        report = run_matrix(
            seed=seed, guarantee=guarantee, engine=engine, records=records, faults=kinds,
            fault_count=fault_count, duration_s=duration_s, timeout_s=timeout_s,
            commit_interval_ms=commit_interval_ms, spark_lease_ms=spark_lease_ms,
            bootstrap_servers=bootstrap_servers, client_config=settings,
            client_config_file=settings_file,
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


def _verify_differential(
    count: int,
    seed: int,
    json_file: Path | None,
    partitions: int | None = None,
    engine: str = "local",
    bootstrap_servers: str | None = None,
) -> None:
    from rich.table import Table

    from fluvial.verify.differential.session import TABLE_HEADER, describe, run_differential

    if count < 1:
        _fail(FluvialError(f"--differential needs a number of cases of at least 1, got {count}"))
    if partitions is not None and partitions < 1:
        _fail(FluvialError(f"--partitions needs at least 1 partition, got {partitions}"))
    if engine not in ("local", "spark"):
        _fail(FluvialError(f"unknown engine {engine!r}: use --engine local or --engine spark"))
    progress = lambda msg: console.print(f"verify: {msg}", highlight=False)  # noqa: E731
    try:
        if partitions is None:
            report = run_differential(count, seed, progress=progress)
        else:
            report = _partitioned_differential(
                count, seed, partitions, engine, bootstrap_servers, progress
            )
    except FluvialError as error:
        _fail(error)
    for failure in report.failures:
        console.print(f"  difference ({failure.case['id']}): {failure.comparison.differences[0]}")
        if failure.minimal is not None:
            console.print(describe(failure.minimal), highlight=False)
    if json_file is not None:
        json_file.write_text(json.dumps(report.to_json(), indent=2))
    table = Table(*TABLE_HEADER)
    for row in report.table_rows():
        table.add_row(*row)
    out.print(table)
    out.print(
        f"seed {seed}, {report.cases} cases, {report.records} records compared, "
        f"{len(report.failures)} differ, {report.wall_s:.0f} s wall -> {report.verdict}",
        highlight=False,
    )
    raise typer.Exit(code=0 if report.verdict == "PASS" else 1)


def _partitioned_differential(
    count: int,
    seed: int,
    partitions: int,
    engine: str,
    bootstrap_servers: str | None,
    progress: Callable[[str], None],
) -> Any:
    """``--differential N --partitions P``: on the given cluster, or a private local broker."""
    import contextlib
    import tempfile

    from fluvial.kafka import LocalKafka, free_port
    from fluvial.verify.differential.session import run_partitioned_differential

    with contextlib.ExitStack() as stack:
        if bootstrap_servers is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="fluvial-dp-"))
            progress("starting a private local Kafka broker")
            cluster = stack.enter_context(LocalKafka(data_dir, port=free_port()))
            bootstrap_servers = cluster.bootstrap_servers
        spark = None
        if engine == "spark":
            from fluvial.spark import local_spark_session

            spark = local_spark_session("local[2]", app_name="fluvial-differential")
            stack.callback(spark.stop)
        return run_partitioned_differential(
            count, seed, bootstrap_servers, partitions=partitions, engine=engine, spark=spark,
            progress=progress,
        )  # fmt: skip


def main() -> None:
    global _debug
    if "--debug" in sys.argv[1:]:
        _debug = True
        sys.argv = [arg for arg in sys.argv if arg != "--debug"]
    app()


if __name__ == "__main__":
    main()
