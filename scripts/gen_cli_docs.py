"""Regenerate docs/cli.md from the typer app (run: .venv/bin/python scripts/gen_cli_docs.py).

tests/test_docs.py checks that the committed file covers every command and option.
"""

from __future__ import annotations

from pathlib import Path

import typer

from deploy.cli import app
from deploy.cli._help import flowing

HEADER = """# CLI reference

`usl` is the one command line of USL Search. Option defaults can come from the environment
(see `docs/configuration.md`); `--json` prints machine-readable output (UTF-8, as the API
answers); human output on a terminal or pipe that is not UTF-8 writes a character its encoding
cannot hold as an escape (`\\u540d`); progress goes to stderr. Errors print one line on stderr and exit with code 2, never a
traceback: `error: ...` for what went wrong while running, and for a usage error (an unknown
option, a missing argument, a bad value) ``error: ... (see `usl COMMAND --help`)``. A command
stopped with Ctrl-C exits with code 130, but for the two that run until they are stopped:
`usl ingest --follow` and `usl up` in the foreground stop cleanly on Ctrl-C (or SIGTERM) and exit
with code 0. A command whose output is piped into a reader that stops early (`usl search x | head
-1`, `usl export | head`) stops quietly with exit code 141, as a program SIGPIPE ends (it exited 1,
as for an error, and a large `--json` or export write cut short exited 0, its rows lost unsaid).
`usl --version` prints the package version and the
redaction policy (version and hash) and chunker version this code writes into every index.
An argument that starts with `-` (a flag pasted as the query) is read as an option; put it after
`--`, options first: `usl search --mode text -- '--force-with-lease'`.
"""


def commands(group: object, prefix: str) -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for name in sorted(group.commands):  # type: ignore[attr-defined]
        sub = group.commands[name]  # type: ignore[attr-defined]
        if hasattr(sub, "commands"):
            found += commands(sub, f"{prefix} {name}")
        else:
            found.append((f"{prefix} {name}", sub))
    return found


def render() -> str:
    lines = [HEADER]
    top = typer.main.get_command(app)
    for full, command in [("usl", top), *commands(top, "usl")]:
        lines += [f"## `{full}`", "", flowing(command.help), ""]  # type: ignore[attr-defined]
        params = [p for p in command.params if p.name != "help"]  # type: ignore[attr-defined]
        if params:
            lines += ["| argument / option | default | meaning |", "|---|---|---|"]
        for p in params:
            if p.param_type_name == "argument":
                # Named as the usage line names it, and required only when it is.
                name = (p.metavar or p.name.upper()) + ("..." if p.nargs != 1 and not (p.metavar or "").endswith("...") else "")
                need = "required" if p.required else f"`{p.default}`"
                lines.append(f"| `{name}` | {need} | {(getattr(p, 'help', '') or '').replace('|', '/')} |")
                continue
            default = None if callable(p.default) else p.default
            env = f" (env `{p.envvar}`)" if p.envvar else ""
            value = f" {p.metavar}" if p.metavar else ""
            lines.append(f"| `{' / '.join(p.opts)}{value}` | `{default}` | {(p.help or '').replace('|', '/')}{env} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if "--print" in sys.argv:
        sys.stdout.write(render())
    else:
        Path(__file__).resolve().parents[1].joinpath("docs", "cli.md").write_text(render())
