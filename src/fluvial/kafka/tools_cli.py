"""``fluvial topics create|list|describe|delete`` and ``fluvial tail``: the topic tools on the CLI.

They take the connection options of ``fluvial run``: ``--bootstrap-servers`` and the client
settings (``--client-config FILE``, ``FLUVIAL_KAFKA_CLIENT_*`` variables).
"""

from __future__ import annotations

import json
import signal
import threading
from typing import Annotated

import typer

from fluvial.cli_support import lazy_console, new_app
from fluvial.client_options import ClientConfigOption, client_settings_or_exit
from fluvial.errors import FluvialError

topics_app = new_app(help="Create, list, describe and delete topics.", no_args_is_help=True)

console = lazy_console(stderr=True)
out = lazy_console()

BootstrapOption = Annotated[
    str | None,
    typer.Option(
        help="Kafka bootstrap servers (default: the client settings', else 127.0.0.1:9092)"
    ),
]


def _fail(error: Exception) -> None:
    console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=1)


def _connection(bootstrap_servers: str | None, client_config) -> tuple[str, dict[str, str]]:  # noqa: ANN001
    from fluvial.kafka.tools import connect

    settings_bootstrap, settings = client_settings_or_exit(client_config)
    bootstrap = bootstrap_servers or settings_bootstrap or "127.0.0.1:9092"
    try:
        connect(bootstrap, settings)
    except FluvialError as error:
        _fail(error)
    return bootstrap, settings


@topics_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="The topic's name")],
    partitions: Annotated[int, typer.Option(help="Number of partitions")] = 1,
    replication_factor: Annotated[
        int, typer.Option(help="Replicas per partition (default: the broker's)")
    ] = -1,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config", help="A topic setting KEY=VALUE, e.g. cleanup.policy=compact; repeatable"
        ),
    ] = None,
    bootstrap_servers: BootstrapOption = None,
    client_config: ClientConfigOption = None,
) -> None:
    """Create a topic and wait until every partition has a leader."""
    from fluvial.kafka.tools import create_topic, parse_configs

    try:
        configs = parse_configs(config or [])
        bootstrap, settings = _connection(bootstrap_servers, client_config)
        create_topic(
            bootstrap, settings, name, partitions=partitions,
            replication_factor=replication_factor, configs=configs,
        )  # fmt: skip
    except FluvialError as error:
        _fail(error)
    console.print(
        f"created topic {name} ({partitions} partition(s)) on {bootstrap}", highlight=False
    )


@topics_app.command("list")
def list_(
    internal: Annotated[
        bool, typer.Option("--internal", help="Include Kafka's own topics (__consumer_offsets, …)")
    ] = False,
    bootstrap_servers: BootstrapOption = None,
    client_config: ClientConfigOption = None,
) -> None:
    """List topics with their partition counts and replication factors."""
    from fluvial.kafka.tools import list_topics

    bootstrap, settings = _connection(bootstrap_servers, client_config)
    try:
        infos = list_topics(bootstrap, settings, internal=internal)
    except FluvialError as error:
        _fail(error)
    for info in infos:
        print(f"{info.name}\tpartitions={info.partitions}\treplication={info.replication_factor}")


@topics_app.command("describe")
def describe(
    name: Annotated[str, typer.Argument(help="The topic's name")],
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    bootstrap_servers: BootstrapOption = None,
    client_config: ClientConfigOption = None,
) -> None:
    """Partitions (leader, replicas, in-sync replicas, start and end offsets) and the settings
    that differ from the broker's defaults."""
    from fluvial.kafka.tools import describe_topic

    bootstrap, settings = _connection(bootstrap_servers, client_config)
    try:
        info = describe_topic(bootstrap, settings, name)
    except FluvialError as error:
        _fail(error)
    if as_json:
        out.print_json(json.dumps(info))
        return
    from rich.table import Table

    table = Table(
        "partition", "leader", "replicas", "in-sync", "start offset", "end offset", title=name
    )
    for part in info["partitions"]:
        table.add_row(
            str(part["partition"]), str(part["leader"]), ",".join(map(str, part["replicas"])),
            ",".join(map(str, part["isr"])), str(part["start_offset"]), str(part["end_offset"]),
        )  # fmt: skip
    out.print(table)
    for key, value in info["configs"].items():
        out.print(f"{key}={value}", highlight=False, markup=False)


@topics_app.command("delete")
def delete(
    names: Annotated[list[str], typer.Argument(help="The topics' names", metavar="TOPIC")],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Delete an application's internal topic even while the application runs",
        ),
    ] = False,
    bootstrap_servers: BootstrapOption = None,
    client_config: ClientConfigOption = None,
) -> None:
    """Delete topics and wait until they are gone.

    An application's internal topic (APPLICATION_ID-...-repartition or -changelog) is refused
    while the application is seen running, naming it and how to stop it; 'fluvial reset'
    deletes an application's internal topics together with its committed offsets. Nothing is
    deleted when one of the topics does not exist.
    """
    from fluvial.kafka.deletion import delete_topics

    bootstrap, settings = _connection(bootstrap_servers, client_config)
    try:
        deleted = delete_topics(bootstrap, settings, names, force=force)
    except FluvialError as error:
        _fail(error)
    for name in deleted:
        console.print(f"deleted topic {name} on {bootstrap}", highlight=False, soft_wrap=True)


def tail(
    topic: Annotated[str, typer.Argument(help="The topic to read")],
    key_serde: Annotated[
        str, typer.Option(help="string, json, long, int, short, double, float, uuid or bytes")
    ] = "string",
    value_serde: Annotated[str, typer.Option(help="As --key-serde")] = "string",
    window_size_ms: Annotated[
        int | None, typer.Option(help="Keys are time-windowed with this window size (ms)")
    ] = None,
    session_windows: Annotated[bool, typer.Option(help="Keys are session-windowed")] = False,
    lines: Annotated[int, typer.Option("-n", "--lines", help="The last N records")] = 10,
    from_beginning: Annotated[
        bool,
        typer.Option("--from-beginning", help="Every record from the start instead of the last N"),
    ] = False,
    follow: Annotated[
        bool, typer.Option("-f", "--follow", help="Keep printing new records")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per record")] = False,
    bootstrap_servers: BootstrapOption = None,
    client_config: ClientConfigOption = None,
) -> None:
    """Print a topic's committed records (read_committed), keys and values decoded.

    Each line: pPARTITION@OFFSET, the record's time (UTC), the key (windowed keys as
    key@[start,end)) and the value. Ends at the topic's end unless -f; Ctrl-C stops.
    """
    from fluvial.kafka import tools

    try:
        if lines < 0:
            raise FluvialError(f"-n must be 0 or more, got {lines}")
        key = tools.key_serde(key_serde, window_size_ms, session_windows)
        value = tools.serde_named(value_serde, "--value-serde")
    except FluvialError as error:
        _fail(error)
    bootstrap, settings = _connection(bootstrap_servers, client_config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    render = tools.as_json if as_json else tools.as_line
    try:
        for record in tools.tail(
            bootstrap, settings, topic, key=key, value=value,
            last=None if from_beginning else lines, follow=follow, should_stop=stop.is_set,
        ):  # fmt: skip
            print(render(record), flush=True)
    except FluvialError as error:
        _fail(error)
