"""``usl deadletters``: what was rejected and why, newest first, without a Kafka client.

Reads the dead-letter topic from the broker, as ``usl ingest`` writes it (the configured
cluster, else the local broker, stopped again afterwards if this command started it). There is no API route: a dead letter holds a redacted excerpt
of any tenant's input, and the API's keys read one tenant's sessions only.
"""

from __future__ import annotations

from typing import Any

import typer

from deploy.cli._common import command_broker, escape, load_settings, out, print_json
from streams.names import LOG_ID, LOG_ID_HINT

__all__ = ["COMMANDS", "deadletters", "register", "source_of"]

COMMANDS = ("deadletters",)  # the names register() adds
_RAW_CHARS = 120
_REASON_CHARS = 160


def register(app: typer.Typer) -> None:
    """Add ``deadletters`` to ``app``."""
    app.command("deadletters")(deadletters)


def _log_or_all(value: str | None) -> str | None:
    if value is not None and not LOG_ID.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a log name: {LOG_ID_HINT}")
    return value


def deadletters(
    log: str | None = typer.Option(None, "--log", callback=_log_or_all, metavar="NAME",
                                   help="Only the dead letters of this log (default: every log; a record "
                                        "unreadable before its log was known names none)."),
    limit: int = typer.Option(20, "--limit", min=1, max=10000, help="How many, newest first."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: {\"deadLetters\": [...]}."),
    resolved: bool = typer.Option(False, "--resolved",
                                  help="Also list the dead letters a later import resolved (the record "
                                       "imported since: a line cut off then, completed; or an event a "
                                       "receiver refused, appended by a later request), marked resolved."),
) -> None:
    """List pending dead letters (records rejected by ingest, the pipeline or a sink), newest
    first: time, stage, source (file:line or topic[partition]@offset), log, reason and the raw
    record, redacted (again, under this version's redaction policy) and trimmed (--json: up to
    4 KiB each). A record a later import of its file took (a last line cut off then, completed
    since), or an event a receiver refused that a later request appended, is no longer pending:
    its letter is left out unless --resolved."""
    from streams.l1 import read_dead_letters

    settings = load_settings()
    with command_broker(settings) as bootstrap:
        letters = [_redacted(letter) for letter in read_dead_letters(bootstrap, settings, log_id=log, limit=limit,
                                                                     resolved=resolved)]
    if json_out:
        print_json({"deadLetters": [{**letter, "sourceText": source_of(letter)} for letter in letters],
                    "log": log, "limit": limit})
        return
    console = out()
    if not letters:
        console.print(f"no dead letters{f' of log {log!r}' if log else ''}")
        return
    for letter in letters:
        console.print(escape(_line(letter)), soft_wrap=True, highlight=False)


def _redacted(letter: dict[str, Any]) -> dict[str, Any]:
    """``letter`` with its reason and raw excerpt redacted again under this code's policy: a dead
    letter was redacted once, when it was written, under the policy of that day, and the topic is
    never rebuilt; a secret a later policy removes (2.7: a Twilio auth token beside its SID) must
    not be shown by `usl deadletters` after the upgrade either. Redaction is idempotent, so a
    letter written under this policy shows as it was written."""
    from streams.redaction import redact_text
    from streams.redaction.text import redact_excerpt

    redacted = dict(letter)
    if isinstance(letter.get("reason"), str):
        redacted["reason"] = redact_text(letter["reason"])[0]
    if isinstance(letter.get("raw"), str):
        # 2.8: a record cut short keeps no cut token's start (a letter written under 2.7 did).
        redacted["raw"] = redact_excerpt(letter["raw"])
    return redacted


def source_of(letter: dict[str, Any]) -> str:
    """Where the rejected record came from: ``file:line`` (ingest), ``topic[partition]@offset``
    (a topic the pipeline read), else ``?``."""
    if isinstance(letter.get("record"), str) and letter["record"]:
        return str(letter["record"])
    source = letter.get("source")
    if isinstance(source, dict) and "topic" in source:
        return f"{source.get('topic')}[{source.get('partition')}]@{source.get('offset')}"
    return "?"


def _line(letter: dict[str, Any]) -> str:
    raw = " ".join(str(letter.get("raw") or "").split())
    reason = " ".join(str(letter.get("reason") or "").split())
    state = f"  resolved {letter['resolvedAt']}" if letter.get("resolvedAt") else ""
    return (f"{letter.get('time') or '?'}{state}  {letter.get('stage') or '?'}  {source_of(letter)}  "
            f"log={letter.get('logId') or '?'}  {_trim(reason, _REASON_CHARS)}  | {_trim(raw, _RAW_CHARS)}")


def _trim(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
