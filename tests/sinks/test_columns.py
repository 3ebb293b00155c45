"""Records to rows, without a database: decoding is strict and windowed keys split in three."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from fluvial import serdes
from fluvial.errors import ConfigError
from fluvial.records import Window, Windowed
from fluvial.sinks.columns import BadRecord, RowCodec, parse_schema

UTC = dt.UTC


def at(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms)


def test_session_windowed_keys_carry_both_bounds() -> None:
    codec = RowCodec(key_serde="long", value_serde="double", session_windows=True)
    key = serdes.session_windowed(serdes.long()).serialize("t", Windowed(42, Window(1000, 4000)))
    assert codec.key_part("t", key) == (42, at(1000), at(4000))
    assert codec.value_part("t", serdes.double().serialize("t", 2.5)) == (2.5,)
    assert [c.name for c in codec.key_columns] == ["key", "window_start", "window_end"]
    assert [c.pg_type for c in codec.value_columns] == ["double precision"]


TYPED = [
    ("n long", 5, 5),
    ("n long", 2**63, BadRecord),
    ("n long", 1.5, BadRecord),
    ("n long", True, BadRecord),
    ("n long", "5", BadRecord),
    ("n int", 2**31, BadRecord),
    ("n double", 3, 3.0),
    ("n boolean", 1, BadRecord),
    ("n string", 7, BadRecord),
    ("n timestamp", 1500, at(1500)),
    ("n timestamp", "2026-01-02T03:04:05+00:00", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
    ("n timestamp", "yesterday", BadRecord),
    ("n long", None, None),
]


@pytest.mark.parametrize(("schema", "value", "expected"), TYPED)
def test_json_fields_convert_strictly_to_their_declared_types(schema, value, expected) -> None:
    codec = RowCodec(value_serde="json", value_schema=schema)
    data = json.dumps({"n": value}).encode()
    if expected is BadRecord:
        with pytest.raises(BadRecord, match="value field 'n'"):
            codec.value_part("t", data)
    else:
        assert codec.value_part("t", data) == (expected,)


def test_a_missing_field_is_null_and_a_non_object_is_a_bad_record() -> None:
    codec = RowCodec(value_serde="json", value_schema={"a": "long", "b": "json"})
    a, b = codec.value_part("t", b'{"b": [1, 2]}')
    assert a is None and b.obj == [1, 2]
    with pytest.raises(BadRecord, match="expected a JSON object"):
        codec.value_part("t", b"[1, 2]")
    assert codec.value_part("t", None) == (None, None)  # a tombstone


def test_undecodable_bytes_are_bad_records_naming_the_part() -> None:
    codec = RowCodec(key_serde="int", value_serde="long")
    with pytest.raises(BadRecord, match="key: .*expected 4 bytes"):
        codec.key_part("t", b"\x00")
    with pytest.raises(BadRecord, match="value: .*expected 8 bytes"):
        codec.value_part("t", b"\x00")


def test_schemas_parse_from_text_or_mapping_and_reject_unknown_types() -> None:
    assert [(c.name, c.pg_type) for c in parse_schema("a string, b long")] == [
        ("a", "text"), ("b", "bigint"),
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="not a plain column name"):
        parse_schema({"a-b": "long"})
    with pytest.raises(ConfigError, match="is empty"):
        parse_schema({})
