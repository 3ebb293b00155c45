"""The Nexmark queries, one module each: ``build(builder, topics, output)`` and ``oracle(events)``.

- ``build`` adds the query to a ``StreamsBuilder``: it reads the input topics named in
  ``topics`` (``person``, ``auction``, ``bid``: see :func:`fluvial.bench.nexmark.model.topics`)
  and writes its results to ``output``;
- ``oracle`` computes the query's expected final result per output key, in plain Python, from
  the generated events (a list of dicts, in generation order). Queries whose results depend on
  where the input's partitions stand at its end (auctions or windows still open) also take
  ``partitions``.

The module docstrings state each query's mapping from the Nexmark SQL and what differs.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from fluvial.bench.nexmark.queries import (
    q0,
    q1,
    q2,
    q3,
    q4,
    q5,
    q6,
    q7,
    q8,
    q9,
    q11,
    q12,
    q13,
    q14,
    q15,
    q16,
    q17,
    q18,
    q19,
    q20,
    q21,
    q22,
)

QUERIES: dict[str, ModuleType] = {}
QUERIES["q0"] = q0
QUERIES["q1"] = q1
QUERIES["q2"] = q2
QUERIES["q3"] = q3
QUERIES["q4"] = q4
QUERIES["q5"] = q5
QUERIES["q6"] = q6
QUERIES["q7"] = q7
QUERIES["q8"] = q8
QUERIES["q9"] = q9
QUERIES.update(
    q11=q11, q12=q12, q13=q13, q14=q14, q15=q15, q16=q16, q17=q17, q18=q18, q19=q19, q20=q20,
    q21=q21, q22=q22,
)  # fmt: skip


def expected(query: ModuleType, events: list[dict[str, Any]], partitions: int) -> Any:
    """The query's oracle on ``events`` (with ``partitions`` if it takes them)."""
    if "partitions" in inspect.signature(query.oracle).parameters:
        return query.oracle(events, partitions=partitions)
    return query.oracle(events)
