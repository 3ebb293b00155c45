"""What every ``fluvial`` sub-command shares: its Typer app and its consoles.

Two things keep a command quick to answer and its help readable:

- Help is a plain layout: option names are never cut, descriptions wrap to the terminal (at
  most 80 columns, and 80 when the output is not a terminal), and below their option when the
  terminal is too narrow for two columns. rich is not imported for it.
- A console is a ``lazy_console()``: rich is imported the first time something is printed
  through it, never by ``--help`` or a command that prints with ``print``.

A module adds its commands to ``app = new_app(help=...)`` and prints with
``console = lazy_console(stderr=True)``, ``console.print(...)``.
"""

from __future__ import annotations

import shutil
import sys
from typing import TYPE_CHECKING, Any, cast

import typer
from typer._click.formatting import HelpFormatter, measure_table, wrap_text
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from rich.console import Console

# Below this many columns for a description beside its option, it goes on the lines below.
_NARROW = 28


class _Formatter(HelpFormatter):
    """Help text as wide as the terminal (80 columns at most, even below 50), two columns when
    they fit, else each description on the lines below its option, indented."""

    def __init__(self, indent_increment: int = 2, width: int | None = None,
                 max_width: int | None = None) -> None:  # fmt: skip
        if width is None:
            columns = shutil.get_terminal_size().columns
            width = max(min(columns, max_width or 80) - 2, 20)
        super().__init__(indent_increment, width, max_width)

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first = min(measure_table(rows)[0], col_max) + col_spacing
        if self.width - self.current_indent - first >= _NARROW:
            super().write_dl(rows, col_max, col_spacing)
            return
        indent = " " * (self.current_indent + 4)
        for name, text in rows:
            self.write(f"{'':>{self.current_indent}}{name}\n")
            if text:
                wrapped = wrap_text(text, max(self.width - len(indent), 10))
                self.write("".join(f"{indent}{line}\n" for line in wrapped.splitlines()))


class _Context(typer.Context):
    formatter_class = _Formatter


class _Command(TyperCommand):
    context_class = _Context


class _Group(TyperGroup):
    """A command group whose help lists each command's first sentence whole (wrapped, never
    cut at the terminal's edge), and whose ``--help`` option, when not given, is plainly off.

    Typer validates an option left unset through its type machinery, which imports pydantic
    (a fifth of a second); a default of ``False`` is taken as it is. ``fluvial topics list
    --help`` passes through two groups without their ``--help``.
    """

    context_class = _Context

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option


class _Typer(typer.Typer):
    def command(self, *args: Any, cls: Any = None, **options: Any) -> Any:
        return super().command(*args, cls=cls or _Command, **options)


def new_app(*, help: str, **options: Any) -> typer.Typer:  # noqa: A002 - Typer's own name
    """A Typer app (a command group) with plain help and no shell-completion options."""
    return _Typer(
        help=help,
        cls=_Group,
        rich_markup_mode=None,
        add_completion=False,
        pretty_exceptions_enable=False,
        **options,
    )


def lazy_console(**options: Any) -> Console:
    """A ``rich.console.Console(**options)``, built the first time it is used."""
    return cast("Console", _LazyConsole(**options))


class _LazyConsole:
    """Stands for a ``rich.console.Console``; builds it on the first attribute asked for."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)
