"""Loading a user's ``APP.py``: a topology plus optional configuration overrides."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fluvial.config import StreamsConfig
from fluvial.dsl.builder import StreamsBuilder
from fluvial.errors import ConfigError, FluvialError
from fluvial.kafka.diagnose import check_client_keys
from fluvial.topology.topology import Topology


@dataclass
class LoadedApp:
    path: Path
    topology: Topology
    config: StreamsConfig | None


def load_app(path: str | Path) -> LoadedApp:
    """Import ``APP.py``: it defines ``build(builder)`` or a module-level ``topology``, and may
    define ``config: StreamsConfig``."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"no application file at {file}: give the path of an APP.py")
    spec = importlib.util.spec_from_file_location(f"fluvial_app_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {file}: is it a Python file?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so pickling user functions (Spark) can find the module
    # As for `python APP.py`: modules beside APP.py import by their plain names.
    folder = str(file.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    with _located(file):
        spec.loader.exec_module(module)
    build = getattr(module, "build", None)
    topology = getattr(module, "topology", None)
    if callable(build):
        builder = StreamsBuilder()
        with _located(file):
            build(builder)
            topology = builder.build()
    if not isinstance(topology, Topology):
        raise ConfigError(
            f"{file} defines neither build(builder: StreamsBuilder) nor a module-level "
            "'topology = builder.build()': add one of them"
        )
    config = getattr(module, "config", None)
    if config is not None and not isinstance(config, StreamsConfig):
        raise ConfigError(f"'config' in {file} must be a fluvial.StreamsConfig")
    check_client_keys(config.client_config if config else {}, where=f"client_config in {file}")
    return LoadedApp(file, topology, config)


class AppError(ConfigError):
    """APP.py could not be loaded: a syntax error, or an exception while it ran.

    The message says where, in one screen; ``__cause__`` holds the original (``--debug``).
    """


@contextmanager
def _located(file: Path) -> Iterator[None]:
    """Re-raise what APP.py raises as one message naming its file and line."""
    try:
        yield
    except SyntaxError as error:
        where = f"{error.filename}:{error.lineno}"
        lines = [f"syntax error in {where}: {error.msg}"]
        if error.text:
            text = error.text.rstrip("\n")
            lines.append(f"    {text.strip()}")
            if error.offset:
                indent = len(text) - len(text.lstrip())
                lines.append("    " + " " * max(0, error.offset - 1 - indent) + "^")
        raise AppError("\n".join(lines)) from error
    except Exception as error:  # noqa: BLE001 - any failure of user code is reported, located
        where = _where(error, file)
        what = (
            str(error) if isinstance(error, FluvialError) else (f"{type(error).__name__}: {error}")
        )
        raise AppError(f"{where}: {what} (--debug shows the traceback)") from error


def _where(error: BaseException, file: Path) -> str:
    """The deepest line of APP.py (else of any file) on the error's traceback."""
    frames = traceback.extract_tb(error.__traceback__)
    target = str(file.resolve())
    mine = [f for f in frames if Path(f.filename).resolve().as_posix() == target]
    if not (mine or frames):
        return str(file)
    frame = (mine or frames)[-1]
    code = f" ({frame.line.strip()})" if frame.line else ""
    return f"{frame.filename}:{frame.lineno}{code}"
