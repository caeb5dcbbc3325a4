"""The ``usl`` command line.

One module per command group; each has a ``register(app)`` that adds its commands to the app
made here, and imports nothing of this package but the shared helpers (:mod:`._common`,
:mod:`._api`), so no module of the CLI imports another in a cycle:

- :mod:`.stack` ``up``, ``down``, ``status``, ``serve`` (the local stack; :mod:`deploy.stack`)
- :mod:`.ingest` ``ingest`` (one-shot and ``--follow``); :mod:`.worker` ``worker``;
  :mod:`.sinks` ``sink``, ``rebuild``; :mod:`.topics` ``topics create``; :mod:`.deadletters`
  ``deadletters`` (read from the broker)
- :mod:`.query` ``search``, ``sql``; :mod:`.sessionql` ``sessionql``; :mod:`.export` ``export``
  (through the planner API when one answers, else in process: :mod:`._api`)
- :mod:`.apikey` ``apikey create|list|revoke``
- :mod:`.progress` progress bars on stderr; :mod:`.typer_compat` the one patch of typer.

Every command imports what it drives inside its body, so ``usl search --json`` through the API
loads neither the planner's indexes nor faust, pyarrow or rich (docs/benchmarks.md). Every
subcommand reads its defaults from the environment (see ``usl --help`` and
``docs/configuration.md``); machine-readable output with ``--json``; progress on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import ModuleType

import typer

from deploy.cli import (
    apikey,
    deadletters,
    export,
    ingest,
    query,
    sessionql,
    sinks,
    stack,
    topics,
    worker,
)
from deploy.cli._common import err, escape
from deploy.cli._help import Group, humane
from deploy.cli.typer_compat import install as _coerce_without_pydantic
from streams.exceptions import USLError

__all__ = ["GROUPS", "app", "build_app", "environment_error", "main"]

_coerce_without_pydantic()  # about 0.2 s less per command (deploy/cli/typer_compat.py)

GROUPS: tuple[ModuleType, ...] = (topics, ingest, deadletters, stack, worker, sinks, apikey, export, query,
                                   sessionql)


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
    from importlib.metadata import PackageNotFoundError, version

    from deploy.cli._common import load_settings
    from sinks.versions import pipeline_versions

    try:
        package = version("usl-search")
    except PackageNotFoundError:
        package = "(not installed)"
    # What this code writes into every chunk, manifest and watermark: an index built under another
    # policy or chunker is one `usl rebuild` away from agreeing with it.
    written = pipeline_versions(load_settings())
    chunker = written["chunker"]
    sys.stdout.write(f"usl-search {package}\n"
                     f"redaction policy {written['redactionPolicyVersion']} (hash {written['redactionPolicy']})\n"
                     f"chunker {chunker['version']} (tokenizer {chunker['tokenizer']}, {chunker['targetTokens']} "
                     f"tokens, overlap {chunker['overlapTokens']})\n")
    raise typer.Exit()


def _usl(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the version, the redaction policy and the chunker this code "
                                      "writes, and exit."),
) -> None:
    # A callback keeps `usl COMMAND ...` a group of commands even when one group registered a
    # single command (typer runs a lone command as the whole program otherwise).
    pass


def build_app(groups: Sequence[ModuleType] = GROUPS) -> typer.Typer:
    """The ``usl`` app with the commands of ``groups`` (modules of this package)."""
    built = typer.Typer(
        name="usl",
        help="USL Search: explainable, rebuildable search over a Kafka log of AI-agent sessions.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        cls=Group,
    )
    built.callback()(_usl)
    for group in groups:
        group.register(built)
    return humane(built)


app = build_app()


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app to run ``usl ARGS`` with: only the group that owns the command ``args`` name
    first, when one does (typer builds every registered command's parameters on each run, a
    sixth of a quick ``usl search``), else the whole app (help, completion, a misspelled
    command's message)."""
    owner = [group for group in GROUPS if args and args[0] in group.COMMANDS]
    return build_app(owner) if len(owner) == 1 else app


def environment_error(exc: BaseException) -> str | None:
    """The one line that says what of the machine a command met, for an exception that is not a
    bug of this code: a Kafka cluster that does not answer, a ``USL_HOME`` or file it cannot
    create or write. None for anything else (a bug keeps its traceback)."""
    kafka_errors = sys.modules.get("kafka.errors")  # loaded by whatever talked to Kafka
    if kafka_errors is not None and isinstance(exc, kafka_errors.KafkaError):
        from deploy.cli._common import load_settings

        try:
            configured = load_settings().bootstrap_servers
        except USLError:
            configured = None
        detail = str(exc) if str(exc).startswith(type(exc).__name__) else f"{type(exc).__name__}: {exc}"
        if configured:
            return (f"the Kafka cluster at KAFKA_BOOTSTRAP_SERVERS={configured} does not answer ({detail}); "
                    "check that it runs and that the variable names it")
        return (f"the local Kafka broker does not answer ({detail}); restart the stack with `usl down`, "
                "then `usl up --detach`")
    if isinstance(exc, OSError) and exc.strerror:
        from pathlib import Path

        said = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
        home = Path(os.environ.get("USL_HOME") or ".usl").absolute()
        target = Path(os.fsdecode(exc.filename)).absolute() if isinstance(exc.filename, (str, bytes)) else None
        if target is not None and (target == home or home in target.parents or target in home.parents):
            said += f" (USL_HOME={home} must be a directory this user can create and write)"
        return said
    return None


def _escape_what_output_cannot_encode() -> None:
    """Standard output writes a character its encoding cannot hold as an escape (``\\u540d``), as
    Python's standard error does. On a terminal or pipe that is not UTF-8 (a Windows console's
    cp1252, an ISO-8859-1 locale, ``PYTHONIOENCODING=ascii``) any non-ASCII result, session title
    or key name, and the ``·`` and ``—`` of usl's own lines, ended the command in a
    UnicodeEncodeError traceback. ``--json`` writes UTF-8 bytes and is not concerned."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None and sys.stdout.errors == "strict":
        reconfigure(errors="backslashreplace")


def main() -> None:
    """Console entry point: USL errors, and a Kafka cluster or a file system that refuses
    (:func:`environment_error`), become one clear line and exit code 2, never a traceback.

    Every command runs with umask 077, as the stack's processes do (deploy/process.py): a
    ``usl rebuild`` from an operator's shell (umask 022) wrote its index lines 0644 and
    ``usl ingest`` its follow positions 0644, while the docs promise 0600 whatever the umask.
    And with two malloc arenas (:func:`deploy.process.cap_malloc_arenas`), set before any
    command starts a thread."""
    from deploy.process import PRIVATE_UMASK, cap_malloc_arenas

    os.umask(PRIVATE_UMASK)
    cap_malloc_arenas()
    _escape_what_output_cannot_encode()
    try:
        app_for(sys.argv[1:2])()
    except USLError as exc:
        err().print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)  # one line, even when long
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as exc:
        said = environment_error(exc)
        if said is None:
            raise
        err().print(f"[red]error:[/] {escape(said)}", soft_wrap=True)
        raise SystemExit(2) from None
