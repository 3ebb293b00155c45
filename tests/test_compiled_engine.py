"""The compiled engine is never stale and never silent (``fluvial.compiled``, ``hatch_build.py``).

Each case runs a copy of the installed package (with its extensions and mypyc's group library)
in a fresh interpreter: an edited copy of a compiled module loads from its source, says so in one
line, and computes the same results as the compiled build; ``FLUVIAL_REQUIRE_COMPILED=1`` turns
running interpreted into an error.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

import fluvial
from fluvial import compiled
from tests import processes

# A windowed count with a timestamp extractor, through the compiled modules: the task
# loop, records and windowed keys, the string, JSON and long serdes.
PROGRAM = """
import json, sys
import fluvial.compiled
from fluvial import StreamsBuilder, TimeWindows, serdes
from fluvial.testing import TopologyTestDriver

S, J, L = serdes.string(), serdes.json(), serdes.long()
builder = StreamsBuilder()
(
    builder.stream("events", key_serde=S, value_serde=J,
                   timestamp_extractor=lambda record, _partition_time: record.value["ts"])
    .group_by_key()
    .windowed_by(TimeWindows.of_size_and_grace(size_ms=1000, grace_ms=2000))
    .count()
    .to_stream()
    .map(lambda wk, n: (f"{wk.key}@{wk.window.start_ms}", n))
    .to("counts", key_serde=S, value_serde=L)
)
with TopologyTestDriver(builder.build()) as driver:
    inp = driver.create_input_topic("events", S, J)
    out = driver.create_output_topic("counts", S, L)
    for i, (key, ts) in enumerate([("a", 5200), ("b", 300), ("a", 5900), ("a", 700),
                                   ("b", 9100), ("a", 3000), ("b", 1200)]):
        inp.pipe_input(key, {"ts": ts}, timestamp_ms=i)
    results = [[r.key, r.value, r.timestamp_ms] for r in out.read_records()]
import importlib
for module in fluvial.compiled.MODULES:  # the runtime's modules too, unused by the driver
    importlib.import_module(module)
fluvial.compiled.announce(sys.stderr.write)
print(json.dumps({
    "reason": fluvial.compiled.reason,
    "files": {m: sys.modules[m].__spec__.origin for m in fluvial.compiled.MODULES},
    "edited": getattr(fluvial.serdes, "EDITED", False),
    "results": results,
}))
"""


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the installed fluvial package and the group library: a directory for
    PYTHONPATH. Copied with their modification times, as an install would leave them."""
    if compiled.reason is not None:
        pytest.skip(f"this install runs the engine interpreted: {compiled.reason}")
    package = Path(fluvial.__file__).parent
    site = tmp_path / "site"
    shutil.copytree(package, site / "fluvial", ignore=shutil.ignore_patterns("__pycache__"))
    for library in package.parent.glob(f"{compiled.GROUP_LIBRARY}.*"):
        shutil.copy2(library, site / library.name)
    return site


def _run(site: Path, **env: str) -> tuple[dict, str]:
    environment = {
        k: v
        for k, v in os.environ.items()
        if k not in (compiled.INTERPRETED_ENV, compiled.REQUIRE_ENV)
    }
    environment.update(PYTHONPATH=str(site), **env)
    shown = processes.run(
        [sys.executable, "-c", PROGRAM], timeout=300, env=environment, cwd=str(site.parent)
    )
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout.splitlines()[-1]), shown.stderr


def test_an_edited_compiled_module_loads_from_source_says_so_and_computes_the_same(
    package_copy: Path,
) -> None:
    built, said = _run(package_copy)
    assert built["reason"] is None
    assert all(".so" in origin for origin in built["files"].values()), built["files"]
    assert "interpreted" not in said
    assert built["results"], "the topology produced nothing"

    serdes = package_copy / "fluvial" / "serdes.py"
    serdes.write_text(serdes.read_text() + "\nEDITED = True\n")
    edited, said = _run(package_copy)
    assert edited["reason"] == "fluvial/serdes.py changed since it was compiled"
    assert all(origin.endswith(".py") for origin in edited["files"].values()), edited["files"]
    assert edited["edited"] is True  # the edit itself runs, not the stale extension
    assert said.strip() == (
        "fluvial: running the engine interpreted (fluvial/serdes.py changed since it was "
        "compiled); `make setup` compiles it"
    )
    assert edited["results"] == built["results"]


def test_the_digest_decides_when_a_source_was_touched(package_copy: Path) -> None:
    records = package_copy / "fluvial" / "records.py"
    stat = records.stat()
    # Touched, same bytes (a checkout back and forth): still the compiled build.
    os.utime(records, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    shown, _ = _run(package_copy)
    assert shown["reason"] is None
    # Edited to the same size: the digest differs.
    records.write_text(records.read_text().replace("One record:", "One_record:", 1))
    assert records.stat().st_size == stat.st_size
    shown, _ = _run(package_copy)
    assert shown["reason"] == "fluvial/records.py changed since it was compiled"
    assert all(origin.endswith(".py") for origin in shown["files"].values())


def test_interpreted_on_request_and_required_compiled_refuses_to_start(
    package_copy: Path,
) -> None:
    built, _ = _run(package_copy)
    asked, said = _run(package_copy, FLUVIAL_INTERPRETED="1")
    assert asked["reason"] == "FLUVIAL_INTERPRETED=1 is set"
    assert all(origin.endswith(".py") for origin in asked["files"].values())
    assert "running the engine interpreted (FLUVIAL_INTERPRETED=1 is set)" in said
    assert asked["results"] == built["results"]

    (package_copy / "fluvial" / "_engine_build.py").unlink()
    environment = {**os.environ, "PYTHONPATH": str(package_copy), compiled.REQUIRE_ENV: "1"}
    environment.pop(compiled.INTERPRETED_ENV, None)
    shown = processes.run([sys.executable, "-c", "import fluvial"], timeout=120, env=environment)
    assert shown.returncode != 0
    assert (
        "the engine would run interpreted (it was installed without a compiled build) and "
        "FLUVIAL_REQUIRE_COMPILED=1 is set; run `make setup`" in shown.stderr
    )


def test_uv_rebuilds_when_any_compiled_source_changes() -> None:
    """Every compiled module's source is one of uv's cache keys: without it, an edit would not
    recompile at the next ``uv sync`` and the engine would run interpreted from then on."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    keys = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["cache-keys"]
    files = {key["file"] for key in keys if "file" in key}
    sources = {
        str(Path(compiled.source_path(module, str(root / "src" / "fluvial"))).relative_to(root))
        for module in compiled.MODULES
    }
    assert sources - files == set(), "add these to [tool.uv] cache-keys in pyproject.toml"


def test_every_compiled_abstract_class_keeps_its_own_isinstance_caches() -> None:
    """A compiled class derived from an ABC (the stores) is made without ``ABCMeta.__new__``: it
    must get ABC caches of its own, or ``isinstance`` answers about it poison its base's."""
    import abc
    import importlib
    from typing import Protocol

    shared = [
        f"{module}.{name}"
        for module in compiled.MODULES
        for name, value in vars(importlib.import_module(module)).items()
        if isinstance(value, abc.ABCMeta)
        and value.__module__ == module
        and Protocol not in value.__mro__  # never asked isinstance (not runtime-checkable)
        and "_abc_impl" not in vars(value)
    ]
    assert shared == [], "call fluvial.state.base.own_abc_bookkeeping on these"
