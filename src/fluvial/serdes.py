"""Serdes: how keys and values become bytes on a topic and in a store.

Every built-in serde writes the same bytes as its Kafka Streams (Java) counterpart, so a Java
consumer, the Kafka Streams reference implementation and fluvial read each other's topics
unchanged. ``None`` always maps to ``None`` in both directions: a tombstone stays a tombstone.

User-defined formats go through :meth:`Serde.of`::

    point = Serde.of(lambda p: f"{p.x},{p.y}".encode(), parse_point, name="point")

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). It calls user code in :meth:`Serde.of`'s functions and in users'
``Serde`` subclasses (which it allows), and checks what they return before the engine takes it.
"""

from __future__ import annotations

import json as _json
import re
import struct
import uuid as _uuid
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson
from mypy_extensions import mypyc_attr

from fluvial.errors import SerializationError
from fluvial.records import Window, Windowed

T = TypeVar("T")
K = TypeVar("K")

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_DOUBLE = struct.Struct(">d")
_FLOAT = struct.Struct(">f")
_MAX_LONG = 2**63 - 1


def _where(topic: str | None) -> str:
    return f"on topic {topic!r}" if topic is not None else "(no topic)"


# Compiled, Serde is a native class: users' own subclasses of it stay allowed.
@mypyc_attr(allow_interpreted_subclasses=True)
class Serde(Generic[T]):
    """A pair of functions between objects of type ``T`` and bytes.

    The functions never see ``None``: the serde passes tombstones through itself. Any exception
    they raise comes back as a :class:`SerializationError` that names the serde and the topic,
    because a bare ``struct.error`` from deep inside a topology tells nobody which record broke.
    """

    #: A windowed key serde's inner key serde, which places its records (else ``None``).
    windowed_inner: Serde[Any] | None = None

    def __init__(
        self,
        serialize_fn: Callable[[T], bytes],
        deserialize_fn: Callable[[bytes], T],
        name: str = "custom",
    ) -> None:
        self._serialize_fn: Callable[[str | None, T], bytes] = lambda _topic, obj: serialize_fn(obj)
        self._deserialize_fn: Callable[[str | None, bytes], T] = lambda _topic, data: (
            deserialize_fn(data)
        )
        # Topic-blind functions are called directly on the hot path (a frame less per record
        # and serde); ``_with_topic`` serdes clear them and go through the functions above.
        self._plain_serialize: Callable[[T], bytes] | None = serialize_fn
        self._plain_deserialize: Callable[[bytes], T] | None = deserialize_fn
        self.name = name

    @classmethod
    def _with_topic(
        cls,
        serialize_fn: Callable[[str | None, T], bytes],
        deserialize_fn: Callable[[str | None, bytes], T],
        name: str,
    ) -> Serde[T]:
        """A serde whose functions also see the topic: for wrappers that call an inner serde."""
        serde: Serde[T] = cls(bytes, bytes, name)  # type: ignore[arg-type]
        serde._serialize_fn = serialize_fn
        serde._deserialize_fn = deserialize_fn
        serde._plain_serialize = serde._plain_deserialize = None
        return serde

    @classmethod
    def of(
        cls,
        serialize_fn: Callable[[T], bytes],
        deserialize_fn: Callable[[bytes], T],
        name: str = "custom",
    ) -> Serde[T]:
        """Build a serde from two plain functions; ``name`` shows up in errors and ``describe``."""
        return cls(serialize_fn, deserialize_fn, name)

    def serialize(self, topic: str | None, obj: T | None) -> bytes | None:
        """Turn ``obj`` into bytes; ``None`` stays ``None``."""
        if obj is None:
            return None
        try:
            # Users' functions: what they return is checked below, not assumed to be bytes
            # (compiled, a result typed bytes would be refused before this serde can name it).
            plain: Callable[[T], object] | None = self._plain_serialize
            with_topic: Callable[[str | None, T], object] = self._serialize_fn
            data = plain(obj) if plain is not None else with_topic(topic, obj)
        except SerializationError:
            raise
        except Exception as exc:
            raise self._serialize_error(topic, obj, exc) from exc
        if not isinstance(data, bytes):
            if isinstance(data, bytearray | memoryview):
                return bytes(data)
            raise SerializationError(
                f"{self.name} serde {_where(topic)} returned {type(data).__name__}, "
                "expected bytes: a serialize function must return bytes"
            )
        return data

    def deserialize(self, topic: str | None, data: bytes | None) -> T | None:
        """Turn bytes back into an object; ``None`` stays ``None``."""
        if data is None:
            return None
        try:
            plain = self._plain_deserialize
            return plain(data) if plain is not None else self._deserialize_fn(topic, data)
        except SerializationError:
            raise
        except Exception as exc:
            raise self._deserialize_error(topic, data, exc) from exc

    def _serialize_error(self, topic: str | None, obj: Any, exc: Exception) -> SerializationError:
        return SerializationError(
            f"{self.name} serde {_where(topic)} could not serialize {obj!r}: {exc}"
        )

    def _deserialize_error(
        self, topic: str | None, data: bytes, exc: Exception
    ) -> SerializationError:
        return SerializationError(
            f"{self.name} serde {_where(topic)} could not deserialize {bytes(data)[:64]!r}: {exc}"
        )

    def __repr__(self) -> str:
        return f"Serde({self.name})"


