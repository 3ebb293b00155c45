"""``fluvial bench nexmark``: generate Nexmark input, compare and benchmark the queries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from fluvial.bench.nexmark import model

nexmark_app = typer.Typer(
    help="Nexmark, the online-auction benchmark: its event generator, fluvial's queries next "
    "to Kafka Streams' on the same input, and their results compared.",
    no_args_is_help=True,
)
console = Console(stderr=True, soft_wrap=True)

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
