"""Dead letters of the Spark PostgreSQL writer, exactly once: an outbox table and a relay.

A micro-batch's bad rows are written into the outbox table (``fluvial_spark_dead_letters``)
in the same PostgreSQL transaction as its good rows, so they commit, or not, with the batch.
After the commit the driver *relays* them: one Kafka transaction per batch holds the batch's
dead letters and a marker naming the batch, in the compacted topic
``<sink_id>-dead-letter-batches``. Then the batch's outbox rows are deleted.

A driver that dies anywhere in between leaves the outbox rows behind, and the next batch (or
the replay of this one) relays them first:

- died before the Kafka commit: the relay's ``init_transactions`` aborts the open transaction
  (read_committed consumers never see it) and the batch is sent again;
- died after the Kafka commit: the last committed marker already names the batch, so its rows
  are only deleted.

The relay's transactional id, ``<sink_id>-dead-letters``, also fences a zombie driver: of two
drivers relaying the same batch, only the one that opened its producer last can commit.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, Producer
from psycopg import sql

from fluvial.config import StreamsConfig
from fluvial.errors import ConfigError, FluvialError
from fluvial.kafka.admin import TopicSpec, admin_client, create_topics
from fluvial.runtime.clients import producer_settings
from fluvial.sinks.dead_letters import (
    ERROR_HEADER,
    SPARK_HEADERS,
    check_dead_letter_topic,
    check_on_bad_row,
    produce_all,
)
from fluvial.spark.markers import BatchMarker, marker_partitions, read_markers

log = logging.getLogger("fluvial.spark.postgres")


@dataclass(frozen=True)
class DeadLetter:
    """One bad row on its way to the dead-letter topic."""

    key: bytes | None
    value: bytes
    error: str


class DeadLetterOutbox:
    """The outbox table of one sink and its relay to ``topic``."""

    def __init__(
        self,
        *,
        sink_id: str,
        topic: str,
        bootstrap_servers: str,
        client_config: Mapping[str, Any],
        table: tuple[str, ...],
        transaction_timeout_ms: int,
    ) -> None:
        self.sink_id = sink_id
        self.topic = topic
        self.bootstrap_servers = bootstrap_servers
        self.table = sql.Identifier(*table)
        self.marker_topic = f"{sink_id}-dead-letter-batches"
        self.transactional_id = f"{sink_id}-dead-letters"
        self.timeout_s = transaction_timeout_ms / 1000
        # Validates the client settings (a StreamsConfig refuses what it cannot use).
        self.config = StreamsConfig(
            application_id=sink_id,
            bootstrap_servers=bootstrap_servers,
            processing_guarantee="exactly_once_v2",
            client_config=dict(client_config),
        )

    def check(self) -> None:
        """Before the query starts: the cluster answers (a wrong password or CA fails here,
        clearly) and the dead-letter topic exists."""
        from fluvial.kafka.security import check_connection

        settings = self.config.client_config
        check_connection(self.bootstrap_servers, settings)
        admin = admin_client(self.bootstrap_servers, **settings)
        check_dead_letter_topic(admin, self.topic, self.bootstrap_servers)

    # -- PostgreSQL side ---------------------------------------------------------------------

    def create_table(self, conn: Any) -> None:
        from fluvial.sinks.store import _create_racing

        _create_racing(
            conn,
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, batch_id bigint NOT NULL, "
                "seq integer NOT NULL, key bytea, value bytea NOT NULL, error text NOT NULL, "
                "PRIMARY KEY (sink_id, batch_id, seq))"
            ).format(self.table),
        )

    def add(self, conn: Any, batch_id: int, letters: list[DeadLetter]) -> None:
        """Inside the batch's transaction: the letters commit exactly when its rows do."""
        statement = sql.SQL(
            "COPY {} (sink_id, batch_id, seq, key, value, error) FROM STDIN"
        ).format(self.table)
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for seq, letter in enumerate(letters):
                copy.write_row((self.sink_id, batch_id, seq, letter.key, letter.value,
                                letter.error))  # fmt: skip

    def pending(self, conn: Any) -> dict[int, list[DeadLetter]]:
        rows = conn.execute(
            sql.SQL(
                "SELECT batch_id, key, value, error FROM {} WHERE sink_id = %s "
                "ORDER BY batch_id, seq"
            ).format(self.table),
            [self.sink_id],
        ).fetchall()
        out: dict[int, list[DeadLetter]] = {}
        for batch_id, key, value, error in rows:
            out.setdefault(batch_id, []).append(
                DeadLetter(None if key is None else bytes(key), bytes(value), error)
            )
        return out

    # -- the relay ---------------------------------------------------------------------------

    def relay(self, conn: Any) -> int:
        """Send the dead letters of every committed batch still in the outbox, in batch order,
        one Kafka transaction per batch; returns how many were sent."""
        pending = self.pending(conn)
        if not pending:
            return 0
        self._ensure_marker_topic()
        settings = producer_settings(self.config, self.transactional_id)
        settings["client.id"] = f"{self.sink_id}-dead-letters-producer"
        producer = Producer(settings)
        sent = 0
        try:
            # Fences every earlier holder of the id (a dead or zombie driver) and aborts what it
            # left open, so the marker read next is final.
            producer.init_transactions(30)
            last = read_markers(self.config, self.marker_topic, [0], stable_only=True).get(0)
            for batch_id, letters in sorted(pending.items()):
                if last is not None and last.batch_id >= batch_id:
                    self._check_relayed(last, batch_id, letters)
                else:
                    producer.begin_transaction()
                    try:
                        self._produce_batch(producer, batch_id, letters)
                        producer.commit_transaction(self.timeout_s)
                    except BaseException:
                        with contextlib.suppress(KafkaException):
                            producer.abort_transaction(10)
                        raise
                    sent += len(letters)
                    log.info("sink %s: batch %d sent %d dead letter(s) to %s", self.sink_id,
                             batch_id, len(letters), self.topic)  # fmt: skip
                # Deleted batch by batch: at most the last one relayed can be pending again.
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE sink_id = %s AND batch_id = %s").format(
                        self.table
                    ),
                    [self.sink_id, batch_id],
                )
        except KafkaException as exc:
            raise FluvialError(
                f"sink {self.sink_id!r}: could not send dead letters to {self.topic!r} "
                f"({exc.args[0].str()}). Their batches are committed in PostgreSQL and the "
                f"letters wait in its table {self.table.as_string(conn)}; the next batch, or the "
                "restarted query, sends them"
            ) from exc
        finally:
            with contextlib.suppress(KafkaException):
                producer.flush(0)
        return sent

    def _produce_batch(self, producer: Producer, batch_id: int, letters: list[DeadLetter]) -> None:
        """The batch's letters and its marker, in the open transaction (not yet committed)."""
        headers = [
            (SPARK_HEADERS[0], self.sink_id.encode()),
            (SPARK_HEADERS[1], str(batch_id).encode()),
        ]
        failure = produce_all(
            producer, self.topic,
            [{"key": letter.key, "value": letter.value,
              "headers": [(ERROR_HEADER, letter.error.encode()), *headers]}
             for letter in letters],
        )  # fmt: skip
        marker = BatchMarker(batch_id, 1, len(letters))
        failure = failure or produce_all(
            producer, self.marker_topic,
            [{"key": b"0", "value": marker.encode(), "partition": 0}],
        )  # fmt: skip
        if failure is not None:
            raise FluvialError(
                f"sink {self.sink_id!r}: dead letters of batch {batch_id} were not delivered to "
                f"{self.topic!r} ({failure}); their transaction is aborted and they wait in "
                "PostgreSQL for the next attempt"
            )

    def _check_relayed(self, last: BatchMarker, batch_id: int, letters: list[DeadLetter]) -> None:
        # Batches are relayed in order and deleted one by one, so only the last batch relayed
        # can still be in the outbox. Anything else means the marker topic belongs to another
        # history of this sink_id (its batches table was reset): skipping would lose letters.
        if last.batch_id != batch_id or last.records != len(letters):
            raise FluvialError(
                f"sink {self.sink_id!r}: the dead letters of batch {batch_id} ({len(letters)}) "
                f"wait in PostgreSQL, but {self.marker_topic!r} says batch {last.batch_id} "
                f"({last.records} letters) was sent last. The marker topic does not belong to "
                "this sink's batches (was its batches table reset?): use a new sink_id"
            )

    def _ensure_marker_topic(self) -> None:
        if marker_partitions(self.config, self.marker_topic) == 0:
            spec = TopicSpec(self.marker_topic, 1, -1, {"cleanup.policy": "compact"})
            create_topics(
                self.bootstrap_servers, [spec], admin_config=dict(self.config.client_config)
            )


def check_bad_row_options(
    on_bad_row: str,
    dead_letter_topic: str | None,
    bootstrap_servers: str | None,
    client_config: Mapping[str, Any] | None,
) -> None:
    """Check the dead-letter options of a sink; raises :class:`ConfigError`."""
    check_on_bad_row(on_bad_row, dead_letter_topic, stopping="the query")
    if on_bad_row == "dead_letter" and not bootstrap_servers:
        raise ConfigError(
            "on_bad_row='dead_letter' needs bootstrap_servers: the Kafka cluster of "
            "dead_letter_topic"
        )
    if on_bad_row == "fail" and (bootstrap_servers or client_config):
        raise ConfigError(
            "bootstrap_servers and client_config are the dead-letter topic's Kafka settings, "
            "but on_bad_row='fail' sends nothing to Kafka: drop them, or set "
            "on_bad_row='dead_letter' and dead_letter_topic"
        )
