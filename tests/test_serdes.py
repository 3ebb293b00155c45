"""Serdes write exactly the bytes Kafka Streams' Java serdes write."""

from __future__ import annotations

import json as stdlib_json
import math
import random
import uuid

import pytest

from fluvial import serdes
from fluvial.errors import SerializationError
from fluvial.records import Window, Windowed
from fluvial.serdes import Serde


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, b"\x00" * 8),
        (1, b"\x00" * 7 + b"\x01"),
        (-1, b"\xff" * 8),
        (256, b"\x00" * 6 + b"\x01\x00"),
        (2**63 - 1, b"\x7f" + b"\xff" * 7),
        (-(2**63), b"\x80" + b"\x00" * 7),
    ],
)
def test_long_is_8_byte_big_endian_signed(value, expected):
    serde = serdes.long()
    assert serde.serialize("t", value) == expected
    assert serde.deserialize("t", expected) == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, b"\x00\x00\x00\x01"), (-2, b"\xff\xff\xff\xfe"), (2**31 - 1, b"\x7f\xff\xff\xff")],
)
def test_integer_is_4_byte_big_endian_signed(value, expected):
    assert serdes.integer().serialize("t", value) == expected
    assert serdes.integer().deserialize("t", expected) == value


def test_short_is_2_byte_big_endian():
    assert serdes.short().serialize(None, -2) == b"\xff\xfe"
    assert serdes.short().deserialize(None, b"\x01\x00") == 256


def test_double_is_ieee754_big_endian():
    serde = serdes.double()
    assert serde.serialize("t", 1.0) == b"\x3f\xf0" + b"\x00" * 6
    assert serde.serialize("t", -2.5) == b"\xc0\x04" + b"\x00" * 6
    assert serde.serialize("t", 3) == serde.serialize("t", 3.0)
    assert serde.deserialize("t", b"\x40\x09\x21\xfb\x54\x44\x2d\x18") == math.pi
    assert math.isnan(serde.deserialize("t", serde.serialize("t", math.nan)))


def test_float_is_4_byte_ieee754():
    assert serdes.float_().serialize(None, 1.0) == b"\x3f\x80\x00\x00"
    assert serdes.float_().deserialize(None, b"\xc0\x20\x00\x00") == -2.5


def test_string_is_utf8():
    serde = serdes.string()
    assert serde.serialize("t", "héllo") == b"h\xc3\xa9llo"
    assert serde.deserialize("t", b"h\xc3\xa9llo") == "héllo"
    assert serde.serialize("t", "") == b""
    assert serde.deserialize("t", b"") == ""


def test_bytes_pass_through():
    for serde in (serdes.bytes_(), serdes.byte_array()):
        assert serde.serialize("t", b"\x00\xff") == b"\x00\xff"
        assert serde.serialize("t", bytearray(b"ab")) == b"ab"
        assert serde.deserialize("t", b"\x00\xff") == b"\x00\xff"


def test_json_is_compact_sorted_and_deterministic():
    serde = serdes.json()
    assert serde.serialize("t", {"b": 1, "a": [1, 2], "c": "é"}) == (
        b'{"a":[1,2],"b":1,"c":"\xc3\xa9"}'
    )
    assert serde.serialize("t", {"x": 1, "y": 2}) == serde.serialize("t", {"y": 2, "x": 1})
    assert serde.deserialize("t", b'{"period":40000}') == {"period": 40000}


def test_uuid_is_its_canonical_string():
    value = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert serdes.uuid().serialize(None, value) == b"12345678-1234-5678-1234-567812345678"
    assert serdes.uuid().deserialize(None, b"12345678-1234-5678-1234-567812345678") == value


@pytest.mark.parametrize(
    "serde",
    [
        serdes.long(),
        serdes.integer(),
        serdes.double(),
        serdes.string(),
        serdes.bytes_(),
        serdes.json(),
        serdes.void(),
        serdes.time_windowed(serdes.string(), 10),
        serdes.session_windowed(serdes.string()),
    ],
    ids=lambda s: s.name,
)
def test_tombstones_pass_through(serde):
    assert serde.serialize("t", None) is None
    assert serde.deserialize("t", None) is None


