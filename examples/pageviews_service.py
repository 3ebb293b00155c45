"""Page views per category in the last minute, answered from a running Figure 2 application.

This file is two things:

1. an APP.py: the paper's Figure 2 pipeline, with its windowed counts in a store named
   ``pageview-counts`` that keeps two minutes of windows. Run it with queries served:

       uv run fluvial run examples/pageviews_service.py --engine local --serve 127.0.0.1:8080

2. a small web service that asks that application, and never a database:

       uv run python examples/pageviews_service.py --app http://127.0.0.1:8080 --port 8090
       curl http://127.0.0.1:8090/views-last-minute
       {"since_ms": 1767225540000, "until_ms": 1767225600000, "isolation": "committed",
        "views": {"news": 41, "sports": 17, "tech": 9}}

The counts are committed ones (exactly-once): a crash of the application never takes back a
number this service has shown. ``?isolation=latest`` shows the newest, uncommitted counts.
"""

from __future__ import annotations

import argparse
import os
import time

from fluvial import KeyValue, Materialized, StreamsBuilder, StreamsConfig, TimeWindows, serdes

INPUT = "pageview-events"
OUTPUT = "pageview-windowed-counts"
STORE = "pageview-counts"
WINDOW_MS = 5000
MINUTE_MS = 60_000


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream(INPUT, key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=2000))
        # Named, so the service can ask for it, and kept for two minutes of stream time.
        .count(materialized=Materialized.as_(STORE).with_retention(2 * MINUTE_MS))
        .to_stream()
        .to(OUTPUT, key_serde=serdes.time_windowed(serdes.string(), WINDOW_MS),
            value_serde=serdes.long())  # fmt: skip
    )


config = StreamsConfig(application_id="pageviews-service", processing_guarantee="exactly_once_v2")


def service(app_url: str, token: str | None = None):  # noqa: ANN201 - a Starlette app
    """The web service: one route, answered by one scan of the application's window store."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = httpx.AsyncClient(base_url=app_url, headers=headers, timeout=10)

    async def views_last_minute(request: Request) -> JSONResponse:
        now = int(request.query_params.get("now_ms") or time.time() * 1000)
        since = now - MINUTE_MS
        params = {
            # Windows that overlap the last minute: starting up to one window before it.
            "from": str(since - WINDOW_MS + 1),
            "to": str(now),
            "isolation": request.query_params.get("isolation", "committed"),
        }
        answer = await client.get(f"/stores/{STORE}/windows", params=params)
        if answer.status_code != 200:
            # Restoring or moving: pass the 503 and its Retry-After on to our own caller.
            headers = {k: v for k, v in answer.headers.items() if k.lower() == "retry-after"}
            return JSONResponse(answer.json(), status_code=answer.status_code, headers=headers)
        views: dict[str, int] = {}
        for window in answer.json()["windows"]:
            views[window["key"]] = views.get(window["key"], 0) + window["value"]
        return JSONResponse({"since_ms": since, "until_ms": now, "isolation": params["isolation"],
                             "views": dict(sorted(views.items()))})  # fmt: skip

    return Starlette(routes=[Route("/views-last-minute", views_last_minute)])


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--app", default="http://127.0.0.1:8080", help="the application's --serve URL")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args()
    uvicorn.run(service(args.app, os.environ.get("FLUVIAL_SERVE_TOKEN")), host="127.0.0.1",
                port=args.port, log_level="warning")  # fmt: skip


if __name__ == "__main__":
    main()