class _FixedWidthError(ValueError):
    """Raised inside a fixed-width serde; the Serde wrapper adds name and topic."""


class _FixedWidthSerde(Serde[Any]):
    """A fixed-width number.

    The built-in serdes do their work inside ``serialize`` and ``deserialize``: one call per
    record and serde, where a serde of plain functions makes two.
    """

    def __init__(
        self, name: str, codec: struct.Struct, check: Callable[[Any], Any], exact: type
    ) -> None:
        self._width, self._pack, self._unpack = codec.size, codec.pack, codec.unpack
        self._check, self._exact = check, exact
        super().__init__(self._to_bytes, self._from_bytes, name)

    def _to_bytes(self, obj: Any) -> bytes:
        # The exact type passes the check unchanged: only other types go through it.
        data: bytes = self._pack(obj if type(obj) is self._exact else self._check(obj))
        return data

    def _from_bytes(self, data: bytes) -> Any:
        if len(data) != self._width:
            raise _FixedWidthError(f"expected {self._width} bytes, got {len(data)}")
        return self._unpack(data)[0]

    def serialize(self, topic: str | None, obj: Any) -> bytes | None:
        if obj is None:
            return None
        try:
            data: bytes = self._pack(obj if type(obj) is self._exact else self._check(obj))
        except Exception as exc:
            raise self._serialize_error(topic, obj, exc) from exc
        return data

    def deserialize(self, topic: str | None, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self._from_bytes(data) if len(data) != self._width else self._unpack(data)[0]
        except Exception as exc:
            raise self._deserialize_error(topic, data, exc) from exc


def _fixed(name: str, codec: struct.Struct, check: Callable[[Any], Any], exact: type) -> Serde[Any]:
    return _FixedWidthSerde(name, codec, check, exact)


def _check_int(obj: Any) -> int:
    # bool is an int subclass; a boolean reaching a long serde is almost always a bug upstream.
    if isinstance(obj, bool) or not isinstance(obj, int):
        raise TypeError(f"expected int, got {type(obj).__name__}")
    return obj


def _check_float(obj: Any) -> float:
    if isinstance(obj, bool) or not isinstance(obj, int | float):
        raise TypeError(f"expected float, got {type(obj).__name__}")
    return float(obj)


def long() -> Serde[int]:
    """8-byte big-endian signed integer (Java ``Serdes.Long()``)."""
    return _fixed("long", _LONG, _check_int, int)


def integer() -> Serde[int]:
    """4-byte big-endian signed integer (Java ``Serdes.Integer()``)."""
    return _fixed("integer", _INT, _check_int, int)


def short() -> Serde[int]:
    """2-byte big-endian signed integer (Java ``Serdes.Short()``)."""
    return _fixed("short", _SHORT, _check_int, int)


def double() -> Serde[float]:
    """8-byte big-endian IEEE 754 double (Java ``Serdes.Double()``)."""
    return _fixed("double", _DOUBLE, _check_float, float)


def float_() -> Serde[float]:
    """4-byte big-endian IEEE 754 float (Java ``Serdes.Float()``); loses precision."""
    return _fixed("float", _FLOAT, _check_float, float)


class _StringSerde(Serde[str]):
    def __init__(self) -> None:
        super().__init__(self._to_bytes, self._from_bytes, "string")

    @staticmethod
    def _to_bytes(obj: object) -> bytes:
        if not isinstance(obj, str):
            raise TypeError(f"expected str, got {type(obj).__name__}")
        return obj.encode("utf-8")

    @staticmethod
    def _from_bytes(data: bytes) -> str:
        return bytes(data).decode("utf-8")

    # ``obj: object``: what users pass is checked here (compiled, a ``str`` parameter would
    # refuse anything else before this serde could name it).
    def serialize(self, topic: str | None, obj: object) -> bytes | None:
        if obj is None:
            return None
        try:
            return obj.encode("utf-8") if type(obj) is str else self._to_bytes(obj)
        except Exception as exc:
            raise self._serialize_error(topic, obj, exc) from exc

    def deserialize(self, topic: str | None, data: bytes | None) -> str | None:
        if data is None:
            return None
        try:
            return (data if type(data) is bytes else bytes(data)).decode("utf-8")
        except Exception as exc:
            raise self._deserialize_error(topic, data, exc) from exc


def string() -> Serde[str]:
    """UTF-8 text (Java ``Serdes.String()``)."""
    return _StringSerde()


def bytes_() -> Serde[bytes]:
    """Raw bytes, unchanged (Java ``Serdes.ByteArray()``)."""

    def ser(obj: object) -> bytes:
        if not isinstance(obj, bytes | bytearray | memoryview):
            raise TypeError(f"expected bytes, got {type(obj).__name__}")
        return bytes(obj)

    return Serde(ser, bytes, "bytes")


byte_array = bytes_


# orjson writes what the standard library writes (sorted keys, compact separators, UTF-8 kept
# as is) for everything but a few floats and NaN/Infinity, and rejects what it cannot write the
# same way (integers beyond 64 bits, non-string keys, subclasses of the built-in types), so
# those go through the standard library instead and the bytes never change:
# - floats below 1e-4: the standard library writes ``1e-05``, orjson ``1e-5`` or ``0.00001``;
# - NaN and Infinity: the standard library writes ``NaN``/``Infinity``, orjson ``null``.
_ORJSON_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
_MAYBE_DIFFERENT = re.compile(rb"null|0\.0000|e-[0-9](?![0-9])").search
# orjson reads integers beyond 64 bits as floats, the standard library as ints: numbers of 19
# digits or more are read by the standard library. With every digit turned into "0" (one C pass),
# such a number is a run of 19 zeros, found by a substring search: a regular expression's search
# cost several times orjson's whole parse on documents full of timestamps.
_LONG_NUMBER = re.compile(rb"[0-9]{19}").search
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_NINETEEN_ZEROS = b"0" * 19
_orjson_dumps = orjson.dumps
_orjson_loads = orjson.loads
_OrjsonEncodeError = orjson.JSONEncodeError
_OrjsonDecodeError = orjson.JSONDecodeError


def _stdlib_json_bytes(obj: Any) -> bytes:
    return _json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode(
        "utf-8"
    )


# Values of these exact types hold no float, so orjson's bytes for them need no search.
_FLOAT_FREE = frozenset({str, int, bool, type(None)})
#: How deep :func:`_holds_no_float` looks into lists and dicts before it leaves the answer to
#: the search of the bytes.
_FLOAT_FREE_DEPTH = 4


def _holds_no_float(obj: Any, depth: int) -> bool:
    """Whether ``obj`` is made of str, int, bool and None in dicts, lists and tuples (at most
    ``depth`` levels deep): then orjson's bytes are the standard library's, with no search."""
    kind = type(obj)
    if kind in _FLOAT_FREE:
        return True
    if depth == 0:
        return False
    if kind is dict:
        for value in obj.values():
            if type(value) not in _FLOAT_FREE and not _holds_no_float(value, depth - 1):
                return False
        return True
    if kind is list or kind is tuple:
        for item in obj:
            if type(item) not in _FLOAT_FREE and not _holds_no_float(item, depth - 1):
                return False
        return True
    return False


class _JsonSerde(Serde[Any]):
    # Both methods are its own: the base class's plain functions are never called.
    def __init__(self) -> None:
        self.name = "json"

    def serialize(self, topic: str | None, obj: Any) -> bytes | None:
        if obj is None:
            return None
        try:
            data: bytes = _orjson_dumps(obj, option=_ORJSON_OPTIONS)
        except _OrjsonEncodeError:
            pass
        else:
            # The common cases, scalars and containers of them without floats: no search.
            if _holds_no_float(obj, _FLOAT_FREE_DEPTH) or _MAYBE_DIFFERENT(data) is None:
                return data
        try:
            return _stdlib_json_bytes(obj)
        except Exception as exc:
            raise self._serialize_error(topic, obj, exc) from exc

    def deserialize(self, topic: str | None, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            if len(data) < 19 or (
                _NINETEEN_ZEROS not in data.translate(_DIGITS_AS_ZERO)
                if type(data) is bytes
                else _LONG_NUMBER(data) is None
            ):
                try:
                    return _orjson_loads(data)
                except _OrjsonDecodeError:
                    pass  # what orjson refuses (NaN, lone surrogates, 1e400), the stdlib reads
            return _json.loads(bytes(data).decode("utf-8"))
        except Exception as exc:
            raise self._deserialize_error(topic, data, exc) from exc


def json() -> Serde[Any]:
    """Compact UTF-8 JSON with sorted keys.

    Sorted keys and fixed separators make equal objects serialize to equal bytes, which matters
    for keys: two dicts that compare equal must land in the same partition and store slot.
    The bytes are those of ``json.dumps(obj, separators=(",", ":"), sort_keys=True,
    ensure_ascii=False)``; orjson writes them where it writes the same.
    """
    return _JsonSerde()


def uuid() -> Serde[_uuid.UUID]:
    """A UUID as its canonical 36-character string (Java ``Serdes.UUID()``)."""
    return Serde(
        lambda obj: str(obj).encode("ascii"),
        lambda data: _uuid.UUID(bytes(data).decode("ascii")),
        "uuid",
    )


def void() -> Serde[None]:
    """Only ``None`` (Java ``Serdes.Void()``): for topics whose keys or values are always null."""

    def ser(obj: Any) -> bytes:
        raise TypeError("the void serde only accepts None")

    def de(data: bytes) -> None:
        raise ValueError(f"the void serde only accepts null data, got {len(data)} bytes")

    return Serde(ser, de, "void")


class _TimeWindowedSerde(Serde[Windowed[Any]]):
    # Both methods are its own: the base class's plain functions are never called.
    def __init__(self, inner: Serde[Any], window_size_ms: int) -> None:
        self.name = f"time_windowed({inner.name})"
        self.inner = inner
        # Kafka Streams places a windowed key by its inner key (WindowedStreamPartitioner).
        self.windowed_inner = inner
        self.window_size_ms = window_size_ms

    def serialize(self, topic: str | None, obj: object) -> bytes | None:
        if obj is None:
            return None
        try:
            windowed = _windowed(obj)
            return _inner_bytes(self.inner, topic, windowed, self.name) + _LONG.pack(
                windowed.window.start_ms
            )
        except SerializationError:
            raise
        except Exception as exc:
            raise self._serialize_error(topic, obj, exc) from exc

    def deserialize(self, topic: str | None, data: bytes | None) -> Windowed[Any] | None:
        if data is None:
            return None
        try:
            if len(data) < 8:
                raise _FixedWidthError(f"expected at least 8 bytes, got {len(data)}")
            key = self.inner.deserialize(topic, data[:-8])
            start = _LONG.unpack(data[-8:])[0]
            return Windowed(key, Window(start, min(start + self.window_size_ms, _MAX_LONG)))
        except SerializationError:
            raise
        except Exception as exc:
            raise self._deserialize_error(topic, data, exc) from exc


def builtin_time_windowed_inner(serde: Serde[Any] | None) -> Serde[Any] | None:
    """The inner serde of a time-windowed ``serde`` over a built-in string, number or JSON serde
    (which raise their own errors and whose bytes never depend on the topic), else ``None``.
    Such a serde writes a windowed key as the inner bytes, then the 8-byte window start."""
    if type(serde) is not _TimeWindowedSerde:
        return None
    inner = serde.inner
    return inner if type(inner) in _TOPIC_FREE else None


def same_bytes(a: Serde[Any], b: Serde[Any] | None) -> bool:
    """Whether two serdes write the same bytes for every object, on any topic."""
    return a is b or (type(a) is type(b) and type(a) in _TOPIC_FREE and a.name == b.name)  # type: ignore[union-attr]


_TOPIC_FREE = (_StringSerde, _FixedWidthSerde, _JsonSerde)


def time_windowed(inner: Serde[K], window_size_ms: int) -> Serde[Windowed[K]]:
    """Keys of time windows: inner key bytes, then the 8-byte big-endian window start.

    The end is not on the wire; it is recomputed as start + ``window_size_ms`` (capped at the
    largest long, as Java does), so reader and writer must agree on the window size.
    """
    if window_size_ms <= 0:
        raise ValueError(f"window_size_ms must be positive, got {window_size_ms}")
    return _TimeWindowedSerde(inner, window_size_ms)


def session_windowed(inner: Serde[K]) -> Serde[Windowed[K]]:
    """Keys of session windows: inner key bytes, 8-byte BE end, then 8-byte BE start.

    End before start is the layout of Kafka Streams' session key schema; keep it.
    """
    name = f"session_windowed({inner.name})"

    def ser(topic: str | None, obj: object) -> bytes:
        windowed = _windowed(obj)
        window = windowed.window
        return (
            _inner_bytes(inner, topic, windowed, name)
            + _LONG.pack(window.end_ms)
            + _LONG.pack(window.start_ms)
        )

    def de(topic: str | None, data: bytes) -> Windowed[K]:
        if len(data) < 16:
            raise _FixedWidthError(f"expected at least 16 bytes, got {len(data)}")
        key = inner.deserialize(topic, data[:-16])
        end = _LONG.unpack(data[-16:-8])[0]
        start = _LONG.unpack(data[-8:])[0]
        return Windowed(key, Window(start, end))  # type: ignore[arg-type]

    serde = Serde._with_topic(ser, de, name)
    serde.windowed_inner = inner  # see _TimeWindowedSerde
    return serde


def _windowed(obj: object) -> Windowed[Any]:
    """What a user passed to a windowed serde, checked (it is typed ``object`` for that)."""
    if type(obj) is not Windowed and not isinstance(obj, Windowed):
        raise TypeError(f"expected Windowed, got {type(obj).__name__}")
    return obj


def _inner_bytes(inner: Serde[K], topic: str | None, windowed: Windowed[Any], name: str) -> bytes:
    data = inner.serialize(topic, windowed.key)
    if data is None:
        raise ValueError(f"{name} cannot serialize a windowed key whose inner key is None")
    return data


__all__ = [
    "Serde",
    "byte_array",
    "bytes_",
    "double",
    "float_",
    "integer",
    "json",
    "long",
    "session_windowed",
    "short",
    "string",
    "time_windowed",
    "uuid",
    "void",
]
