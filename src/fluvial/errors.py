"""Errors fluvial raises. Each names the problem and, where there is one, the fix."""


class FluvialError(Exception):
    """Base class of every fluvial error."""


class ConfigError(FluvialError):
    """Invalid configuration, found before anything starts."""


class StateLossError(ConfigError):
    """A new deployment would leave committed state behind (a store or repartition topic the
    last deployment used), or recreate a missing internal topic empty; found before anything
    is created. ``fluvial upgrade`` or ``--allow-state-loss`` are the ways on."""


class TopologyError(FluvialError):
    """An invalid topology, found at ``StreamsBuilder.build()``."""


class SerializationError(FluvialError):
    """A record that could not be serialized or deserialized."""


class StreamsError(FluvialError):
    """A fatal error while processing; the application stops without committing past it."""


class BufferFullError(StreamsError):
    """A suppression buffer filled up and its policy is to shut down."""


class KafkaSetupError(FluvialError):
    """The local Apache Kafka could not be provisioned or started."""


class CoPartitioningError(StreamsError):
    """A joined or table topic holds records on other partitions than Java's partitioner gives
    their keys (``co_partitioning_check="fail"``). Restarting cannot help: the records stay."""


class ChangelogGapError(StreamsError):
    """A changelog lost records its store still needs: restoring would come back short.

    Restarting cannot help, so engines stop the application instead of retrying.
    """
