"""Faust (faust-streaming) running a ``fluvial bench`` workload.

The run's settings come as JSON in ``FAUST_BENCH_SETTINGS`` because Faust's own command line
owns ``sys.argv`` (``faust_app.py worker``). Run by the Faust virtual environment's interpreter;
it never imports fluvial.
"""

import json
import os
from datetime import timedelta

import faust

s = json.loads(os.environ["FAUST_BENCH_SETTINGS"])
WINDOW_S, GRACE_S = 5.0, 2.0

app = faust.App(
    s["group"],
    broker=f"kafka://{s['bootstrap']}",
    # Faust's own exactly-once: transactional producers per partition, offsets in the
    # transaction.
    processing_guarantee="exactly_once" if s["exactly_once"] else "at_least_once",
    broker_commit_interval=s["commit_ms"] / 1000,
    store="memory://",
    topic_partitions=s["partitions"],
    datadir=s["state_dir"],
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
)
views = app.topic(s["input"], key_serializer="raw", value_serializer="json")
out = app.topic(s["output"], key_serializer="raw", value_serializer="json")
workload = s["workload"]

if workload == "figure2":
    # Event time: windows follow the records' timestamps, not the wall clock.
    counts = (
        app.Table("counts", default=int)
        .tumbling(WINDOW_S, expires=timedelta(seconds=WINDOW_S + GRACE_S))
        .relative_to_stream()
    )

    @app.agent(views)
    async def figure2(stream):
        long_views = stream.filter(lambda view: view["period"] >= 30000)
        async for view in long_views.group_by(lambda view: view["category"], name="category"):
            category = view["category"]
            counts[category] += 1
            await out.send(key=category.encode(), value=counts[category].current())

elif workload == "passthrough":

    @app.agent(views)
    async def passthrough(stream):
        async for key, view in stream.items():
            if view["period"] >= 30000:
                await out.send(key=key, value={**view, "long": True})

elif workload == "windowed":
    counts = (
        app.Table("counts", default=int)
        .tumbling(10.0, expires=timedelta(seconds=12))
        .relative_to_stream()
    )

    @app.agent(views)
    async def windowed(stream):
        async for key, _view in stream.items():
            counts[key] += 1
            await out.send(key=key, value=counts[key].current())

elif workload == "join":
    users = app.Table("users", default=None)
    table_topic = app.topic(s["table"], key_serializer="raw", value_serializer="json")

    @app.agent(table_topic)
    async def load_users(stream):
        async for key, row in stream.items():
            users[key] = row

    @app.agent(views)
    async def join(stream):
        async for key, view in stream.items():
            row = users.get(key)
            if row is not None:
                await out.send(key=key, value={**view, "region": row["region"]})


if __name__ == "__main__":
    app.main()
