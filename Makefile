# fluvial: the two commands a fresh machine needs are `make test` and `make demo`.
UV ?= uv
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: setup jars lint format typecheck test test-fast demo clean

setup:  ## install the Python environment (uv) and resolve the Kafka and Spark jars once
	$(UV) sync --frozen --group bench
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

test: setup lint  ## lint, then the whole suite (unit + integration on local Kafka and Spark)
	$(UV) run pytest

test-fast: setup  ## the suite without tests marked slow
	$(UV) run pytest -m "not slow"

demo: setup  ## Figure 2 on Spark under exactly-once, crashed part-way, checked by a Spark batch job
	$(UV) run fluvial demo

clean:
	rm -rf .pytest_cache .ruff_cache .mypy_cache
