"""Through the planner API when one answers, else in this process: how ``usl search``, ``usl
sql``, ``usl sessionql``, ``usl status`` and ``usl export`` reach the planner.

The API asked is ``USL_API_URL``, or the local stack's while ``usl up`` runs one under
``USL_HOME`` (:func:`api_target`). Either way the command prints the same output and exits with
the same code (SPEC §12); only the planner, its indexes and the embedder are not loaded when
the API answers, which is what makes a search from the shell quick.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from deploy.cli._common import err, escape, fail, http_url, load_settings
from planner.exceptions import PlannerError
from streams.exceptions import USLError
from streams.settings import Settings

if TYPE_CHECKING:
    from planner.client import Client

__all__ = ["StackNotRunning", "api_client", "api_target", "call_planner", "in_process", "reading_bootstrap_servers",
           "through_api", "with_api"]

_T = TypeVar("_T")


def call_planner(principal_text: str | None, json_out: bool,
                 call: Callable[[Any, Any], dict[str, Any]],
                 route: tuple[str, str, dict[str, Any] | None] | None = None) -> dict[str, Any]:
    """Run one planner call for a CLI command: through the planner API when one answers
    (``route`` is its method, path and body), else in this process. A planner error becomes the
    API's JSON error body (``--json``) or one red line with its hint, and exit code 2."""
    current = load_settings()
    if route is not None:
        answer = through_api(current, principal_text, json_out, *route)
        if answer is not None:
            return answer
    return in_process(current, principal_text, json_out, call)


def in_process(current: Settings, principal_text: str | None, json_out: bool,
               call: Callable[[Any, Any], _T]) -> _T:
    """``call(planner, principal)`` on a planner of this process (``--as``, else
    ``USL_DEFAULT_PRINCIPAL``); a planner or broker error is the command's error."""
    from planner.acl import parse_principal

    try:
        principal = parse_principal(principal_text or current.acl_default)
        # Asked before the planner is imported: with no stack to read, the command says so at
        # once instead of after loading the indexes' libraries and the embedder (2-4 s).
        bootstrap = reading_bootstrap_servers(current)
        from planner.engine import Planner

        planner = Planner(current, bootstrap)
        try:
            return call(planner, principal)
        finally:
            planner.close()
    except PlannerError as exc:
        fail(_nothing_indexes(current, exc), json_out)
    except USLError as exc:
        fail(PlannerError(str(exc)), json_out)


class StackNotRunning(PlannerError):
    """Nothing to read: no cluster is configured and no local broker runs under ``USL_HOME``."""

    status, code = 503, "not_running"


def reading_bootstrap_servers(current: Settings) -> str:
    """The broker a command that only reads (search, sql, sessionql, export, status) asks: the
    configured cluster, else the local broker while it runs. Such a command starts none: a
    search of an empty ``USL_HOME`` left a broker running after it exited, to answer that no log
    existed; it now says what to start."""
    if current.bootstrap_servers:
        from deploy.cli._common import ClusterDown, configured_cluster

        try:
            return configured_cluster(current.bootstrap_servers)
        except ClusterDown as exc:
            from planner.exceptions import BrokerUnavailable

            raise BrokerUnavailable(str(exc)) from None
    from deploy.kafka.broker import local_broker_status

    running = local_broker_status(current)
    if running is None:
        raise StackNotRunning(f"no USL stack is running under USL_HOME={Path(current.home).resolve()}: "
                              "start it with `usl up --detach`")
    return running.bootstrap


def _nothing_indexes(current: Settings, exc: PlannerError) -> PlannerError:
    """``exc``, its hint saying what to start when it asks to wait for an index (503) or to
    ingest first (404) while no worker or sink of the local stack runs: nothing would ever
    index, and waiting would never end."""
    if exc.status not in (404, 503) or isinstance(exc, StackNotRunning) or current.bootstrap_servers:
        return exc
    from deploy.stack import running

    if any(name.startswith(("worker", "sinks")) for name in running(current)):
        return exc
    exc.hint = ("Nothing indexes while the stack is down: start it with `usl up --detach`, "
                "then ingest (`usl ingest PATH`) and ask again.")
    return exc


def _broker_gone(current: Settings, exc: Any, named: bool) -> Any:
    """``exc``, its hint saying how to start the local broker again when the local stack's API
    answers broker_unavailable because that broker stopped: it does not come back by itself, and
    "retry once the broker is back" would be waited on for ever."""
    if exc.code != "broker_unavailable" or named or current.bootstrap_servers:
        return exc
    from deploy.kafka.broker import local_broker_status

    if local_broker_status(current) is None:
        exc.hint = "The local Kafka broker of this stack has stopped: `usl up --detach` starts it again."
    return exc


def api_target(current: Settings) -> tuple[str, bool] | None:
    """The planner API the CLI should ask, and whether the user named it (``USL_API_URL``);
    else the API of the local stack under ``USL_HOME`` while ``usl up`` runs one; else None."""
    if current.api_url:
        return current.api_url, True
    pid_file = Path(current.home).resolve() / "run" / "api.pid"
    try:
        entry = json.loads(pid_file.read_text())
        pid, command = int(entry["pid"]), [str(part) for part in entry["cmd"]]
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no local API (or its process is gone): nothing to ask
    host, port = current.api_host, current.api_port
    for flag, value in pairwise(command):
        if flag == "--host":
            host = value
        elif flag == "--port":
            port = int(value) if value.isdigit() else port
    return http_url(host, port), False


def api_client(current: Settings, principal_text: str | None) -> tuple[Client, bool] | None:
    """A client of :func:`api_target` asking as the principal the CLI would run as in process:
    ``--as`` (or ``USL_DEFAULT_PRINCIPAL``) in ``X-USL-Principal``; with ``USL_API_KEY`` the
    key's principal, narrowed by ``--as`` when given."""
    target = api_target(current)
    if target is None:
        return None
    from planner.client import Client

    url, named = target
    principal = principal_text or (None if current.api_key else current.acl_default)
    return Client(url, principal=principal, api_key=current.api_key,
                  connect_timeout=2.0 if named else 0.5), named


def through_api(current: Settings, principal_text: str | None, json_out: bool, method: str, path: str,
                body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The API's answer to one request, or None when no API answers (the caller then runs
    in process). An error answer is the command's error, exactly as in process."""

    def ask(client: Client) -> dict[str, Any]:
        timeout = None
        if body is not None and str(body.get("freshness", "")).startswith("wait:"):
            timeout = client.timeout_for(str(body["freshness"]))
        return client.request(method, path, body, timeout=timeout)

    return with_api(current, principal_text, json_out, ask)


def with_api(current: Settings, principal_text: str | None, json_out: bool,
             call: Callable[[Client], _T]) -> _T | None:
    """``call(client)`` against the API that answers for ``current``, or None when none does:
    not configured or running, still starting, unreachable (a warning when it was named), or
    a local stack with keys while no key is set here (its files are ours to read in process).
    Any other error answer is the command's error, exactly as in process."""
    found = api_client(current, principal_text)
    if found is None:
        return None
    from planner.client import APIError, Unreachable

    client, named = found
    try:
        if not client.health().get("ready"):
            return None  # still starting: answering in process is quicker than waiting
        return call(client)
    except Unreachable as exc:
        if named:
            err().print(f"[yellow]warning:[/] {escape(str(exc))}; answering in this process")
        return None
    except APIError as exc:
        if exc.status == 401 and not current.api_key and not named:
            return None
        fail(_broker_gone(current, exc, named), json_out)
    finally:
        client.close()
