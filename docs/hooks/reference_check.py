"""An mkdocs hook: the build fails when a public name of fluvial is undocumented.

A public name is one a public module exports (its ``__all__``, or for a module without one,
the classes and functions it defines). Each must have a docstring of its own and be shown by
a ``::: identifier`` block of a page under ``docs/reference/`` (itself, or a module block
whose members include it). mkdocs' strict mode already fails on broken links and on a block
naming something that does not exist.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

PUBLIC_MODULES = (
    "fluvial",
    "fluvial.dsl",
    "fluvial.serdes",
    "fluvial.errors",
    "fluvial.processor",
    "fluvial.testing",
    "fluvial.runtime",
    "fluvial.spark",
    "fluvial.sinks",
    "fluvial.kafka",
)
_BLOCK = re.compile(r"^::: (\S+)\s*$", re.M)
_NO_MEMBERS = re.compile(r"^\s+members: false\s*$", re.M)


def public_names(module_name: str) -> dict[str, Any]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and (inspect.isclass(obj) or inspect.isfunction(obj))
            and getattr(obj, "__module__", None) == module_name
        ]
    return {
        f"{module_name}.{name}": getattr(module, name) for name in names if not name.startswith("__")
    }


def _resolve(identifier: str) -> Any:
    module_name, _, attribute = identifier.rpartition(".")
    try:
        return importlib.import_module(identifier)
    except ImportError:
        return getattr(importlib.import_module(module_name), attribute)


def documented_objects(reference_dir: Path) -> set[int]:
    """Ids of the objects the reference pages show."""
    shown: set[int] = set()
    for page in sorted(reference_dir.glob("*.md")):
        text = page.read_text()
        for match in _BLOCK.finditer(text):
            identifier = match.group(1)
            obj = _resolve(identifier)
            following = text[match.end() : match.end() + 200].split("\n\n", 1)[0]
            if inspect.ismodule(obj):
                if not _NO_MEMBERS.search(following):
                    shown.update(id(member) for member in public_names(identifier).values())
            else:
                shown.add(id(obj))
    return shown


def _own_docstring(obj: Any) -> bool:
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    return bool(doc and doc.strip())


def problems(reference_dir: Path) -> list[str]:
    shown = documented_objects(reference_dir)
    found = []
    for module_name in PUBLIC_MODULES:
        for qualified, obj in public_names(module_name).items():
            if inspect.ismodule(obj):
                continue
            # Constants and type aliases cannot carry a docstring; classes and functions must.
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not _own_docstring(obj):
                found.append(f"{qualified} has no docstring")
            if id(obj) not in shown:
                found.append(f"{qualified} is on no page of docs/reference (add '::: {qualified}')")
    return found


def on_config(config: Any, **_: Any) -> Any:
    found = problems(Path(config["docs_dir"]) / "reference")
    if found:
        raise PluginError("undocumented public names:\n  " + "\n  ".join(found))
    return config


def on_page_read_source(page: Any, config: Any) -> str | None:
    """The site's home page is the README, its links made relative to docs/."""
    if page.file.src_uri != "index.md":
        return None
    readme = Path(config["docs_dir"]).parent / "README.md"
    return readme.read_text().replace("](docs/", "](")
