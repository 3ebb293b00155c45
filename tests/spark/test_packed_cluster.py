"""A Spark cluster whose workers lack fluvial: ``fluvial run --master spark://…`` ships it.

The standalone cluster's workers, and the driver's own ``PYSPARK_PYTHON``, are a bare virtual
environment without fluvial, confluent-kafka or rocksdict: without the packed environment
(``fluvial pack``, shipped through ``spark.archives``) no slot could even import fluvial.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
import venv
from pathlib import Path

import pytest
from tests.runtime.harness import (
    SparkRunner,
    check_revisions_exactly_once,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    wait_until,
)
from tests.spark.standalone import standalone_cluster

from fluvial import compiled
from fluvial.spark import pack
from fluvial.spark.pack import (
    ENV_NAME,
    STALE_AFTER_S,
    Packed,
    ensure_packed,
    runtime_distributions,
    shipping_conf,
)

NEEDED = ("fluvial", "confluent_kafka", "rocksdict")


def bare_python(directory: Path) -> Path:
    """A virtual environment of the base interpreter with nothing installed."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(directory)
    return directory / "bin" / "python"


def without_this_environment(python: Path) -> dict[str, str]:
    """This process's environment with its virtualenv out of sight, ``python`` as PySpark's."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    ours = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    env["PYSPARK_PYTHON"] = str(python)
    return env


@pytest.mark.slow
def test_pack_holds_fluvial_and_its_compiled_dependencies_and_is_reused() -> None:
    names = {d.metadata["Name"].lower().replace("_", "-") for d in runtime_distributions()}
    assert {"confluent-kafka", "rocksdict", "typer"} <= names
    assert not names & {"pyspark", "py4j", "fluvial", "pytest"}  # the cluster's, or not needed
    first = ensure_packed()
    again = ensure_packed()
    assert not again.built and again.archive == first.archive
    with tarfile.open(first.archive) as archive:
        members = set(archive.getnames())
    site = "lib/python{}.{}/site-packages".format(*sys.version_info[:2])
    assert f"{site}/fluvial/spark/slots.py" in members
    assert any(m.startswith(f"{site}/confluent_kafka/cimpl") for m in members)
    assert any(m.startswith(f"{site}/rocksdict/") and m.endswith(".so") for m in members)
    assert not any(m.startswith(f"{site}/pyspark/") for m in members)
    if compiled.reason is None:  # the compiled engine goes along: extensions, record, library
        suffix = compiled._build_record().SUFFIX
        for module in compiled.MODULES:
            assert f"{site}/{module.replace('.', '/')}{suffix}" in members
        assert f"{site}/fluvial/_engine_build.py" in members
        assert f"{site}/{compiled.GROUP_LIBRARY}{suffix}" in members
    assert shipping_conf(first, {"spark.archives": "a.zip#a"}) == {
        "spark.archives": f"a.zip#a,{first.archive}#{ENV_NAME}"
    }


def test_the_fingerprint_covers_the_compiled_engine(tmp_path: Path, monkeypatch) -> None:
    """An archive is reused only for the same build: a rebuilt extension or group library
    (same sources, other compiler or flags) makes a new one."""
    package = tmp_path / "site" / "fluvial"
    (package / "processor").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    extension = package / "processor" / "task.cpython-311-x86_64-linux-gnu.so"
    library = tmp_path / "site" / f"{compiled.GROUP_LIBRARY}.cpython-311-x86_64-linux-gnu.so"
    extension.write_bytes(b"one build")
    library.write_bytes(b"one build")
    monkeypatch.setattr(pack, "_fluvial_package_dir", lambda: package)
    seen = {pack.fingerprint([])}
    extension.write_bytes(b"another build")
    seen.add(pack.fingerprint([]))
    library.write_bytes(b"another build")
    seen.add(pack.fingerprint([]))
    assert len(seen) == 3


@pytest.mark.slow
def test_a_new_pack_removes_stale_archives_but_none_a_driver_ships(tmp_path: Path) -> None:
    old = time.time() - STALE_AFTER_S - 60
    stale, held, recent = (tmp_path / f"fluvial-env-{n}.tar.gz" for n in ("a", "b", "c"))
    for path in (stale, held, recent):
        path.write_bytes(b"an archive of an older environment")
    for path in (stale, held):
        os.utime(path, (old, old))
    holder = Packed(held, "b", (), built=False).hold()  # a running driver ships this one
    try:
        packed = ensure_packed(directory=tmp_path)
    finally:
        holder.close()
    assert packed.built and packed.archive.is_file()
    assert not stale.exists()
    assert held.exists() and recent.exists()
    assert oct(packed.archive.stat().st_mode & 0o777) == oct(0o644)


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_figure2_on_a_cluster_whose_workers_lack_fluvial(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    bare = bare_python(tmp_path / "bare-python")
    env = without_this_environment(bare)
    for module in NEEDED:
        missing = subprocess.run([bare, "-c", f"import {module}"], env=env, capture_output=True)
        assert missing.returncode != 0, f"the workers' Python must lack {module}"
    # Built once (or reused) beside the run, which then reuses it.
    packed = subprocess.run(
        [sys.executable, "-m", "fluvial.cli", "pack"], capture_output=True, text=True, timeout=300
    )
    assert packed.returncode == 0, packed.stderr
    archive = Path(packed.stdout.strip())
    assert archive.is_file()

    views = generate_views(seed=17, count=2400)
    oracle, dropped = oracle_counts(views)
    assert dropped > 0
    with standalone_cluster(
        tmp_path / "cluster", env=env, worker_env={"SPARK_DAEMON_MEMORY": "256m"},
        worker_memory="768m",
    ) as cluster:  # fmt: skip
        runner = SparkRunner(
            bootstrap_servers, unique_name("packed"), topic_factory("pageviews"),
            topic_factory("counts"), tmp_path / "driver", commit_ms=300,
            master=cluster.master_url,
            # The executors' Python unless fluvial ships its own: the bare one.
            # Where the driver runs the compiled engine, the executors must run it too, from
            # the archive (an interpreted fallback there would be an error, not a slow run).
            extra_env={"PYSPARK_PYTHON": str(bare),
                       "FLUVIAL_SPARK_CONF": "spark.executor.memory=512m"
                       + (f",spark.executorEnv.{compiled.REQUIRE_ENV}=1"
                          if compiled.reason is None else "")},
        )  # fmt: skip
        runner.start()
        try:
            runner.wait_ready(180)
            assert f"executors run Python from {archive.name} (reused" in runner.output()
            produce(bootstrap_servers, runner.input_topic, views[:1200])
            wait_until(lambda: len([e for e in runner.leases() if "slots" in e]) >= 2, 180,
                       "two leases")  # fmt: skip
            produce(bootstrap_servers, runner.input_topic, views[1200:])
            wait_until(
                lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
                180,
                "the committed output to reach the oracle's final counts",
            )
        finally:
            code = runner.stop()
        assert code == 0, runner.output()[-5000:]
        check_revisions_exactly_once(read_revisions(bootstrap_servers, runner.output_topic), oracle)
        pythons = {s["python"] for e in runner.leases() if "slots" in e for s in e["slots"]}
        work_dirs = [str(d) for d in cluster.work_dirs.values()]
        assert pythons, runner.leases()
        for python in pythons:
            assert f"/{ENV_NAME}/bin/python" in python, python
            assert python.startswith(tuple(work_dirs)), f"{python} is not an executor's"
