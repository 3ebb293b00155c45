# fluvial: the two commands a fresh machine needs are `make test` and `make demo`.
# uv is installed into .tools/ from PyPI when it is not on PATH, so a machine with only Python,
# Java and Maven can run both commands.
UV_VERSION := 0.13.9
UV ?= $(or $(shell command -v uv 2>/dev/null),$(CURDIR)/.tools/bin/uv)
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: setup jars lint format typecheck docs test test-fast soak demo clean

$(CURDIR)/.tools/bin/uv:
	python3 -m venv $(CURDIR)/.tools
	$(CURDIR)/.tools/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# Bytecode is compiled at install, fluvial's own sources included: a machine that sets
# PYTHONDONTWRITEBYTECODE (containers often do) would otherwise compile every module again in
# each process it starts (about 0.4 s of CPU for an application, a worker or a test's child).
setup: $(UV)  ## install the Python environment (uv) and resolve the Kafka and Spark jars once
	$(UV) sync --frozen --group bench --group docs --compile-bytecode
	$(UV) run --no-sync python -m compileall -q src/fluvial
	$(UV) run python -m fluvial.jvm

jars: setup

lint:  ## ruff lint and format check
	$(UV) run ruff check src tests
	$(UV) run ruff format --check src tests

format:
	$(UV) run ruff format src tests
	$(UV) run ruff check --fix src tests

typecheck:
	$(UV) run mypy src/fluvial

docs: setup  ## the guides and the API reference into site/; fails on a broken reference or an undocumented public name
	$(UV) run mkdocs build --strict

CAN_COMPILE := 'import fluvial.compiled as c; print(0 if c.cannot_compile() else 1)'
# The semantics suite (TopologyTestDriver): run a second time on the interpreted engine.
SEMANTICS := tests/dsl tests/processor tests/testing

test: setup lint docs  ## lint, build the docs, then the whole suite (unit + integration on local Kafka and Spark)
	@# Where a C compiler exists the engine must be compiled: a missing or stale build fails.
	FLUVIAL_REQUIRE_COMPILED=$$($(UV) run --no-sync python -c $(CAN_COMPILE)) $(UV) run pytest
	FLUVIAL_INTERPRETED=1 FLUVIAL_REQUIRE_COMPILED= $(UV) run pytest $(SEMANTICS)

test-fast: setup  ## the suite without tests marked slow
	$(UV) run pytest -m "not slow and not soak"

soak: setup  ## the long fault runs and engine variants kept out of `make test` (`fluvial verify` runs longer ones)
	FLUVIAL_REQUIRE_COMPILED=$$($(UV) run --no-sync python -c $(CAN_COMPILE)) $(UV) run pytest -m soak

demo: setup  ## Figure 2 on Spark under exactly-once, crashed part-way, checked by a Spark batch job
	$(UV) run fluvial demo

clean:
	rm -rf .pytest_cache .ruff_cache .mypy_cache site