def test_void_rejects_data():
    with pytest.raises(SerializationError, match="void"):
        serdes.void().deserialize("t", b"x")
    with pytest.raises(SerializationError, match="void"):
        serdes.void().serialize("t", 1)


def test_time_windowed_key_is_key_then_start():
    serde = serdes.time_windowed(serdes.string(), 5000)
    windowed = Windowed("k1", Window(10_000, 15_000))
    data = serde.serialize("t", windowed)
    assert data == b"k1" + b"\x00\x00\x00\x00\x00\x00\x27\x10"
    assert serde.deserialize("t", data) == windowed


def test_time_windowed_end_comes_from_the_window_size():
    serde = serdes.time_windowed(serdes.long(), 100)
    data = b"\x00" * 7 + b"\x07" + b"\x00" * 7 + b"\x64"
    assert serde.deserialize("t", data) == Windowed(7, Window(100, 200))


def test_time_windowed_end_is_capped_at_max_long():
    serde = serdes.time_windowed(serdes.string(), 1000)
    windowed = serde.deserialize("t", b"k" + b"\x7f" + b"\xff" * 7)
    assert windowed.window.end_ms == 2**63 - 1


def test_session_windowed_key_is_key_then_end_then_start():
    serde = serdes.session_windowed(serdes.string())
    windowed = Windowed("user", Window(1, 258))
    data = serde.serialize("t", windowed)
    assert data == b"user" + b"\x00" * 6 + b"\x01\x02" + b"\x00" * 7 + b"\x01"
    assert serde.deserialize("t", data) == windowed


def test_windowed_serde_rejects_short_data():
    with pytest.raises(SerializationError, match="expected at least 16 bytes, got 5"):
        serdes.session_windowed(serdes.string()).deserialize("t", b"12345")


def test_wrong_width_names_serde_topic_and_cause():
    with pytest.raises(SerializationError) as error:
        serdes.long().deserialize("x", b"\x00\x00\x01")
    message = str(error.value)
    assert "long serde on topic 'x'" in message
    assert "expected 8 bytes, got 3" in message


def test_wrong_type_names_serde_and_topic():
    with pytest.raises(SerializationError, match=r"string serde on topic 'clicks'.*expected str"):
        serdes.string().serialize("clicks", 42)
    with pytest.raises(SerializationError, match="long serde.*expected int"):
        serdes.long().serialize("t", True)
    with pytest.raises(SerializationError, match="integer serde"):
        serdes.integer().serialize("t", 2**31)


def test_invalid_utf8_and_json_raise_serialization_errors():
    with pytest.raises(SerializationError, match="string serde"):
        serdes.string().deserialize("t", b"\xff\xfe")
    with pytest.raises(SerializationError, match="json serde"):
        serdes.json().deserialize("t", b"{not json")
    with pytest.raises(SerializationError, match="json serde"):
        serdes.json().serialize("t", {1, 2})


def test_custom_serde_from_two_functions():
    point = Serde.of(
        lambda p: f"{p[0]},{p[1]}".encode(),
        lambda data: tuple(int(x) for x in data.decode().split(",")),
        name="point",
    )
    assert point.name == "point"
    assert point.serialize("t", (1, -2)) == b"1,-2"
    assert point.deserialize("t", b"1,-2") == (1, -2)
    assert point.serialize("t", None) is None
    with pytest.raises(SerializationError, match="point serde on topic 't'"):
        point.deserialize("t", b"nope")


def test_custom_serde_must_return_bytes():
    bad: Serde[str] = Serde.of(lambda s: s, lambda b: b.decode(), name="bad")  # type: ignore[arg-type,return-value]
    with pytest.raises(SerializationError, match="bad serde.*returned str, expected bytes"):
        bad.serialize("t", "x")


def test_windowed_inner_serde_errors_propagate():
    serde = serdes.time_windowed(serdes.long(), 10)
    with pytest.raises(SerializationError, match="long serde on topic 't'"):
        serde.deserialize("t", b"\x01" + b"\x00" * 8)


# -- the json serde writes the standard library's bytes, whichever library does the work --------


def _stdlib_bytes(obj):
    return stdlib_json.dumps(
        obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False
    ).encode()


class _Str(str):
    pass


class _Int(int):
    pass


class _Dict(dict):
    pass


