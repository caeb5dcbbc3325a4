"""The ``usl`` command line.

One module per command group; each has a ``register(app)`` that adds its commands to the app
made here, and imports nothing of this package but the shared helpers (:mod:`._common`,
:mod:`._api`), so no module of the CLI imports another in a cycle:

- :mod:`.stack` ``up``, ``down``, ``status``, ``serve`` (the local stack; :mod:`deploy.stack`)
- :mod:`.ingest` ``ingest`` (one-shot and ``--follow``); :mod:`.worker` ``worker``;
  :mod:`.sinks` ``sink``, ``rebuild``; :mod:`.topics` ``topics create``
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

import typer

from deploy.cli import apikey, export, ingest, query, sessionql, sinks, stack, topics, worker
from deploy.cli._common import err, escape
from deploy.cli.typer_compat import install as _coerce_without_pydantic
from streams.exceptions import USLError

__all__ = ["app", "main"]

_coerce_without_pydantic()  # about 0.2 s less per command (deploy/cli/typer_compat.py)

app = typer.Typer(
    name="usl",
    help="USL Search: explainable, rebuildable search over a Kafka log of AI-agent sessions.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
for _group in (topics, ingest, stack, worker, sinks, apikey, export, query, sessionql):
    _group.register(app)


def main() -> None:
    """Console entry point: USL errors become one clear line and exit code 2, never a traceback."""
    try:
        app()
    except USLError as exc:
        err().print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)  # one line, even when long
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
