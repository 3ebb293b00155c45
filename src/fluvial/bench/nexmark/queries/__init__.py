"""The Nexmark queries, one module each: ``build(builder, topics, output)`` and ``oracle(events)``."""

from __future__ import annotations

from types import ModuleType

from fluvial.bench.nexmark.queries import q11

QUERIES: dict[str, ModuleType] = {}
QUERIES["q11"] = q11
