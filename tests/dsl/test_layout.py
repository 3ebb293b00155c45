"""How a topology's stateful layout is recognised across versions (no Kafka here).

A resource's signature leaves names out, so a generated name that merely moved matches its
older self, while a change of kind, serde or window does not; two alike operators are told
apart by nothing, and a match between them is never guessed.
"""

from __future__ import annotations

import pytest

from fluvial import (
    Grouped,
    Materialized,
    StreamsBuilder,
    StreamsConfig,
    TimeWindows,
    serdes,
)
from fluvial.errors import TopologyError
from fluvial.runtime.deployments import _ambiguous, _match, check_explicit_names
from fluvial.topology.layout import REPARTITION, STORE, generated_prefix, layout_of


def clicks_topology(*, guard: bool = False, named: bool = False, window_ms: int | None = None,
                    value_serde=None, twice: bool = False):  # noqa: ANN001, ANN201 # fmt: skip
    b = StreamsBuilder()
    stream = b.stream("clicks", key_serde=serdes.string(), value_serde=serdes.json())
    if guard:
        stream = stream.filter(lambda k, v: v is not None)
    grouped = stream.select_key(lambda k, v: v["user"]).group_by_key(
        Grouped.as_("by-user") if named else None,
        key_serde=serdes.string(),
        value_serde=value_serde or serdes.json(),
    )
    if window_ms:
        grouped = grouped.windowed_by(TimeWindows.of_size_with_no_grace(window_ms))
    materialized = Materialized.as_("per-user") if named else None
    grouped.count(materialized=materialized).to_stream().to("counts")
    if twice:
        grouped.count().to_stream().to("counts-again")
    return b.build()


def by_kind(topology) -> dict[str, list]:  # noqa: ANN001
    resources = layout_of(topology)
    return {kind: [r for r in resources if r.kind == kind] for kind in (STORE, REPARTITION)}


def test_an_added_stateless_operator_shifts_names_but_not_signatures() -> None:
    v1, v2 = by_kind(clicks_topology()), by_kind(clicks_topology(guard=True))
    for kind in (STORE, REPARTITION):
        [old], [new] = v1[kind], v2[kind]
        assert old.name != new.name and old.generated and new.generated
        assert old.signature == new.signature
    moves, unmatched = _match(v1[STORE] + v1[REPARTITION], layout_of(clicks_topology(guard=True)),
                              {r.topic for r in layout_of(clicks_topology())})  # fmt: skip
    assert not unmatched
    assert sorted((m.old.name, m.new.name) for m in moves) == sorted(
        (v1[k][0].name, v2[k][0].name) for k in (STORE, REPARTITION)
    )
    assert not any(_ambiguous(m, moves) for m in moves)


@pytest.mark.parametrize(
    "changed",
    [
        {"window_ms": 60_000},  # a windowed store is other state
        {"value_serde": serdes.string()},  # other bytes in the repartition topic
    ],
)
def test_a_change_of_kind_or_serde_is_not_the_same_state(changed: dict) -> None:
    before = {r.kind: r.signature for r in layout_of(clicks_topology())}
    after = {r.kind: r.signature for r in layout_of(clicks_topology(**changed))}
    assert any(before[k] != after[k] for k in before)


def test_two_alike_counts_are_ambiguous_and_never_guessed() -> None:
    old = [r for r in layout_of(clicks_topology(twice=True)) if r.kind == STORE]
    new = layout_of(clicks_topology(twice=True, guard=True))
    old_topics = {r.topic for r in layout_of(clicks_topology(twice=True))}
    moves, _ = _match(old, new, old_topics)
    stores = [m for m in moves if m.old.kind == STORE]
    assert len(stores) == 4  # each old count matches both new ones
    assert all(_ambiguous(m, moves) for m in stores)


def test_named_resources_are_not_generated() -> None:
    resources = layout_of(clicks_topology(named=True))
    assert {r.name for r in resources} == {"per-user", "by-user-repartition"}
    assert not any(r.generated for r in resources)
    assert generated_prefix("KSTREAM-AGGREGATE-STATE-STORE-0000000004") == (
        "KSTREAM-AGGREGATE-STATE-STORE"
    )
    assert generated_prefix("per-user") is None


def test_explicit_naming_refuses_generated_names_before_anything_starts() -> None:
    config = StreamsConfig(ensure_explicit_internal_resource_naming=True)
    with pytest.raises(TopologyError) as refused:
        check_explicit_names(clicks_topology(), config)
    message = str(refused.value)
    assert "KSTREAM-AGGREGATE-STATE-STORE-0000000002" in message
    assert "Materialized.as_" in message and "Grouped.as_" in message
    check_explicit_names(clicks_topology(named=True), config)  # every name given: no error
    check_explicit_names(clicks_topology(), StreamsConfig())  # off by default, as in Kafka Streams


def test_a_renamed_topology_uses_the_carried_topics_and_keeps_store_names() -> None:
    topology = clicks_topology(guard=True)
    [store] = [r for r in layout_of(topology) if r.kind == STORE]
    [repartition] = [r for r in layout_of(topology) if r.kind == REPARTITION]
    renamed = topology.renamed({store.name: "OLD-changelog"}, {repartition.name: "OLD-repartition"})
    [sub0, sub1] = renamed.subtopologies("app")
    assert sub0.sink_topics == ("app-OLD-repartition",)
    assert sub1.source_topics == ("app-OLD-repartition",)
    assert sub1.changelog_topics() == {store.name: "app-OLD-changelog"}
    assert {r.name for r in layout_of(renamed)} == {store.name, repartition.name}
    assert {t.name for t in renamed.internal_topics("app")} == {
        "app-OLD-repartition",
        "app-OLD-changelog",
    }
    # Renaming again starts from the topology's own names, not from the carried ones.
    again = renamed.renamed({}, {repartition.name: "NEWER-repartition"})
    assert again.subtopologies("app")[0].sink_topics == ("app-NEWER-repartition",)
    assert again.internal_names() == {
        "changelogs": {store.name: "OLD-changelog"},
        "repartitions": {repartition.name: "NEWER-repartition"},
    }


def test_describe_marks_every_generated_stateful_name(tmp_path) -> None:  # noqa: ANN001
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests import processes

    app = Path(__file__).parents[1] / "runtime" / "apps" / "versions.py"
    env = {**os.environ, "FLUVIAL_TEST_INPUT": "clicks", "FLUVIAL_TEST_OUTPUT": "counts",
           "FLUVIAL_TEST_APP_ID": "clicks-app", "FLUVIAL_TEST_BOOTSTRAP": "127.0.0.1:1",
           "FLUVIAL_TEST_STATE_DIR": str(tmp_path)}  # fmt: skip

    def describe(named: str) -> subprocess.CompletedProcess[str]:
        return processes.run([sys.executable, "-m", "fluvial.cli", "describe", str(app)],
                             timeout=120, env={**env, "FLUVIAL_TEST_NAMED": named})  # fmt: skip

    generated = describe("0")
    assert generated.returncode == 0, generated.stderr
    marked = [line for line in generated.stdout.splitlines() if line.startswith("  * ")]
    assert len(marked) == 2, generated.stdout
    assert "store KSTREAM-AGGREGATE-STATE-STORE-0000000002" in marked[0]
    assert "Materialized.as_" in marked[0]
    assert "repartition topic KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition" in marked[1]
    assert "Grouped.as_" in marked[1]
    named = describe("1")
    assert named.returncode == 0, named.stderr
    assert "Generated names" not in named.stdout
