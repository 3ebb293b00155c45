"""The named user functions of generated cases, implemented identically in
``reference/src/main/java/dev/fluvial/reference/differential/Functions.java``.

Values are small numbers (0..999) carried as strings or as longs; every function reads a value as
a number (``None`` stays ``None``) and the case says in which form its result travels on. Keys are
strings or ``None``. Every function is total over those inputs, nulls included, so a record
reaches a function on one side exactly when it does on the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluvial.records import KeyValue, Windowed

MOD = 1000
Num = int | None


def num(value: Any) -> Num:
    if value is None:
        return None
    return int(value)


def out(number: Num, rep: str) -> Any:
    """A number in the case's value form: ``"s"`` a decimal string, ``"l"`` a long."""
    if number is None:
        return None
    return str(number) if rep == "s" else number


def _key_sum(key: str) -> int:
    return sum(ord(c) for c in key)


def _or0(n: Num) -> int:
    return 0 if n is None else n


# -- predicates (key, value) ---------------------------------------------------------------
PREDICATES: dict[str, Callable[[str | None, Num], bool]] = {
    "v_even": lambda k, n: n is not None and n % 2 == 0,
    "v_small": lambda k, n: n is not None and n < 500,
    "v_div3": lambda k, n: n is not None and n % 3 == 0,
    "v_null": lambda k, n: n is None,
    "k_hash": lambda k, n: k is not None and _key_sum(k) % 3 != 0,
}

# -- value mappers (value) -----------------------------------------------------------------
VALUE_MAPPERS: dict[str, Callable[[Num], Num]] = {
    "inc": lambda n: None if n is None else (n + 1) % MOD,
    "dbl": lambda n: None if n is None else (2 * n) % MOD,
    "sq7": lambda n: None if n is None else (n * n + 7) % MOD,
    "null_if_7": lambda n: None if n is None or n % 7 == 0 else n,
    "zero_if_null": lambda n: 0 if n is None else n,
}

# -- key selectors (key, value) -> key -----------------------------------------------------
KEY_SELECTORS: dict[str, Callable[[str | None, Num], str | None]] = {
    "k_by_v": lambda k, n: None if n is None else f"k{n % 4}",
    "k_suffix": lambda k, n: None if k is None else k + "x",
    "k_null_if_5": lambda k, n: None if n is not None and n % 5 == 0 else k,
    "k_const": lambda k, n: "k0",
    "k_first": lambda k, n: None if k is None else k[:2],
}

# -- mappers (key, value) -> (key, value) ----------------------------------------------------
MAPPERS: dict[str, Callable[[str | None, Num], tuple[str | None, Num]]] = {
    "rekey_inc": lambda k, n: (k, None) if n is None else (f"k{n % 3}", (n + 1) % MOD),
    "identity": lambda k, n: (k, n),
}

# -- flat mappers (key, value) -> [(key, value)] -------------------------------------------
FLAT_MAPPERS: dict[str, Callable[[str | None, Num], list[tuple[str | None, Num]]]] = {
    "fan2": lambda k, n: [(k, None)] if n is None else [(k, n), (f"k{n % 2}", (n + 1) % MOD)],
    "drop_odd": lambda k, n: [] if n is None or n % 2 == 1 else [(k, n)],
}

# -- flat value mappers (value) -> [value] ---------------------------------------------------
FLAT_VALUE_MAPPERS: dict[str, Callable[[Num], list[Num]]] = {
    "fanv": lambda n: [] if n is None or n % 3 == 0 else [n, (n + 3) % MOD],
    "dupv": lambda n: [n, n],
}

# -- reducers (aggregate, value) -> aggregate ----------------------------------------------
REDUCERS: dict[str, Callable[[Num, Num], Num]] = {
    "sum": lambda a, n: (_or0(a) + _or0(n)) % MOD,
    "max": lambda a, n: max(_or0(a), _or0(n)),
    "sub": lambda a, n: (_or0(a) - _or0(n)) % MOD,
}

# -- aggregators (key, value, aggregate) -> aggregate --------------------------------------
AGGREGATORS: dict[str, Callable[[str | None, Num, Num], Num]] = {
    "agg_sum": lambda k, n, a: (_or0(a) + _or0(n)) % MOD,
    "agg_mix": lambda k, n, a: (_or0(a) * 3 + _or0(n) + len(k or "")) % MOD,
    "agg_sub": lambda k, n, a: (_or0(a) - _or0(n)) % MOD,
    "agg_unmix": lambda k, n, a: (_or0(a) * 7 + _or0(n)) % MOD,
}

