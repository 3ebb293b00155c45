"""Figure 2's final windowed counts, landed in a PostgreSQL table exactly once.

The pipeline is the paper's Figure 2 (long page views per category, 5 s windows, 2 s grace),
with ``suppress(until_window_closes)``: each window's count leaves the topology once, when the
window has closed (stream time past its end plus grace). The application's ``egress`` lands
that topic in the table ``pageview_final_counts`` (``key``, ``window_start``, ``window_end``,
``value``), upserting by window, with the rows and the consumed offsets in one transaction.

    export PAGEVIEWS_DSN=postgresql://postgres@127.0.0.1:5432/postgres   # no password here:
                                                                        # use PGPASSWORD
    # the topics are yours to create: pageview-events and pageview-final-counts
    uv run fluvial run examples/pageviews_to_postgres.py --engine local \\
        --bootstrap-servers 127.0.0.1:9092

    psql "$PAGEVIEWS_DSN" -c 'SELECT key, window_start, value FROM pageview_final_counts'

``fluvial run`` starts the sink beside the application and stops it with the application.
Kill either at any point: the application resumes from its Kafka transaction, the sink from
its offsets in PostgreSQL, and each window's final count is in the table exactly once.
"""

import os

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, Suppressed, TimeWindows, serdes
from fluvial.sinks import PostgresSink

INPUT = os.environ.get("PAGEVIEWS_INPUT", "pageview-events")
OUTPUT = os.environ.get("PAGEVIEWS_OUTPUT", "pageview-final-counts")
TABLE = os.environ.get("PAGEVIEWS_TABLE", "pageview_final_counts")
WINDOW_MS, GRACE_MS = 5000, 2000


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream(INPUT, key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
        .count()
        .suppress(Suppressed.until_window_closes())
        .to_stream()
        .to(
            OUTPUT,
            key_serde=serdes.time_windowed(serdes.string(), WINDOW_MS),
            value_serde=serdes.long(),
        )
    )


config = StreamsConfig(
    application_id=os.environ.get("PAGEVIEWS_APP_ID", "pageviews-to-postgres"),
    bootstrap_servers=os.environ.get("PAGEVIEWS_BOOTSTRAP", "127.0.0.1:9092"),
    processing_guarantee="exactly_once_v2",
    state_dir=os.environ.get("PAGEVIEWS_STATE_DIR", "/tmp/fluvial"),
)

# Run by `fluvial run` beside the topology; Kafka settings come from the application.
egress = [
    PostgresSink(
        OUTPUT,
        table=TABLE,
        dsn=os.environ["PAGEVIEWS_DSN"],
        mode="upsert",
        key_serde="string",
        value_serde="long",
        window_size_ms=WINDOW_MS,
        commit_interval_ms=200,
    )
]
