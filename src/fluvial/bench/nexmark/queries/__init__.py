"""The Nexmark queries, one module each: ``build(builder, topics, output)`` and ``oracle(events)``."""

from __future__ import annotations

from types import ModuleType

from fluvial.bench.nexmark.queries import q11, q12, q13, q14, q15, q16, q17, q18, q19, q20, q21, q22

QUERIES: dict[str, ModuleType] = {}
QUERIES.update(
    q11=q11, q12=q12, q13=q13, q14=q14, q15=q15, q16=q16, q17=q17, q18=q18, q19=q19, q20=q20,
    q21=q21, q22=q22,
)  # fmt: skip
