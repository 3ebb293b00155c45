"""A private PostgreSQL for the sink tests: one cluster per session, on 127.0.0.1."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import psycopg
import pytest

from fluvial.kafka import free_port
from fluvial.sinks.local import LocalPostgres


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """The session's PostgreSQL (Debian's server binaries, initdb + pg_ctl), stopped and
    removed at the end. As root, the server runs as the 'postgres' user."""
    with LocalPostgres(port=free_port(), durable=False) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def pg_dsn(postgres: LocalPostgres) -> str:
    return postgres.dsn


@pytest.fixture
def table_name(unique_name: Callable[[str], str]) -> Callable[[str], str]:
    """Unique, unquoted-safe table names: ``table_name("views")``."""
    return lambda label="t": re.sub(r"[^a-z0-9_]", "_", unique_name(label).lower())[:60]


def query(dsn: str, statement: str, args: list | None = None) -> list[tuple]:
    """Run one statement; its rows, or [] for a statement that returns none."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, args)
        return cur.fetchall() if cur.description is not None else []
