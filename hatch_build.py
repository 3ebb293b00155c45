"""The install compiles fluvial's engine with mypyc (a hatchling build hook).

``uv sync`` / ``make setup`` (an editable install) and ``uv build`` run this hook. Where a C
compiler and Python's headers exist, it compiles the modules of ``fluvial.compiled.MODULES``
into C extensions and records, in ``fluvial/_engine_build.py``, the sha256 (and size and
modification time) of each source it compiled. An editable install gets both written in place,
beside the ``.py`` files (git ignores them); a wheel gets them as files of its own.

Without a compiler, with ``FLUVIAL_INTERPRETED=1`` set at build time, or when the compile
fails, the install still succeeds: the record then says why there is no build, and fluvial
runs the same sources interpreted and says so (``fluvial/compiled.py``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
import traceback
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).resolve().parent
SRC = ROOT / "src"
PACKAGE = SRC / "fluvial"


def _compiled_module() -> Any:
    """``fluvial/compiled.py``, loaded alone: it names the modules and the record's layout."""
    spec = importlib.util.spec_from_file_location("_fluvial_compiled", PACKAGE / "compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _why_not_compiled(compiled: Any) -> str | None:
    """Why the engine is not to be compiled now, or None."""
    if os.environ.get("FLUVIAL_INTERPRETED") == "1":
        return "it was installed with FLUVIAL_INTERPRETED=1"
    why: str | None = compiled.cannot_compile()
    return why


def _extension_suffix() -> str:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert isinstance(suffix, str)
    return suffix


def _build(compiled: Any, out: Path, scratch: Path) -> list[Path]:
    """Compile the modules into ``out`` (a tree like ``src/``); return the files made."""
    from mypyc.build import mypycify
    from setuptools import Distribution
    from setuptools.command.build_ext import build_ext

    sources = [compiled.source_path(m, str(PACKAGE)) for m in compiled.MODULES]
    cwd = os.getcwd()
    os.chdir(SRC)  # module names come from the paths below src/; mypy reads pyproject's config
    try:
        extensions = mypycify(
            [
                *("--config-file", str(ROOT / "pyproject.toml")),
                *("--cache-dir", str(scratch / "mypy-cache")),
                "--follow-imports=silent",  # the modules they import are read, not judged
                *sources,
            ],
            group_name=compiled.GROUP_LIBRARY[: -len("__mypyc")],
            target_dir=str(scratch / "c"),
        )
        distribution = Distribution({"name": "fluvial-engine", "ext_modules": extensions})
        command = build_ext(distribution)
        command.build_lib = str(out)
        command.build_temp = str(scratch / "temp")
        command.ensure_finalized()
        command.run()
    finally:
        os.chdir(cwd)
    made = sorted(p for p in out.rglob("*") if p.is_file())
    expected = [*compiled.MODULES, compiled.GROUP_LIBRARY]
    for module in expected:
        path = out.joinpath(*module.split(".")).with_name(
            module.split(".")[-1] + _extension_suffix()
        )
        if path not in made:
            raise RuntimeError(f"mypyc made no {path.relative_to(out)}")
    return made


def _record(compiled: Any, skipped: str | None) -> str:
    """The text of ``fluvial/_engine_build.py``."""
    sources: dict[str, tuple[str, int, int]] = {}
    if skipped is None:
        for module in compiled.MODULES:
            path = compiled.source_path(module, str(PACKAGE))
            stat = os.stat(path)
            sources[module] = (compiled.file_digest(path), stat.st_size, stat.st_mtime_ns)
    lines = [
        '"""Written by hatch_build.py when fluvial was installed: what its engine was compiled',
        'from (see fluvial/compiled.py). Not in git."""',
        "",
        f"SKIPPED = {skipped!r}",
        f"SUFFIX = {_extension_suffix()!r}",
        "SOURCES = {",
        *(f"    {module!r}: {entry!r}," for module, entry in sources.items()),
        "}",
        "",
    ]
    return "\n".join(lines)


class CompiledEngineHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compiles the engine into the wheel, or in place for an editable install."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        compiled = _compiled_module()
        editable = version == "editable"
        record_path = PACKAGE / "_engine_build.py"
        if editable:
            self._remove_in_place(compiled)
        skipped = _why_not_compiled(compiled)
        with tempfile.TemporaryDirectory(prefix="fluvial-mypyc-") as scratch_dir:
            scratch = Path(scratch_dir)
            out = scratch / "out"
            made: list[Path] = []
            if skipped is None:
                try:
                    made = _build(compiled, out, scratch)
                except (Exception, SystemExit) as error:  # mypyc exits on a type error
                    traceback.print_exc(file=sys.stderr)
                    detail = str(error).strip().splitlines()[-1:] or [""]
                    skipped = (
                        f"compiling it failed at install, {type(error).__name__}: {detail[0]}; "
                        "`uv sync -v --reinstall-package fluvial` shows why"
                    )
                    made = []
            if skipped is not None:
                print(f"fluvial: the engine stays interpreted: {skipped}", file=sys.stderr)
            record = _record(compiled, skipped)
            if editable:
                for path in made:
                    target = SRC / path.relative_to(out)
                    shutil.copy2(path, target)
                record_path.write_text(record, encoding="utf-8")
                return
            # A wheel: the extensions and the record go in as files of their own, kept until
            # the wheel is written (finalize).
            kept = Path(tempfile.mkdtemp(prefix="fluvial-engine-"))
            self._kept = kept
            for path in made:
                target = kept / path.relative_to(out)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
                build_data["force_include"][str(target)] = str(path.relative_to(out))
            (kept / "_engine_build.py").write_text(record, encoding="utf-8")
            build_data["force_include"][str(kept / "_engine_build.py")] = "fluvial/_engine_build.py"
            if made:
                build_data["pure_python"] = False
                build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        kept = getattr(self, "_kept", None)
        if kept is not None:
            shutil.rmtree(kept, ignore_errors=True)

    def _remove_in_place(self, compiled: Any) -> None:
        """An editable install's earlier build: gone before a new one (or none) is made.

        Every extension in the package goes, not only those of the modules compiled now: the
        extension of a module no longer in ``MODULES`` would still win over its ``.py`` at
        import, and fail there, as the group library it calls into has no such module."""
        suffix = _extension_suffix()
        for path in PACKAGE.rglob(f"*{suffix}"):
            path.unlink()
        SRC.joinpath(compiled.GROUP_LIBRARY + suffix).unlink(missing_ok=True)
        (PACKAGE / "_engine_build.py").unlink(missing_ok=True)
