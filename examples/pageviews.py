"""The paper's Figure 2 pipeline: windowed counts of long page views per category.

    uv run fluvial run examples/pageviews.py --engine local --guarantee exactly_once_v2
"""

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes

INPUT = "pageview-events"
OUTPUT = "pageview-windowed-counts"


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream(INPUT, key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=5000, grace_ms=2000))
        .count()
        .to_stream()
        .to(OUTPUT, key_serde=serdes.time_windowed(serdes.string(), 5000), value_serde=serdes.long())
    )


config = StreamsConfig(application_id="pageviews", processing_guarantee="exactly_once_v2")
