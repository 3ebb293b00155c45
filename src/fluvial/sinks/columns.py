"""From Kafka records to table rows: which columns a sink writes, and how each is decoded.

Keys and values are decoded with fluvial's serdes, in Kafka Streams' wire formats: ``string``,
``bytes``, ``long``, ``int``, ``double``, ``float`` and ``json``. A JSON value becomes columns when
a schema is declared (``"category string, period long"``); without one it is a ``jsonb`` column.
Windowed keys (time or session windows) become ``key``, ``window_start`` and ``window_end``.

Conversion is strict: a JSON string where a ``long`` is declared is a bad row, never a guess,
so the sink can send it to the dead-letter topic or stop on it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fluvial import serdes
from fluvial.errors import ConfigError, SerializationError
from fluvial.records import Windowed

SERDES = ("string", "bytes", "long", "int", "double", "float", "json")
_SERDE_TYPES = {
    "string": "text",
    "bytes": "bytea",
    "long": "bigint",
    "int": "integer",
    "double": "double precision",
    "float": "real",
    "json": "jsonb",
}
#: Types a JSON schema may declare, and their PostgreSQL column types.
FIELD_TYPES = {
    "string": "text",
    "text": "text",
    "long": "bigint",
    "bigint": "bigint",
    "int": "integer",
    "integer": "integer",
    "double": "double precision",
    "float": "real",
    "real": "real",
    "boolean": "boolean",
    "bool": "boolean",
    "json": "jsonb",
    "jsonb": "jsonb",
    "timestamp": "timestamptz",
    "timestamptz": "timestamptz",
}
#: Metadata columns every row carries: where its record came from.
META_COLUMNS = (
    ("kafka_topic", "text"),
    ("kafka_partition", "integer"),
    ("kafka_offset", "bigint"),
    ("kafka_timestamp", "timestamptz"),
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class BadRecord(Exception):
    """A record that cannot become a row; the message says why."""


@dataclass(frozen=True)
class Column:
    name: str
    pg_type: str


def parse_schema(schema: str | Mapping[str, str]) -> list[Column]:
    """``"category string, period long"`` (or a dict) as columns, checked."""
    if isinstance(schema, str):
        pairs = []
        for part in schema.split(","):
            words = part.split()
            if len(words) != 2:
                raise ConfigError(
                    f"value_schema part {part.strip()!r} is not 'name type': write the schema "
                    "as 'category string, period long'"
                )
            pairs.append((words[0], words[1]))
    else:
        pairs = list(schema.items())
    if not pairs:
        raise ConfigError("value_schema is empty: declare at least one 'name type'")
    columns = []
    for name, kind in pairs:
        if not _NAME.match(name):
            raise ConfigError(
                f"value_schema field {name!r} is not a plain column name (letters, digits, _)"
            )
        pg_type = FIELD_TYPES.get(kind.lower())
        if pg_type is None:
            raise ConfigError(
                f"value_schema field {name!r} has unknown type {kind!r}: use one of "
                f"{', '.join(sorted(FIELD_TYPES))}"
            )
        columns.append(Column(name, pg_type))
    return columns


def _serde(name: str, what: str) -> serdes.Serde[Any]:
    factories: dict[str, Callable[[], serdes.Serde[Any]]] = {
        "string": serdes.string,
        "bytes": serdes.bytes_,
        "long": serdes.long,
        "int": serdes.integer,
        "double": serdes.double,
        "float": serdes.float_,
        "json": serdes.json,
    }
    if name not in factories:
        raise ConfigError(f"{what}={name!r} is unknown: use one of {', '.join(SERDES)}")
    return factories[name]()


def millis_to_datetime(ms: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=ms)


class RowCodec:
    """Turns (key bytes, value bytes, metadata) into a row tuple in :attr:`columns` order."""

    def __init__(
        self,
        *,
        key_serde: str = "string",
        value_serde: str = "string",
        value_schema: str | Mapping[str, str] | None = None,
        window_size_ms: int | None = None,
        session_windows: bool = False,
    ) -> None:
        key = _serde(key_serde, "key_serde")
        self._value = _serde(value_serde, "value_serde")
        if window_size_ms is not None and session_windows:
            raise ConfigError(
                "window_size_ms and session_windows exclude each other: time windows carry "
                "only their start (give the size), session windows carry both bounds"
            )
        if window_size_ms is not None and window_size_ms <= 0:
            raise ConfigError(f"window_size_ms must be positive, got {window_size_ms}")
        self.windowed = window_size_ms is not None or session_windows
        if window_size_ms is not None:
            self._key = serdes.time_windowed(key, window_size_ms)
        elif session_windows:
            self._key = serdes.session_windowed(key)
        else:
            self._key = key
        self.key_columns = [Column("key", _SERDE_TYPES[key_serde])]
        if self.windowed:
            self.key_columns += [
                Column("window_start", "timestamptz"),
                Column("window_end", "timestamptz"),
            ]
        if value_schema is not None:
            if value_serde != "json":
                raise ConfigError(
                    f"value_schema needs value_serde='json' (got {value_serde!r}): only JSON "
                    "values have fields to turn into columns"
                )
            self.value_columns = parse_schema(value_schema)
        else:
            self.value_columns = [Column("value", _SERDE_TYPES[value_serde])]
        self._schema = value_schema is not None
        self._json_value = value_serde == "json"
        taken = {c.name for c in self.key_columns} | {name for name, _ in META_COLUMNS}
        clash = sorted({c.name for c in self.value_columns} & taken)
        if clash:
            raise ConfigError(
                f"value_schema fields {clash} clash with the sink's own columns (key, "
                "window_start, window_end and kafka_* are taken): rename them in the schema"
            )
        self.meta_columns = [Column(n, t) for n, t in META_COLUMNS]
        self.columns = self.key_columns + self.value_columns + self.meta_columns

    def key_part(self, topic: str, key: bytes | None) -> tuple[Any, ...]:
        """The key columns of a record (``key`` or ``key, window_start, window_end``)."""
        try:
            decoded = self._key.deserialize(topic, key)
        except SerializationError as exc:
            raise BadRecord(f"key: {exc}") from exc
        if not self.windowed:
            return (_adapt(decoded),)
        if decoded is None:
            return (None, None, None)
        assert isinstance(decoded, Windowed)
        window = decoded.window
        return (
            _adapt(decoded.key),
            millis_to_datetime(window.start_ms),
            millis_to_datetime(window.end_ms),
        )

    def value_part(self, topic: str, value: bytes | None) -> tuple[Any, ...]:
        """The value columns of a record; all ``None`` for a tombstone."""
        if value is None:
            return (None,) * len(self.value_columns)
        try:
            decoded = self._value.deserialize(topic, value)
        except SerializationError as exc:
            raise BadRecord(f"value: {exc}") from exc
        if not self._schema:
            return (_adapt(decoded) if self._json_value else decoded,)
        if not isinstance(decoded, dict):
            raise BadRecord(
                f"value: expected a JSON object for the declared schema, got "
                f"{type(decoded).__name__}"
            )
        return tuple(_convert(decoded.get(c.name), c) for c in self.value_columns)


def _adapt(obj: Any) -> Any:
    """JSON keys and schemaless JSON values go to ``jsonb``; everything else as it is."""
    if isinstance(obj, dict | list):
        from psycopg.types.json import Jsonb

        return Jsonb(obj)
    return obj


def _convert(value: Any, column: Column) -> Any:
    if value is None:
        return None
    kind = column.pg_type
    ok: bool
    if kind == "text":
        ok = isinstance(value, str)
    elif kind in ("bigint", "integer"):
        low, high = (_LONG_MIN, _LONG_MAX) if kind == "bigint" else (_INT_MIN, _INT_MAX)
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    elif kind in ("double precision", "real"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "jsonb":
        from psycopg.types.json import Jsonb

        return Jsonb(value)
    elif kind == "timestamptz":
        if isinstance(value, int) and not isinstance(value, bool):
            return millis_to_datetime(value)
        if isinstance(value, str):
            try:
                parsed = dt.datetime.fromisoformat(value)
            except ValueError:
                ok = False
            else:
                return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
        ok = False
    else:  # pragma: no cover - parse_schema admits only the types above
        raise AssertionError(kind)
    if not ok:
        raise BadRecord(
            f"value field {column.name!r}: {value!r} ({type(value).__name__}) is not a valid {kind}"
        )
    return value
