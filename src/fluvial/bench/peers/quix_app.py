"""Quix Streams running a ``fluvial bench`` workload (argv[1]: the run's settings as JSON).

Run by the Quix virtual environment's interpreter; it never imports fluvial.
"""

import json
import sys

from quixstreams import Application

WINDOW_MS, GRACE_MS = 5_000, 2_000
WINDOWED_MS = 10_000


def main() -> None:
    s = json.loads(sys.argv[1])
    app = Application(
        broker_address=s["bootstrap"],
        consumer_group=s["group"],
        auto_offset_reset="earliest",
        # Quix's own exactly-once: a transactional producer with the input offsets in the
        # transaction, as in Kafka Streams.
        processing_guarantee="exactly-once" if s["exactly_once"] else "at-least-once",
        commit_interval=s["commit_ms"] / 1000,
        state_dir=s["state_dir"],
        loglevel="WARNING",
        auto_create_topics=True,
    )
    views = app.topic(s["input"], key_deserializer="str", value_deserializer="json")
    out = app.topic(s["output"], key_serializer="str", value_serializer="json")
    sdf = app.dataframe(views)
    workload = s["workload"]
    if workload == "figure2":
        sdf = sdf.filter(lambda view: view["period"] >= 30000)
        sdf = sdf.group_by("category")  # a repartition topic, as in the other systems
        sdf = sdf.tumbling_window(WINDOW_MS, grace_ms=GRACE_MS).count().current()
    elif workload == "passthrough":
        sdf = sdf.filter(lambda view: view["period"] >= 30000)
        sdf = sdf.apply(lambda view: {**view, "long": True})
    elif workload == "windowed":
        sdf = sdf.tumbling_window(WINDOWED_MS, grace_ms=GRACE_MS).count().current()
    elif workload == "join":
        users = app.dataframe(
            app.topic(s["table"], key_deserializer="str", value_deserializer="json")
        )
        sdf = sdf.join_asof(users, how="inner", on_merge="keep-left")
    else:
        raise SystemExit(f"unknown workload {workload}")
    sdf.to_topic(out)
    app.run()


if __name__ == "__main__":
    main()
