"""``fluvial reset`` deletes exactly what belongs to the application, and nothing else.

Application ids may prefix each other (``shop`` and ``shop-eu``): resetting ``shop`` must never
delete ``shop-eu``'s state, which would restart empty over committed offsets.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.runtime.reset import other_owner
from tests import processes

pytestmark = [pytest.mark.kafka]


def topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics)


def reset(*args: str) -> processes.subprocess.CompletedProcess[str]:
    return processes.run([sys.executable, "-m", "fluvial.cli", "reset", *args], timeout=180)


def test_which_names_another_application_could_own() -> None:
    assert other_owner("shop", "shop-eu-totals-changelog") == "shop-eu"
    assert other_owner("shop", "shop-totals-changelog") is None
    assert other_owner("shop", "shop-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog") is None
    assert other_owner("shop", "shop-eu-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog")
    assert other_owner("shop", "shop-orders") is None  # not an internal topic at all


def test_reset_never_deletes_another_applications_topics(
    bootstrap_servers: str, unique_name, tmp_path: Path
) -> None:
    shop = unique_name("shop").replace("-", "_")  # one id with no dash of its own
    eu = f"{shop}-eu"
    own = [f"{shop}-totals-changelog", f"{shop}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog",
           f"{shop}-by_user-repartition"]  # fmt: skip
    theirs = [f"{eu}-totals-changelog", f"{eu}-KSTREAM-KEY-SELECT-0000000002-repartition"]
    unrelated = f"{shop}-orders"
    create_topics(bootstrap_servers, [TopicSpec(t, 2) for t in [*own, *theirs, unrelated]])
    (tmp_path / "state" / shop).mkdir(parents=True)

    by_id = reset(shop, "--bootstrap-servers", bootstrap_servers,
                  "--state-dir", str(tmp_path / "state"))  # fmt: skip
    assert by_id.returncode == 1
    for topic in theirs:
        assert topic in by_id.stderr  # listed, with the fix
    assert "fluvial reset APP.py" in by_id.stderr
    assert set(own + theirs) <= topics(bootstrap_servers), "nothing deleted on a refusal"
    assert (tmp_path / "state" / shop).exists()

    app = tmp_path / "shop_app.py"
    app.write_text(textwrap.dedent(f"""
        from fluvial import Grouped, Materialized, StreamsBuilder, StreamsConfig, serdes

        config = StreamsConfig(application_id={shop!r}, bootstrap_servers={bootstrap_servers!r},
                               state_dir={str(tmp_path / "state")!r})

        def build(builder: StreamsBuilder) -> None:
            (builder.stream("orders", key_serde=serdes.string(), value_serde=serdes.json())
                .group_by(lambda k, o: o["user"], Grouped.as_("by_user"))
                .count(materialized=Materialized.as_("totals")))
    """))  # fmt: skip
    dry = reset(str(app), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    listed = dry.stdout + dry.stderr
    assert (
        f"topic {shop}-totals-changelog" in listed and f"topic {shop}-by_user-repartition" in listed
    )
    assert not any(t in listed for t in theirs)
    assert set(own + theirs) <= topics(bootstrap_servers), "a dry run deletes nothing"

    done = reset(str(app))
    assert done.returncode == 0, done.stderr
    left = topics(bootstrap_servers)
    assert f"{shop}-totals-changelog" not in left and f"{shop}-by_user-repartition" not in left
    assert set(theirs) <= left, "the other application's topics survive"
    assert unrelated in left
    assert not (tmp_path / "state" / shop).exists(), "the state_dir came from APP.py"