_TEXTS = [
    "",
    "a",
    "news",
    "é",
    "中文",
    "😀",
    "\x00\x1f\x7f",
    "\u2028\u2029",
    '"\\/',
    "\ufeff",
    "\uffff",
]


def _random_float(rng: random.Random) -> float:
    choice = rng.random()
    if choice < 0.05:
        return rng.choice(
            [0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, 1.7976931348623157e308]
        )
    # Every decimal exponent, where the formatting of libraries differs most.
    return rng.choice([1, -1]) * rng.random() * 10.0 ** rng.randint(-320, 307)


def _random_int(rng: random.Random) -> int:
    bits = rng.choice([3, 31, 53, 63, 64, 65, 100])
    return rng.randint(-(2**bits), 2**bits)


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(10 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return _random_int(rng)
    if kind == 2:
        return _random_float(rng)
    if kind == 3:
        return "".join(rng.choice(_TEXTS) for _ in range(rng.randrange(4)))
    if kind == 4:
        return rng.choice([_Str("sub"), _Int(7), (1, "t")])
    if kind == 5:
        return rng.choice(_TEXTS)
    if kind in (6, 7):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = [rng.choice(_TEXTS) + str(rng.randrange(50)) for _ in range(rng.randrange(5))]
    value = {k: _random_value(rng, depth + 1) for k in keys}
    return _Dict(value) if kind == 8 and rng.random() < 0.2 else value


@pytest.mark.parametrize("seed", range(5))
def test_json_serde_writes_the_standard_librarys_bytes_for_varied_values(seed):
    serde = serdes.json()
    rng = random.Random(seed)
    for _ in range(2000):
        value = _random_value(rng)
        if value is None:
            continue  # a tombstone, not JSON
        expected = _stdlib_bytes(value)
        assert serde.serialize("t", value) == expected, value
        # Reading the bytes back gives what the standard library reads.
        read = serde.deserialize("t", expected)
        assert _stdlib_bytes(read) == _stdlib_bytes(stdlib_json.loads(expected))


@pytest.mark.parametrize(
    "value",
    [
        1e-05, 4.4e-05, 1.5e-07, 9.999e-10, 1e-4, 1e16, 1.2345678901234568e20, -0.0, math.nan,
        math.inf, -math.inf, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30,
        {"b": [1.5, {"d": None, "c": "é"}], "a": True}, {"k": 1e-06}, [0.00001234],
        # Deeper than the serde looks for floats: the bytes are searched instead.
        [[[[[{"a": 1e-05, "b": 1}]]]]], [[[[[{"a": math.nan}]]]]], (1, [2, {"c": 1e-07}]),
    ],
)  # fmt: skip
def test_json_serde_bytes_at_the_edges_of_number_formatting(value):
    assert serdes.json().serialize("t", value) == _stdlib_bytes(value)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":18446744073709551616}', b"-9223372036854775809", b"9223372036854775807",
        b"1e400", b"NaN", b"-Infinity", b'"\\ud800"', b'{"a":1,"a":2}', b'  {"a" : 1 } ',
        b"-0.0", b"1E5", b"0.1000000000000000055511151231257827",
        # Many 13-digit timestamps: the digits are no clue; only a run of 19 sends the document
        # to the standard library.
        b'{"t":[' + b",".join([b"1796306459393"] * 8) + b'],"n":123456789012345678901}',
        b'{"t":[' + b",".join([b"1796306459393"] * 8) + b'],"n":-1234567890123456789.5}',
        b'{"t":[' + b",".join([b"1796306459393"] * 8) + b'],"s":"12345678901234567890"}',
    ],
)  # fmt: skip
def test_json_serde_reads_what_the_standard_library_reads(data):
    read = serdes.json().deserialize("t", data)
    expected = stdlib_json.loads(data)
    assert type(read) is type(expected)
    assert repr(read) == repr(expected)  # repr: NaN is not equal to itself


def test_json_serde_still_refuses_what_the_standard_library_refuses():
    with pytest.raises(SerializationError, match="json serde"):
        serdes.json().serialize("t", {"a": {1, 2}})
    with pytest.raises(SerializationError, match="json serde"):
        serdes.json().serialize("t", "\ud800")  # a lone surrogate is not UTF-8
