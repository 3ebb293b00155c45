"""Loading a user's ``APP.py``: a topology plus optional configuration overrides."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from fluvial.config import StreamsConfig
from fluvial.dsl.builder import StreamsBuilder
from fluvial.errors import ConfigError
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
    spec.loader.exec_module(module)
    build = getattr(module, "build", None)
    topology = getattr(module, "topology", None)
    if callable(build):
        builder = StreamsBuilder()
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
    return LoadedApp(file, topology, config)
