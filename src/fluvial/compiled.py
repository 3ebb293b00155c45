"""The compiled engine: which modules are compiled, and whether their build may be used.

The modules of :data:`MODULES` are Python source that the install also compiles with mypyc
(``hatch_build.py`` at the repository root) into extensions written beside the ``.py`` files,
plus one shared library for the group (:data:`GROUP_LIBRARY`, beside the package, where mypyc
places it). An extension beside its source
wins at import, so an edited ``.py`` would be shadowed in silence: ``import fluvial`` therefore
runs :func:`check` first. It compares each source with the digest the build recorded
(:data:`BUILD_RECORD`), and when a source changed since the build, there is no build, or
``FLUVIAL_INTERPRETED=1`` is set, it puts a finder before Python's own that loads the ``.py``
sources of all of :data:`MODULES` instead (they are compiled together: one stale module makes
them all interpreted). ``fluvial run`` and the Spark driver print :func:`notice` at start.

``FLUVIAL_REQUIRE_COMPILED=1`` turns running interpreted into an error at import (``make test``
sets it where a C compiler exists).

This module is imported by ``import fluvial`` and by the build hook (without fluvial's
dependencies): standard library only, and cheap. A source is hashed only when its size or
modification time differ from what the build recorded.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: The modules compiled with mypyc, in one group.
MODULES = (
    "fluvial.records",
    "fluvial.serdes",
    "fluvial.processor_api",
    "fluvial.processor.task",
    "fluvial.processor.fusion",
    "fluvial.processor.nodes",
    "fluvial.processor.collector",
    "fluvial.dsl.stateless",
    "fluvial.dsl.aggregate",
    "fluvial.dsl.change",
    "fluvial.dsl.old_values",
    "fluvial.dsl.forwarding",
    "fluvial.dsl.getters",
    "fluvial.dsl.table_ops",
    "fluvial.dsl.joins",
    "fluvial.dsl.stream_stream_join",
    "fluvial.dsl.stream_table_join",
    "fluvial.dsl.table_table_join",
    "fluvial.dsl.fk_join",
    "fluvial.dsl.session",
    "fluvial.dsl.sliding",
    "fluvial.dsl.suppress",
    "fluvial.dsl.cogroup",
    "fluvial.processor.context",
    "fluvial.processor.completeness",
    "fluvial.processor.metrics",
    "fluvial.state.value_format",
    "fluvial.state.timestamped",
    "fluvial.state.caching",
    "fluvial.state.caching_session",
    "fluvial.state.transactional",
    "fluvial.state.transactional_windowed",
    "fluvial.partitioner",
    "fluvial.runtime.intake",
    "fluvial.runtime.collector",
)
#: The group's shared library (mypyc's runtime and the modules' code), a top-level module
#: beside the package: inside it, mypyc would give the modules wrong ``__file__``s.
GROUP_LIBRARY = "fluvial_engine__mypyc"
#: The module the build hook writes beside this one: what was compiled, from which sources.
BUILD_RECORD = "fluvial._engine_build"
#: Set to 1 (at build or at run time): the engine runs interpreted.
INTERPRETED_ENV = "FLUVIAL_INTERPRETED"
#: Set to 1: running interpreted is an error (``import fluvial`` fails, saying why).
REQUIRE_ENV = "FLUVIAL_REQUIRE_COMPILED"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def source_path(module: str, package_dir: str = _PACKAGE_DIR) -> str:
    """The ``.py`` file of one of :data:`MODULES` (``fluvial.x.y`` -> ``<package>/x/y.py``)."""
    return os.path.join(package_dir, *module.split(".")[1:]) + ".py"


def group_library_path(suffix: str, package_dir: str = _PACKAGE_DIR) -> str:
    """The file of :data:`GROUP_LIBRARY` for an extension ``suffix``."""
    return os.path.join(os.path.dirname(package_dir), GROUP_LIBRARY + suffix)


def file_digest(path: str) -> str:
    """The sha256 of a file, in hex."""
    import hashlib  # only when a source's stat differs from the build's: not on every import

    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _build_record() -> Any:
    """The build hook's record, read without importing it as a module (no bytecode to keep)."""
    path = os.path.join(_PACKAGE_DIR, BUILD_RECORD.rsplit(".", 1)[1] + ".py")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    record = ModuleType(BUILD_RECORD)
    exec(compile(text, path, "exec"), record.__dict__)  # noqa: S102 - written by hatch_build.py
    return record


