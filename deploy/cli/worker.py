"""``usl worker``: one pipeline worker (the redaction and chunking agents of :mod:`streams.app`)."""

from __future__ import annotations

import sys

import typer

from deploy.cli._common import bootstrap_servers, load_settings

__all__ = ["COMMANDS", "register", "worker"]

COMMANDS = ("worker",)  # the names register() adds


def register(app: typer.Typer) -> None:
    """Add ``worker`` to ``app``."""
    app.command()(worker)


def worker(loglevel: str = typer.Option("warn", "--loglevel", metavar="LEVEL", help="crit | error | warn | info | debug")) -> None:
    """Run a pipeline worker (redaction + chunking agents); scale out by starting more."""
    from streams.app import run_worker

    settings = load_settings()
    sys.argv = [sys.argv[0], "worker"]  # faust parses argv; keep ours out of it
    run_worker(settings, bootstrap_servers(settings), loglevel=loglevel)
