"""An mkdocs hook: the build fails when a public name of fluvial is undocumented.

A public name is one a public module exports (its ``__all__``, or for a module without one,
the classes and functions it defines). Each must have a docstring of its own and be shown by
a ``::: identifier`` block of a page under ``docs/reference/`` (itself, or a module block
whose members include it). The walk goes on into classes: every public method and property
of a public class (its own, or inherited from one of fluvial's classes) needs a docstring,
since mkdocstrings shows nothing for one without. And a DSL class that a public method
returns (``KGroupedStream.windowed_by`` returning ``SessionWindowedKStream``) is public too:
a user chains calls on it, so it must be exported and shown. mkdocs' strict mode already fails on
broken links and on a block naming something that does not exist.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

# The reference documents the source: mypyc's compiled classes and methods (fluvial.compiled)
# carry no docstrings, so the docs read the engine's modules interpreted.
os.environ["FLUVIAL_INTERPRETED"] = "1"
os.environ.pop("FLUVIAL_REQUIRE_COMPILED", None)

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
# Where a reference page shows the table of StreamsConfig's settings, generated from their
# definitions (fluvial.config.settings_markdown) so that it cannot drift from the code.
SETTINGS_MARKER = "<!-- streams-config-settings -->"
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
        f"{module_name}.{name}": getattr(module, name)
        for name in names
        if not name.startswith("__")
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


def _fluvial_class(cls: type) -> bool:
    return cls.__module__ == "fluvial" or cls.__module__.startswith("fluvial.")


def public_members(cls: type) -> dict[str, Any]:
    """The public methods and properties of ``cls``, as functions (a property by its getter).

    Inherited ones count when a class of fluvial defines them (a private mixin's ``with_name``
    is part of ``Consumed``); those of ``object``, ``Generic`` or ``Enum`` do not.
    """
    members: dict[str, Any] = {}
    for owner in reversed(cls.__mro__):
        if not _fluvial_class(owner):
            continue
        for name, attribute in vars(owner).items():
            if name.startswith("_"):
                continue
            if isinstance(attribute, staticmethod | classmethod):
                attribute = attribute.__func__
            elif isinstance(attribute, property):
                attribute = attribute.fget
            elif isinstance(attribute, functools.cached_property):
                attribute = attribute.func
            elif inspect.isfunction(getattr(attribute, "__wrapped__", None)):
                attribute = attribute.__wrapped__  # a decorator's descriptor (the options' fluent)
            if inspect.isfunction(attribute):
                members[name] = attribute
            else:
                members.pop(name, None)  # a plain attribute or an enum member shadows it
    return members


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The packages whose returned classes a user chains calls on (``group_by_key().windowed_by(..)
# .count()``): a class of theirs that a public method returns must be public itself.
CHAINED_PACKAGES = ("fluvial.dsl",)


def _imported_names(module_name: str) -> dict[str, str]:
    """Name -> module for every ``from fluvial... import name`` in a module's source, including
    those under ``if TYPE_CHECKING:`` and inside functions (how the DSL breaks import cycles)."""
    source = inspect.getsource(sys.modules[module_name])
    names = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fluvial"):
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return names


def returned_classes(function: Any) -> set[type]:
    """fluvial's classes named in ``function``'s return annotation (a string under
    ``from __future__ import annotations``)."""
    annotation = inspect.get_annotations(function).get("return")
    if annotation is None:
        return set()
    if not isinstance(annotation, str):
        annotation = repr(annotation)
    found = set()
    for word in _WORD.findall(annotation):
        candidate = function.__globals__.get(word)
        if candidate is None and word in (imports := _imported_names(function.__module__)):
            candidate = getattr(importlib.import_module(imports[word]), word, None)
        if inspect.isclass(candidate) and _fluvial_class(candidate):
            found.add(candidate)
    return found


def problems(reference_dir: Path) -> list[str]:
    shown = documented_objects(reference_dir)
    found = []
    if not any(SETTINGS_MARKER in page.read_text() for page in reference_dir.glob("*.md")):
        found.append(
            f"no page of docs/reference shows StreamsConfig's settings ({SETTINGS_MARKER})"
        )
    from fluvial.config import settings

    for name, _, meaning in settings():
        if not meaning.strip():
            found.append(
                f"StreamsConfig setting {name} says nothing: define it with "
                "setting(meaning, default) in src/fluvial/config.py"
            )
    public_classes: dict[type, str] = {}
    for module_name in PUBLIC_MODULES:
        for qualified, obj in public_names(module_name).items():
            if inspect.ismodule(obj):
                continue
            # Constants and type aliases cannot carry a docstring; classes and functions must.
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and not _own_docstring(obj):
                found.append(f"{qualified} has no docstring")
            if id(obj) not in shown:
                found.append(f"{qualified} is on no page of docs/reference (add '::: {qualified}')")
            if inspect.isclass(obj):
                public_classes.setdefault(obj, qualified)
    for cls, qualified in public_classes.items():
        for name, function in public_members(cls).items():
            if not _own_docstring(function):
                found.append(f"{qualified}.{name} has no docstring")
            for returned in sorted(returned_classes(function), key=lambda c: c.__qualname__):
                if returned not in public_classes and returned.__module__.startswith(
                    CHAINED_PACKAGES
                ):
                    found.append(
                        f"{qualified}.{name} returns {returned.__module__}.{returned.__qualname__}"
                        ", which no public module exports (add it to one's __all__ and to a page)"
                    )
    return found


def on_config(config: Any, **_: Any) -> Any:
    found = problems(Path(config["docs_dir"]) / "reference")
    if found:
        raise PluginError("undocumented public names:\n  " + "\n  ".join(found))
    return config


def on_page_markdown(markdown: str, **_: Any) -> str:
    if SETTINGS_MARKER not in markdown:
        return markdown
    from fluvial.config import settings_markdown

    return markdown.replace(SETTINGS_MARKER, settings_markdown())


def on_page_read_source(page: Any, config: Any) -> str | None:
    """The site's home page is the README, its links made relative to docs/."""
    if page.file.src_uri != "index.md":
        return None
    readme = Path(config["docs_dir"]).parent / "README.md"
    return readme.read_text().replace("](docs/", "](")
