"""``fluvial bench nexmark``: generate Nexmark input, compare and benchmark the queries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from fluvial.bench.nexmark import model
from fluvial.cli_support import lazy_console, new_app

nexmark_app = new_app(
    help="Nexmark, the online-auction benchmark: fluvial's queries next to Kafka Streams' on the "
    "same generated input, measured (without a command) or compared (compare); generate writes "
    "the input alone.",
)
console = lazy_console(stderr=True, soft_wrap=True)

Events = Annotated[int, typer.Option(help="Events to generate (1 person : 3 auctions : 46 bids)")]
Partitions = Annotated[int, typer.Option(help="Partitions of each of the three input topics")]
Seed = Annotated[int, typer.Option(help="Seed: the same seed, base time and rate, the same events")]
Rate = Annotated[
    int,
    typer.Option(help="Events per second of event time (1000: one event per millisecond)"),
]
Bootstrap = Annotated[
    str | None,
    typer.Option(help="Use this Kafka instead of starting a private local one"),
]
JsonOut = Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here")]


def _positive(value: int, option: str) -> int:
    if value < 1:
        raise typer.BadParameter(f"{option} must be at least 1, got {value}")
    return value


@nexmark_app.command("generate")
def generate(
    events: Events = 1_000_000,
    partitions: Partitions = 3,
    seed: Seed = 0,
    rate: Rate = model.DEFAULT_RATE,
    prefix: Annotated[
        str, typer.Option(help="Topic prefix: topics PREFIX-person, PREFIX-auction, PREFIX-bid")
    ] = "nexmark",
    base_ms: Annotated[
        int | None,
        typer.Option(
            help="Time of the first event (epoch ms; default: the events end a minute before now)"
        ),
    ] = None,
    bootstrap_servers: Bootstrap = None,
    json_out: JsonOut = None,
) -> None:
    """Write Nexmark events to three topics, placed by Kafka's Java partitioner, as JSON.

    Without --bootstrap-servers a private local Kafka runs for the command only (the events
    go with it): give a cluster to keep them.
    """
    from fluvial.bench.harness import kafka
    from fluvial.bench.nexmark.generator import write

    _positive(events, "--events")
    _positive(partitions, "--partitions")
    _positive(rate, "--rate")
    with kafka(bootstrap_servers) as servers:
        written = write(servers, prefix, events, partitions=partitions, seed=seed,
                        base_ms=base_ms, rate=rate)  # fmt: skip
    console.print(
        f"wrote {written.events:,} events ({written.counts['person']:,} people, "
        f"{written.counts['auction']:,} auctions, {written.counts['bid']:,} bids) to "
        f"{', '.join(written.topics.values())} ({partitions} partitions each) at {servers} in "
        f"{written.seconds:.1f} s: {written.events_per_s:,.0f} events/s; times "
        f"{written.base_ms} to {written.last_ms}, seed {seed}",
        highlight=False,
    )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(written.as_dict(), indent=1) + "\n")


Guarantee = Annotated[str, typer.Option(help="exactly_once_v2 or at_least_once")]
CommitMs = Annotated[int, typer.Option("--commit-interval-ms", help="Commit interval (ms)")]
CacheBytes = Annotated[
    int,
    typer.Option(help="Record cache bytes of both systems (0: off, every update a revision)"),
]


def _queries(query: str) -> list[str]:
    from fluvial.bench.nexmark.queries import QUERIES

    if query == "all":
        return list(QUERIES)
    chosen = [q.strip() for q in query.split(",") if q.strip()]
    for q in chosen:
        if q not in QUERIES:
            raise typer.BadParameter(f"unknown query {q!r}: use {', '.join(QUERIES)} or all")
    return chosen


def _guarantee(value: str) -> str:
    if value not in ("exactly_once_v2", "at_least_once"):
        raise typer.BadParameter(
            f"--guarantee must be exactly_once_v2 or at_least_once, not {value!r}"
        )
    return value


@nexmark_app.command("compare")
def compare(
    query: Annotated[
        str, typer.Option(help="A query (q0, q1, ...), several comma-separated, or all")
    ] = "all",
    events: Events = 5_000,
    partitions: Partitions = 3,
    seed: Seed = 0,
    rate: Rate = 100,
    guarantee: Guarantee = "exactly_once_v2",
    commit_interval_ms: CommitMs = 100,
    cache_max_bytes: CacheBytes = 0,
    bootstrap_servers: Bootstrap = None,
    json_out: JsonOut = None,
) -> None:
    """Run queries on fluvial and on Kafka Streams on the same generated input; compare their
    committed outputs byte for byte, and fluvial's with each query's plain-Python oracle.

    The default rate (100 events per second of event time) makes a small input span enough
    event time for its windows and auctions to close. Exits 1 if any query differs.
    """
    from fluvial.bench.harness import kafka
    from fluvial.bench.nexmark.compare import run_comparison
    from fluvial.bench.nexmark.runner import Settings
    from fluvial.verify.differential.reference import build_reference_jar

    chosen = _queries(query)
    _positive(events, "--events")
    _positive(partitions, "--partitions")
    _positive(rate, "--rate")
    settings = Settings(_guarantee(guarantee), _positive(commit_interval_ms, "--commit-interval-ms"),
                        max(0, cache_max_bytes))  # fmt: skip
    jar = build_reference_jar()
    with kafka(bootstrap_servers) as servers:
        results = run_comparison(
            chosen, events=events, partitions=partitions, bootstrap=servers, jar=jar,
            settings=settings, seed=seed, rate=rate,
            say=lambda line: console.print(line, highlight=False),
        )  # fmt: skip
    for r in results:
        verdict = "[green]same[/]" if r.ok else "[bold red]DIFFERENT[/]"
        console.print(
            f"{r.query:<4} {verdict}  {r.keys:,} keys, fluvial {r.fluvial_records:,} records, "
            f"kafka-streams {r.kafka_streams_records:,}",
            highlight=False,
        )
        for line in r.with_kafka_streams:
            console.print(f"     vs kafka-streams: {line}", highlight=False, markup=False)
        for line in r.with_oracle:
            console.print(f"     vs oracle: {line}", highlight=False, markup=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        data = {"events": events, "partitions": partitions, "seed": seed, "rate": rate,
                "settings": settings.__dict__, "results": [r.as_dict() for r in results]}  # fmt: skip
        json_out.write_text(json.dumps(data, indent=1) + "\n")
    if not all(r.ok for r in results):
        raise typer.Exit(code=1)


@nexmark_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Option(help="A query (q0, q1, ...), several comma-separated, or all")
    ] = "all",
    events: Events = 1_000_000,
    partitions: Partitions = 3,
    peers: Annotated[
        str, typer.Option(help="Peers beside fluvial, comma-separated: kafka-streams, quix (q0-q2)")
    ] = "kafka-streams",
    engine: Annotated[str, typer.Option(help="fluvial's engine: local, spark or both")] = "local",
    guarantees: Annotated[
        str, typer.Option(help="Comma-separated: exactly_once_v2, at_least_once")
    ] = "exactly_once_v2,at_least_once",
    cache: Annotated[
        str,
        typer.Option(
            help="Record cache of every system, comma-separated: on (10 MiB, both "
            "systems' default), off (every update a revision)"
        ),
    ] = "on,off",
    commit_interval_ms: CommitMs = 100,
    seed: Seed = 0,
    rate: Rate = model.DEFAULT_RATE,
    master: Annotated[str, typer.Option(help="Spark master for --engine spark")] = "local[2]",
    bootstrap_servers: Bootstrap = None,
    json_out: JsonOut = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="Profile fluvial's runs with py-spy; collapsed stacks go to this folder "
            "(read them with 'fluvial bench hotspots')"
        ),
    ] = None,
    kafka_streams_stream_time: Annotated[
        bool,
        typer.Option(
            "--kafka-streams-stream-time",
            help="Run fluvial with Kafka Streams' stream time across repartition topics "
            "(catch_up_completeness=False), so that re-keyed windows emit what Kafka Streams "
            "emits; results are named fluvial-...+kstime",
        ),
    ] = False,
) -> None:
    """Each query on fluvial and its peers, one pre-loaded input, every guarantee and cache
    setting: events/s and CPU µs per event of the system's processes, pinned as Figure 2."""
    if ctx.invoked_subcommand is not None:
        return
    from fluvial.bench.nexmark.bench import DEFAULT_CACHE_BYTES, PEERS, run_nexmark_bench

    chosen = _queries(query)
    _positive(events, "--events")
    _positive(partitions, "--partitions")
    _positive(rate, "--rate")
    engines = ["local", "spark"] if engine == "both" else [engine]
    if any(e not in ("local", "spark") for e in engines):
        raise typer.BadParameter(f"unknown engine {engine!r}: use local, spark or both")
    others = [p.strip() for p in peers.split(",") if p.strip()]
    for peer in others:
        if peer not in PEERS:
            raise typer.BadParameter(f"unknown peer {peer!r}: use {', '.join(PEERS)}")
    chosen_guarantees = [_guarantee(g.strip()) for g in guarantees.split(",") if g.strip()]
    caches = []
    for setting in (c.strip() for c in cache.split(",") if c.strip()):
        if setting not in ("on", "off"):
            raise typer.BadParameter(f"--cache takes on and off, not {setting!r}")
        caches.append(DEFAULT_CACHE_BYTES if setting == "on" else 0)
    run_nexmark_bench(
        chosen, [f"fluvial-{e}" for e in engines] + others, chosen_guarantees, caches,
        events=events, partitions=partitions, commit_ms=_positive(commit_interval_ms,
        "--commit-interval-ms"), bootstrap=bootstrap_servers, json_out=json_out, seed=seed,
        rate=rate, master=master, profile_dir=profile,
        catch_up_completeness=not kafka_streams_stream_time,
    )  # fmt: skip
