"""One three-broker cluster for the fault-matrix tests; scenarios may kill and restart its brokers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluvial.kafka.local import LocalKafka, free_port, port_is_free


@pytest.fixture(scope="module")
def three_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    port = free_port()
    while not all(port_is_free(p) for p in (port + 1, port + 2)):
        port = free_port()
    with LocalKafka(tmp_path_factory.mktemp("kafka3"), port=port, brokers=3, heap="512m") as c:
        yield c