INITIALIZERS: dict[str, Callable[[], int]] = {"zero": lambda: 0, "one": lambda: 1}

# -- session mergers (key, aggregate, aggregate) -> aggregate ------------------------------
MERGERS: dict[str, Callable[[str | None, Num, Num], Num]] = {
    "merge_sum": lambda k, a, b: (_or0(a) + _or0(b)) % MOD,
}


# -- joiners (left, right) -> value ----------------------------------------------------------
def _join(left: Num, right: Num) -> int:
    a = 997 if left is None else left
    b = 991 if right is None else right
    return (a * 31 + b) % MOD


JOINERS: dict[str, Callable[[Num, Num], Num]] = {"jn": _join}

# -- foreign keys (value) -> key, and GlobalKTable keys (key, value) -> key -------------------
FOREIGN_KEYS: dict[str, Callable[[Num], str | None]] = {
    "fk_v": lambda n: None if n is None else f"k{n % 5}",
}
GLOBAL_KEYS: dict[str, Callable[[str | None, Num], str | None]] = {
    "gk_v": lambda k, n: None if n is None else f"k{n % 5}",
    "gk_k": lambda k, n: k,
}

# -- table regrouping (key, value) -> (key, value) -----------------------------------------
REGROUPERS: dict[str, Callable[[str | None, Num], tuple[str | None, Num]]] = {
    "regroup_v": lambda k, n: (None if n is None else f"k{n % 3}", n),
    "regroup_const": lambda k, n: ("all", n),
}


def unwindow(key: Windowed[str]) -> str:
    """A windowed key as a plain one: ``<key>@<window start>``."""
    return f"{key.key}@{key.window.start_ms}"


# The typed adapters the builder hands to the DSL -------------------------------------------


def predicate(name: str) -> Callable[[Any, Any], bool]:
    fn = PREDICATES[name]
    return lambda k, v: fn(k, num(v))


def value_mapper(name: str, rep: str) -> Callable[[Any], Any]:
    fn = VALUE_MAPPERS[name]
    return lambda v: out(fn(num(v)), rep)


def key_selector(name: str) -> Callable[[Any, Any], Any]:
    fn = KEY_SELECTORS[name]
    return lambda k, v: fn(k, num(v))


def mapper(name: str, rep: str) -> Callable[[Any, Any], Any]:
    fn = MAPPERS[name]

    def apply(k: Any, v: Any) -> KeyValue[Any, Any]:
        key, n = fn(k, num(v))
        return KeyValue(key, out(n, rep))

    return apply


def flat_mapper(name: str, rep: str) -> Callable[[Any, Any], Any]:
    fn = FLAT_MAPPERS[name]
    return lambda k, v: [KeyValue(key, out(n, rep)) for key, n in fn(k, num(v))]


def flat_value_mapper(name: str, rep: str) -> Callable[[Any], Any]:
    fn = FLAT_VALUE_MAPPERS[name]
    return lambda v: [out(n, rep) for n in fn(num(v))]


def reducer(name: str, rep: str) -> Callable[[Any, Any], Any]:
    fn = REDUCERS[name]
    return lambda a, v: out(fn(num(a), num(v)), rep)


def aggregator(name: str, rep: str) -> Callable[[Any, Any, Any], Any]:
    fn = AGGREGATORS[name]
    return lambda k, v, a: out(fn(k, num(v), num(a)), rep)


def initializer(name: str, rep: str) -> Callable[[], Any]:
    fn = INITIALIZERS[name]
    return lambda: out(fn(), rep)


def merger(name: str, rep: str) -> Callable[[Any, Any, Any], Any]:
    fn = MERGERS[name]
    return lambda k, a, b: out(fn(k, num(a), num(b)), rep)


def joiner(name: str, rep: str) -> Callable[[Any, Any], Any]:
    fn = JOINERS[name]
    return lambda left, right: out(fn(num(left), num(right)), rep)


def foreign_key(name: str) -> Callable[[Any], Any]:
    fn = FOREIGN_KEYS[name]
    return lambda v: fn(num(v))


def global_key(name: str) -> Callable[[Any, Any], Any]:
    fn = GLOBAL_KEYS[name]
    return lambda k, v: fn(k, num(v))


def regrouper(name: str, rep: str) -> Callable[[Any, Any], Any]:
    fn = REGROUPERS[name]

    def apply(k: Any, v: Any) -> KeyValue[Any, Any]:
        key, n = fn(k, num(v))
        return KeyValue(key, out(n, rep))

    return apply
