"""``fluvial sink postgres``: a sink as a process of its own, with a live progress line."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import FrameType
from typing import Annotated, Any

import typer

from fluvial.cli_support import lazy_console, new_app
from fluvial.client_options import ClientConfigOption, client_settings_or_exit
from fluvial.errors import FluvialError

sink_app = new_app(
    help="Exactly-once egress: write topics into a database, rows and offsets in one transaction.",
    no_args_is_help=True,
)
console = lazy_console(stderr=True, soft_wrap=True)

#: Exit code of a sink that a newer instance fenced: a supervisor should not restart it.
EXIT_FENCED = 3
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
STATUS_INTERVAL_S = 0.5
PLAIN_STATUS_INTERVAL_S = 5.0


def safe_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparsable DSN: say nothing of it
        return "(the given dsn)"
    host, port, db = parts.get("host", ""), parts.get("port", ""), parts.get("dbname", "")
    user = str(parts.get("user", ""))
    return f"{user + '@' if user else ''}{host}{':' + str(port) if port else ''}/{db}"


@sink_app.command("postgres")
def postgres(
    topic: Annotated[list[str], typer.Option("--topic", help="Topic to read (repeatable)")],
    table: Annotated[str, typer.Option(help="Target table, 'name' or 'schema.name'")],
    dsn: Annotated[
        str,
        typer.Option(
            envvar="FLUVIAL_SINK_DSN",
            help="PostgreSQL connection string (or FLUVIAL_SINK_DSN). Keep passwords out of "
            "it: use PGPASSWORD or ~/.pgpass",
        ),
    ],
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            help="Kafka bootstrap servers (default: bootstrap.servers of the client settings, "
            "else 127.0.0.1:9092)"
        ),
    ] = None,
    mode: Annotated[str, typer.Option(help="append (one row per record) or upsert (per key)")] = (
        "append"
    ),
    key_serde: Annotated[
        str, typer.Option(help="string, bytes, long, int, double, float, json")
    ] = ("string"),
    value_serde: Annotated[
        str, typer.Option(help="string, bytes, long, int, double, float, json")
    ] = ("string"),
    value_schema: Annotated[
        str | None, typer.Option(help="JSON values as columns: 'category string, period long'")
    ] = None,
    window_size_ms: Annotated[
        int | None, typer.Option(help="Keys are time-windowed with this window size")
    ] = None,
    session_windows: Annotated[bool, typer.Option(help="Keys are session-windowed")] = False,
    sink_id: Annotated[
        str | None, typer.Option(help="The sink's name in the offsets table [default: table]")
    ] = None,
    dead_letter_topic: Annotated[
        str | None, typer.Option(help="Send bad records here instead of stopping")
    ] = None,
    commit_interval_ms: Annotated[int, typer.Option(help="Longest wait to fill a batch")] = 1000,
    max_batch_records: Annotated[int, typer.Option(help="Most records per transaction")] = 10_000,
    transaction_timeout_ms: Annotated[
        int, typer.Option(help="Longest a batch's transaction may take")
    ] = 60_000,
    start_from: Annotated[
        str, typer.Option(help="Where a new sink starts: earliest or latest")
    ] = "earliest",
    partitions: Annotated[
        str | None, typer.Option(help="Only these partitions, comma-separated")
    ] = None,
    create_table: Annotated[bool, typer.Option(help="Create the table if it is missing")] = True,
    stop_at_end: Annotated[
        bool, typer.Option(help="Exit once every partition is read to its end")
    ] = False,
    quiet: Annotated[bool, typer.Option(help="No progress line")] = False,
    client_config: ClientConfigOption = None,
) -> None:
    """Write TOPIC(s) into a PostgreSQL table exactly once, until Ctrl-C or SIGTERM.

    Each batch's rows and the consumed offsets commit in one transaction; offsets live in the
    table fluvial_sink_offsets, so a restarted sink resumes exactly where it stopped. A new
    instance with the same sink id fences the old one.

    On a secured Kafka, give the client settings as fluvial run does (--client-config or
    FLUVIAL_KAFKA_CLIENT_* variables); the credentials and the ACLs are checked first.
    """
    # A stop while the checks below run (a connection, the ACLs) waits for them to end, then
    # exits before the sink starts: nothing is claimed or written.
    stop_requested = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop_requested.set())

    from fluvial.acls import check_sink_access
    from fluvial.sinks import PostgresSink

    settings_bootstrap, settings = client_settings_or_exit(client_config)
    try:
        sink = PostgresSink(
            topic, table=table, dsn=dsn,
            bootstrap_servers=bootstrap_servers or settings_bootstrap or DEFAULT_BOOTSTRAP,
            client_config=settings,
            mode=mode,  # type: ignore[arg-type]
            key_serde=key_serde, value_serde=value_serde, value_schema=value_schema,
            window_size_ms=window_size_ms, session_windows=session_windows, sink_id=sink_id,
            on_bad_row="dead_letter" if dead_letter_topic else "fail",
            dead_letter_topic=dead_letter_topic, commit_interval_ms=commit_interval_ms,
            max_batch_records=max_batch_records, transaction_timeout_ms=transaction_timeout_ms,
            start_from=start_from,  # type: ignore[arg-type]
            create_table=create_table,
            partitions=[int(p) for p in partitions.split(",")] if partitions else None,
        )  # fmt: skip
        check_sink_access([sink])  # a wrong password or a missing ACL fails here, clearly
    except (FluvialError, ValueError) as error:
        _fail(error)
    if stop_requested.is_set():
        console.print("fluvial sink: stopped before it started; nothing was written")
        raise typer.Exit(code=0)
    code = run_sink(sink, stop_at_end=stop_at_end, live=not quiet, console=console,
                    stop_requested=stop_requested)  # fmt: skip
    raise typer.Exit(code=code)


def run_sink(
    sink,  # noqa: ANN001
    *,
    stop_at_end: bool = False,
    live: bool = True,
    console: Any,
    stop_requested: threading.Event | None = None,
) -> int:
    """Run a sink in the foreground with signal handling and progress; return an exit code.
    ``stop_requested``: set by a stop signal that came before this was called."""
    import psycopg

    from fluvial.sinks import SinkFencedError

    interrupted = {"count": 0}

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        interrupted["count"] += 1
        if interrupted["count"] > 1 and signum == signal.SIGINT:
            os._exit(130)  # the user insists; the next start resumes from the last commit
        sink.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if stop_requested is not None and stop_requested.is_set():
        sink.stop()  # it came between the caller's check and the handlers above
    console.print(
        f"fluvial sink: {sink.describe()} into {safe_dsn(sink.dsn or '')} from "
        f"{sink.bootstrap_servers}",
        highlight=False,
    )

    def ready(progress) -> None:  # noqa: ANN001
        resume = ", ".join(f"{tp} at {o}" for tp, o in sorted(progress.committed.items()))
        console.print(
            f"fluvial sink: epoch {progress.epoch}; resuming "
            f"{resume or 'from the start (nothing committed yet)'}; Ctrl-C commits and stops",
            highlight=False,
        )

    errors: list[BaseException] = []

    def work() -> None:
        try:
            sink.run(stop_at_end=stop_at_end, on_ready=ready)
        except BaseException as exc:  # reported by the foreground thread
            errors.append(exc)

    worker = threading.Thread(target=work, name="fluvial-sink", daemon=True)
    worker.start()
    if live and console.is_terminal:
        with console.status(sink.progress().line()) as status:
            while worker.is_alive():
                worker.join(STATUS_INTERVAL_S)
                status.update(sink.progress().line())
    else:
        last = time.monotonic()
        while worker.is_alive():
            worker.join(STATUS_INTERVAL_S)
            if live and time.monotonic() - last >= PLAIN_STATUS_INTERVAL_S:
                console.print(f"fluvial sink: {sink.progress().line()}", highlight=False)
                last = time.monotonic()
    console.print(f"fluvial sink: stopped. {sink.progress().line()}", highlight=False)
    if errors:
        error = errors[0]
        if isinstance(error, SinkFencedError):
            console.print(f"[bold red]fenced:[/] {error}", highlight=False)
            return EXIT_FENCED
        if isinstance(error, FluvialError | psycopg.Error):
            console.print(f"[bold red]error:[/] {error}", highlight=False)
            return 1
        raise error
    return 0


def _fail(error: BaseException) -> None:
    console.print(f"[bold red]error:[/] {error}", highlight=False)
    raise typer.Exit(code=1)