def _why_interpreted() -> str | None:
    if os.environ.get(INTERPRETED_ENV) == "1":
        return f"{INTERPRETED_ENV}=1 is set"
    record = _build_record()
    if record is None:
        return "it was installed without a compiled build"
    if record.SKIPPED:
        return str(record.SKIPPED)
    if record.SUFFIX not in importlib.machinery.EXTENSION_SUFFIXES:
        return f"it was compiled for another Python ({record.SUFFIX})"
    if not os.path.exists(group_library_path(record.SUFFIX)):
        return f"{GROUP_LIBRARY + record.SUFFIX} is missing"
    for module, (digest, size, mtime_ns) in record.SOURCES.items():
        path = source_path(module)
        relative = os.path.relpath(path, os.path.dirname(_PACKAGE_DIR))
        extension = path[: -len(".py")] + record.SUFFIX
        if not os.path.exists(extension):
            return f"{os.path.basename(extension)} is missing"
        try:
            stat = os.stat(path)
        except OSError:
            return f"{relative} is missing"
        if (stat.st_size, stat.st_mtime_ns) != (size, mtime_ns) and file_digest(path) != digest:
            return f"{relative} changed since it was compiled"
    return None


class _SourcesFirst:
    """A meta path finder before Python's own: the ``.py`` sources of the compiled modules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


#: Why the engine runs interpreted (None: compiled). Set by :func:`check`.
reason: str | None = None
_checked = False


def check() -> str | None:
    """Decide once, before any compiled module is imported, whether the build may be used;
    if not, make the sources load instead. Returns why the engine runs interpreted, or None."""
    global reason, _checked
    if _checked:
        return reason
    _checked = True
    reason = _why_interpreted()
    if reason is None:
        return None
    if os.environ.get(REQUIRE_ENV) == "1":
        raise ImportError(
            f"fluvial: the engine would run interpreted ({reason}) and {REQUIRE_ENV}=1 is set; "
            "run `make setup` to compile it (a C compiler is needed), or unset "
            f"{REQUIRE_ENV} to run interpreted"
        )
    already = [m for m in MODULES if m in sys.modules]
    if already:  # imported before fluvial: cannot happen through `import fluvial.x`
        raise ImportError(f"fluvial: {', '.join(already)} was imported before fluvial itself")
    sys.meta_path.insert(0, _SourcesFirst())
    return reason


def notice() -> str | None:
    """The line a long-running command prints at start when the engine runs interpreted."""
    why = check()
    if why is None:
        return None
    return f"fluvial: running the engine interpreted ({why}); `make setup` compiles it"


_announced = False


def announce(write: Any = None) -> None:
    """Say :func:`notice` once per process (on stderr unless ``write`` is given): ``fluvial
    run`` and the Spark driver call this at start."""
    global _announced
    line = notice()
    if line is None or _announced:
        return
    _announced = True
    (write or sys.stderr.write)(line + "\n")


def is_compiled() -> bool:
    """Whether the compiled modules are loaded from their build (after :func:`check`)."""
    return check() is None


def cannot_compile() -> str | None:
    """Why this machine cannot compile the engine (no C compiler, no Python headers), or None.
    The build hook asks before compiling; ``make test`` asks whether to require the build."""
    import shlex
    import shutil
    import sysconfig

    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")[0]
    if shutil.which(compiler) is None:
        return f"the install found no C compiler named {compiler}"
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return "the install found no Python.h (Python's development headers)"
    return None
