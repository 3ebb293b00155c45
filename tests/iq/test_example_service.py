"""examples/pageviews_service.py: page views per category in the last minute, from the app."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from starlette.testclient import TestClient

from fluvial.kafka.admin import TopicSpec, create_topics
from tests.iq.harness import counts_of, free_port, get, in_grace_views
from tests.runtime.harness import produce, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

EXAMPLE = Path(__file__).parents[2] / "examples" / "pageviews_service.py"


def load_example():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("pageviews_service", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_service_answers_views_per_category_in_the_last_minute(
    bootstrap_servers: str, unique_name, tmp_path: Path
) -> None:
    example = load_example()
    views = in_grace_views(seed=21, count=4000)
    now_ms = max(v.timestamp_ms for v in views)
    since = now_ms - example.MINUTE_MS
    expected: dict[str, int] = {}
    for (category, start), count in counts_of(views).items():
        if start + example.WINDOW_MS > since and start <= now_ms:
            expected[category] = expected.get(category, 0) + count
    # The example's own topic names: only this test uses them on the session's cluster.
    existing = set(
        AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(timeout=10).topics
    )
    create_topics(bootstrap_servers, [TopicSpec(t, 1) for t in (example.INPUT, example.OUTPUT)
                                      if t not in existing])  # fmt: skip
    port = free_port()
    log = tmp_path / "app.log"
    cmd = [sys.executable, "-m", "fluvial.cli", "run", str(EXAMPLE), "--engine", "local",
           "--bootstrap-servers", bootstrap_servers, "--application-id", unique_name("svc"),
           "--state-dir", str(tmp_path / "state"), "--serve", f"127.0.0.1:{port}", "--quiet"]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        wait_until(lambda: _serving(port, proc, log), 120, "the application to serve")
        produce(bootstrap_servers, example.INPUT, views)
        with TestClient(example.service(f"http://127.0.0.1:{port}")) as client:

            def answer() -> dict | None:
                response = client.get(f"/views-last-minute?now_ms={now_ms}")
                return response.json()["views"] if response.status_code == 200 else None

            wait_until(lambda: answer() == expected, 120, "the last minute's counts")
            latest = client.get(f"/views-last-minute?now_ms={now_ms}&isolation=latest").json()
            assert latest["views"] == expected and latest["isolation"] == "latest"
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _serving(port: int, proc: subprocess.Popen, log: Path) -> bool:
    assert proc.poll() is None, log.read_text(errors="replace")
    try:
        body = get(port, "/health", timeout=2).body
    except OSError:
        return False
    return bool(body.get("tasks")) and body.get("tasks_serving") == body.get("tasks")
