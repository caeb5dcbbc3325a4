"""``usl topics create``: every topic of this deployment with its configuration."""

from __future__ import annotations

import typer

from deploy.cli._common import command_broker, load_settings, out, print_json

__all__ = ["COMMANDS", "create", "register"]

COMMANDS = ("topics",)  # the names register() adds


def register(app: typer.Typer) -> None:
    """Add the ``topics`` group (``create``) to ``app``."""
    group = typer.Typer(help="Topics of this deployment.", no_args_is_help=True)
    group.command("create")(create)
    app.add_typer(group, name="topics")


def create(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Create every topic with its configuration (idempotent)."""
    from streams.topics import ensure_topics, topic_specs

    settings = load_settings()
    with command_broker(settings) as bootstrap:
        created = ensure_topics(bootstrap, settings)
    specs = [{"topic": s.name, "partitions": s.partitions, "config": s.config,
              "created": s.name in created} for s in topic_specs(settings)]
    if json_out:
        print_json({"bootstrap": bootstrap, "topics": specs})
    else:
        for s in specs:
            out().print(f"{'created' if s['created'] else 'exists '} {s['topic']} partitions={s['partitions']}")
