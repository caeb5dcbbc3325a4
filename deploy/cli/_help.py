"""How ``usl`` reads to a person: its help and its usage errors.

typer 0.29 renders help with rich, and left to itself it

- keeps a docstring's line breaks in the list of commands and in every paragraph after the first
  (``imported file appends nothing⏎ again``, ``with --follow, a⏎ line per poll``);
- reads square brackets in help as rich markup (``topic[partition]@offset`` lost ``[partition]``);
- shows each parameter's Python type (``<bool>``, ``<list[Path]>``, ``<int range> [x>=1]``) and
  writes a required argument ``{QUERY}`` in the usage line;
- prints a usage error (an unknown option, a missing argument) as a boxed panel under the usage,
  where every other error of the CLI is one ``error: ...`` line.

:class:`Command` and :class:`Group` are the classes typer builds the commands with
(:func:`humane`); they mend the help when it is rendered and the error when it is printed, so an
ordinary run pays nothing for them. They use click's public hooks (``format_help``,
``collect_usage_pieces``, ``main``), a parameter's ``metavar``, ``help``, ``min``/``max`` and
typer's ``display_type_rich``, and the error classes of ``typer._click.exceptions`` (typer 0.29
vendors click and exports none of them); ``tests/deploy/test_cli_help.py`` renders every command's
help and usage errors to catch an upgrade that changes what they rely on.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

__all__ = ["Command", "Group", "flowing", "humane", "usage_error_line"]

_HUMANIZED = "_usl_humanized"
# What an option's value is called when the option names nothing better (metavar=...).
_TYPE_NAMES: dict[Any, str] = {int: "N", float: "NUMBER", Path: "PATH"}


def flowing(text: str | None) -> str:
    """``text`` (a docstring) as paragraphs of one line each, so that the terminal, not the
    source file, decides where lines break; a paragraph that starts with ``\\b`` keeps its
    lines (click's convention for preformatted text)."""
    paragraphs = inspect.cleandoc(text or "").split("\n\n")
    return "\n\n".join(paragraph if paragraph.startswith("\b")
                       else " ".join(line.strip() for line in paragraph.splitlines())
                       for paragraph in paragraphs)


def _rich_escaped(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _bounds(param: TyperOption | TyperArgument) -> str | None:
    low, high = param.min, param.max
    if low is not None and high is not None:
        return f"{low}-{high}"
    if low is not None and low > 0:
        return f"at least {low}"
    if high is not None:
        return f"at most {high}"
    return None


def _value_name(param: TyperOption) -> str:
    annotation = param.type_descriptor.annotation
    if getattr(annotation, "__origin__", None) is list:
        (annotation,) = annotation.__args__
    return _TYPE_NAMES.get(annotation, "TEXT")


def _no_type(ctx: Any) -> None:
    return None


def _humanize_param(param: Any) -> None:
    if isinstance(param, TyperArgument):
        name = param.metavar or param.name.upper()
        if param.nargs != 1 and not name.endswith("..."):
            name += "..."
        param.metavar = name
        param.display_type_rich = _no_type  # type: ignore[method-assign]  # the name says it: PATH...
    elif isinstance(param, TyperOption) and param.metavar is None:
        param.metavar = "" if param.is_flag else _value_name(param)
    if isinstance(param, TyperOption | TyperArgument) and not getattr(param, "count", False):
        bounds = _bounds(param)
        if bounds and bounds not in (param.help or ""):
            param.help = f"{(param.help or '').rstrip('.')} ({bounds})." if param.help else f"{bounds}."
        param.min = param.max = None  # said in words above, not as "[x>=1]"
    if getattr(param, "help", None):
        param.help = _rich_escaped(" ".join(param.help.split()))


def _humanize(command: Any, ctx: Any) -> None:
    """Mend ``command``'s help text and its parameters' display, once."""
    if getattr(command, _HUMANIZED, False):
        return
    setattr(command, _HUMANIZED, True)
    command.help = _rich_escaped(flowing(command.help))
    if command.short_help:
        command.short_help = _rich_escaped(flowing(command.short_help))
    for param in command.get_params(ctx):
        _humanize_param(param)


def _usage_name(param: TyperArgument) -> str:
    name = param.metavar or param.name.upper()
    if param.nargs != 1 and not name.endswith("..."):
        name += "..."
    return name if param.required else f"[{name}]"


#: The exit code of a command whose reader closed its output early (``usl search x | head -1``):
#: a program the pipe's SIGPIPE ends gets this one from the shell (128 + 13), and ``set -o
#: pipefail`` reads it as such. Not 0: ``usl export | head`` did not write the whole export.
OUTPUT_CLOSED_EXIT = 141


def _output_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (``poll`` says POLLERR on its
    write end), and not some other descriptor (a socket to the API) that raised EPIPE."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno() if sys.__stdout__ else 1, select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _quiet_output() -> None:
    """Standard output onto /dev/null, so that nothing flushed at exit fails again (Python
    printed ``Exception ignored ... BrokenPipeError`` and exited 120)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ else 1)
    os.close(devnull)


class Command(TyperCommand):
    """A ``usl`` command: help in flowing paragraphs, value names for types, ``usl search QUERY``;
    its output piped into a reader that stops early (``| head -1``) ends it quietly, exit code
    :data:`OUTPUT_CLOSED_EXIT` (rich and click exited 1, as for an error).
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            if not _output_closed():
                raise  # a socket's, not the reader's: an error to say
            _quiet_output()
            raise typer.Exit(OUTPUT_CLOSED_EXIT) from None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _humanize(self, ctx)
        super().format_help(ctx, formatter)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            pieces += [_usage_name(param)] if isinstance(param, TyperArgument) else param.get_usage_pieces(ctx)
        return pieces


class Group(TyperGroup):
    """A ``usl`` group (``usl`` itself, ``usl apikey``, ``usl topics``): its commands listed in
    flowing text; as the program, usage errors in one line (:func:`usage_error_line`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _humanize(self, ctx)
        for name in self.list_commands(ctx):
            sub = self.get_command(ctx, name)
            if sub is not None:
                sub_ctx = typer.Context(sub, info_name=name, parent=ctx)
                _humanize(sub, sub_ctx)
        super().format_help(ctx, formatter)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except NoArgsIsHelpError as exc:
            exc.show()  # the help itself (typer printed it already when rich renders it)
            sys.exit(exc.exit_code)
        except ClickException as exc:
            sys.stderr.write(usage_error_line(exc) + "\n")
            sys.exit(exc.exit_code)
        except typer.Abort:
            sys.stderr.write("aborted\n")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def usage_error_line(exc: ClickException) -> str:
    """``error: <what is wrong> (see `usl CMD --help`)``: one line, as every error of the CLI."""
    from deploy.cli._common import printable

    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "usl"
    if isinstance(exc, NoSuchOption) and ctx is not None:
        # A query pasted from a session often starts with a flag (`-e 'require Logger'`,
        # `--force-with-lease`): click reads it as an option, and the remedy is click's `--`.
        arguments = [param for param in ctx.command.get_params(ctx) if isinstance(param, TyperArgument)]
        if arguments:
            name = _usage_name(arguments[0]).strip("[]").removesuffix("...")
            message += f"; a {name} that starts with - goes after --: `{path} [OPTIONS] -- {name}`"
    return printable(f"error: {message} (see `{path} --help`)")


def humane(app: typer.Typer) -> typer.Typer:
    """``app`` with its commands and groups (and theirs) built as :class:`Command` and
    :class:`Group`, unless one names its own class."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's own default
            info.cls = Command
    for group in app.registered_groups:
        group.cls = Group
        if group.typer_instance is not None:
            humane(group.typer_instance)
    return app
