"""``usl up``, ``usl down``, ``usl status`` and ``usl serve``: the local stack from the command line.

``usl up`` starts the broker (if none is configured), the topics, the workers, the sinks and the
planner API under the supervisor of :mod:`deploy.stack`; ``usl down`` stops them. ``usl status``
asks the planner API when one answers, else reads the watermarks itself. ``usl serve`` is the
API process of the stack (:mod:`planner.api` under uvicorn).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import typer

from deploy.cli._api import reading_bootstrap_servers, through_api
from deploy.cli._common import (
    bare_host,
    bootstrap_servers,
    err,
    escape,
    fail,
    http_url,
    load_settings,
    out,
    print_json,
)
from streams.exceptions import USLError
from streams.names import LOG_ID, LOG_ID_HINT

if TYPE_CHECKING:
    from streams.settings import Settings

__all__ = ["COMMANDS", "down", "register", "serve", "status", "up"]

COMMANDS = ("status", "down", "up", "serve")  # the names register() adds


def register(app: typer.Typer) -> None:
    """Add ``status``, ``up``, ``down`` and ``serve`` to ``app``."""
    app.command()(status)
    app.command()(down)
    app.command()(up)
    app.command()(serve)


def _log_or_all(value: str | None) -> str | None:
    # A usage error, as every other command's --log: unchecked, the API answered 400 bad_query
    # and the in-process path 404 not_found for the same name (SPEC §12: the same output).
    if value is not None and not LOG_ID.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a log name: {LOG_ID_HINT}")
    return value


def status(
    json_out: bool = typer.Option(False, "--json", help="Print JSON (SPEC §12 status shape)."),
    log: str = typer.Option(None, "--log", metavar="NAME", callback=_log_or_all, help="Only this log."),
) -> None:
    """Committed L1 seq of each log and, per index, generation, watermark and lag; and how many
    records of each log were dead-lettered (`usl deadletters` lists them)."""
    settings = load_settings()
    path = "/v1/status" + (f"?log={quote(log, safe='')}" if log else "")
    report = through_api(settings, None, json_out, "GET", path, None)
    if report is None:
        from planner.exceptions import PlannerError

        try:
            bootstrap = reading_bootstrap_servers(settings)
            from planner.status import collect_status, for_principal

            report = for_principal(collect_status(settings, bootstrap, log_id=log), None)
        except PlannerError as exc:  # a --log that does not exist: 404 and exit 2, as the API's
            fail(exc, json_out)
    if json_out:
        print_json(report)
        return
    from planner.status_render import render_status

    render_status(report, out())
    from deploy.stack import running

    # A stack of `usl up` runs on this machine (checked without creating USL_HOME where none is).
    if (Path(settings.home).resolve() / "run" / "supervisor.pid").is_file() and "supervisor" in running(settings):
        _print_metrics_ports(settings, f"{settings.api_url or http_url(settings.api_host, settings.api_port)}/metrics")


def _print_metrics_ports(settings: Settings, api_metrics: str) -> None:
    """The /metrics address of every process of the local stack: the supervisor keeps each
    worker's and sink's port across restarts (deploy.stack), so a scrape configuration can name them."""
    from deploy.stack import metrics_ports

    ports = metrics_ports(settings)
    listed = ", ".join(f"{name} :{port}" for name, port in sorted(ports.items()))
    out().print(f"metrics: API {api_metrics}" + (f"; {listed} (http://127.0.0.1:PORT/metrics, the same "
                                                 "ports after every restart)" if listed else ""))


def down(keep_broker: bool = typer.Option(False, "--keep-broker",
                                         help="Leave the local broker (and local S3Proxy) running.")) -> None:
    """Stop the local stack started by `usl up --detach` (workers, sinks, API, local broker, and
    the local S3Proxy `usl up` started for USL_OBJECT_STORE)."""
    from deploy.kafka.broker import stop_broker
    from deploy.stack import stop_stack

    settings = load_settings()
    stopped = stop_stack(settings)
    for name in stopped:
        out().print(f"stopped {name}")
    if not keep_broker and not settings.bootstrap_servers and stop_broker(settings):
        out().print("stopped local Kafka broker")
    if not keep_broker and settings.object_store and not settings.s3_endpoint:
        from deploy.s3proxy.server import stop_s3proxy

        if stop_s3proxy(settings):
            out().print("stopped local S3Proxy (its buckets stay under USL_HOME)")


def _local_object_store_env(settings: Settings) -> dict[str, str]:
    """With ``USL_OBJECT_STORE`` set and no ``USL_S3_ENDPOINT``, the stack's object store is a
    local S3Proxy, started here as the broker is (and stopped by `usl down`): the endpoint and
    the generated keys its processes need. Nothing otherwise."""
    if not settings.object_store or settings.s3_endpoint:
        return {}
    from deploy.s3proxy.server import ensure_s3proxy

    store = ensure_s3proxy(settings)
    return {"USL_S3_ENDPOINT": store.endpoint, "USL_S3_ACCESS_KEY": store.access_key,
            "USL_S3_SECRET_KEY": store.secret_key}


def up(
    detach: bool = typer.Option(False, "--detach", help="Start in the background and return."),
    port: int = typer.Option(None, "--port", envvar="USL_API_PORT", metavar="PORT", help="Planner API port (default 8765)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Pipeline worker processes to start."),
) -> None:
    """Start the local stack: broker (if none is configured), topics, workers, sinks, planner API;
    with USL_OBJECT_STORE and no USL_S3_ENDPOINT, a local S3Proxy too.

    A supervisor restarts any stack process that exits or hangs (stops answering HTTP, see
    USL_LIVENESS_FAILURES); `usl down` stops everything. Run over a stack that is up, it starts
    the local broker again if that stopped (the supervisor does not restart it), where the
    stack's processes look for it; over processes whose supervisor is gone, it stops them and
    starts the stack again. The API port and USL_FOLLOW are read when the stack starts: over a
    running stack that serves another port or follows other paths, it says so (`usl down` first).
    """
    import os
    import time

    import httpx

    from deploy.jars import port_open
    from deploy.stack import (
        follow_paths,
        running,
        sink_children,
        start_process,
        stop_stack,
        supervise,
    )
    from planner.auth import check_bind
    from streams.topics import ensure_topics

    settings = load_settings()
    check_bind(settings, settings.api_host)  # before anything starts, not in a restart loop
    api_port = port or settings.api_port
    already = {name: pid for name, pid in running(settings).items() if pid != os.getpid()}
    if already and "supervisor" not in already:
        # Its supervisor is gone (killed, or the host's OOM killer): the processes run on with
        # nothing to restart them, and this said "already running". They are stopped and the
        # stack starts again under a supervisor of its own; every step downstream is idempotent.
        stopped = stop_stack(settings)
        out().print(f"the stack's supervisor had stopped, leaving {', '.join(sorted(stopped))} unsupervised: "
                    "stopped them; starting the stack again")
        already = {}
    if already:
        from deploy.kafka.broker import revive_broker

        # The supervisor restarts what of the stack exits, but not the local broker: with it
        # dead the stack answers every command with broker_unavailable, and this said "already
        # running". Start it again where the running processes look for it (or say why not).
        revived = revive_broker(settings)
        if revived:
            out().print(f"the local Kafka broker had stopped: started it again at {revived}; "
                        f"the running stack ({', '.join(sorted(already))}) reconnects to it")
            return
        out().print(f"already running: {', '.join(sorted(already))} (use `usl down` first to restart)")
        _say_what_follows(settings)
        if port is not None:  # asked for one (--port, USL_API_PORT); the default asks for none
            _say_where_the_api_is(settings, port)
        return
    url = http_url(settings.api_host, api_port)
    if port_open(api_port, settings.api_host):
        # Another stack (another USL_HOME) or any other server holds the port: our API could not
        # bind, yet the wait below and every later CLI command would be answered by that server.
        raise USLError(f"port {api_port} is taken: something already listens on {url}. "
                       "If it is another USL stack, stop it with `usl down` under its USL_HOME; "
                       "or start this one on another port (`usl up --port N`, USL_API_PORT).")
    bootstrap = bootstrap_servers(settings)
    ensure_topics(bootstrap, settings)
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "USL_HOME": str(Path(settings.home).resolve()),
           **_local_object_store_env(settings)}
    if detach:
        start_process(settings, "supervisor", ["up", "--port", str(api_port), "--workers", str(workers)], env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if "supervisor" not in running(settings):
                raise USLError(f"the stack failed to start; see {Path(settings.home).resolve() / 'logs'}")
            time.sleep(0.5)
        else:
            stop_stack(settings)
            raise USLError(f"the planner API did not answer on {url} within 180s; see {settings.home}/logs")
        out().print(f"USL Search is up: broker {bootstrap}, API {url} (search page at {url}/)")
        _print_metrics_ports(settings, f"{url}/metrics")
        out().print(f"logs in {Path(settings.home).resolve() / 'logs'}; stop with `usl down`")
        return
    children = {f"worker-{n + 1}": ["worker"] for n in range(workers)}
    children.update(sink_children(settings))  # USL_SINK_SHARDS: every kind as N shards
    children["api"] = ["serve", "--port", str(api_port), "--host", settings.api_host]
    follow = follow_paths(settings)
    if follow:  # USL_FOLLOW: a follower tails those transcripts into L1
        children["follow"] = ["ingest", "--follow", *follow]
    out().print(f"starting USL Search: broker {bootstrap}, API {url}; Ctrl-C stops it")
    supervise(settings, children, env, health={"api": f"{url}/healthz"})


def _say_what_follows(settings: Settings) -> None:
    """Over a running stack, ``USL_FOLLOW`` names what a new stack would follow, not what this
    one does: `export USL_FOLLOW=...; usl up --detach` over a stack started without it said
    "already running" and followed nothing, with nothing to tell why."""
    from deploy.stack import follow_paths, followed_paths

    wanted, following = follow_paths(settings), followed_paths(settings)
    if not wanted or set(wanted) == set(following):  # the same paths in any order
        return
    now = f"follows {', '.join(following)}" if following else "follows no transcripts"
    out().print(escape(f"USL_FOLLOW names {', '.join(wanted)}, but the running stack {now}: it takes USL_FOLLOW "
                       "when it starts: run `usl down`, then `usl up --detach` again to follow them."), soft_wrap=True)


def _say_where_the_api_is(settings: Settings, asked: int) -> None:
    """Over a running stack, `usl up --port N` (or USL_API_PORT) names the port a new stack's API
    would take; the running one keeps its own, and "already running" left N unserved."""
    from deploy.cli._api import api_target

    target = api_target(settings)
    if target is None or target[1] or target[0].endswith(f":{asked}"):
        return
    out().print(escape(f"its API is on {target[0]}, not port {asked}: the port is chosen when the stack starts; "
                       f"run `usl down`, then `usl up --detach --port {asked}` to move it."), soft_wrap=True)


def serve(
    host: str = typer.Option(None, "--host", envvar="USL_API_HOST", metavar="HOST", help="Interface to listen on."),
    port: int = typer.Option(None, "--port", envvar="USL_API_PORT", metavar="PORT", help="Port to listen on."),
) -> None:
    """Run the planner's HTTP API: POST /v1/search, /v1/sql, /v1/sessionql, /v1/events (ASP events
    into L1), /v1/traces and /v1/logs (OTLP GenAI spans and log records into L1); GET /v1/status, /v1/status/history, /v1/export,
    /metrics, /healthz, /openapi.json, and the search page at / (its files under /static).

    Beyond loopback (--host 0.0.0.0) it starts only with API keys (`usl apikey create`).
    """
    import uvicorn

    from planner.api import create_app
    from planner.auth import check_bind

    settings = load_settings()
    bind_host = bare_host(host or settings.api_host)
    bind_port = port or settings.api_port
    check_bind(settings, bind_host)
    bootstrap = bootstrap_servers(settings)
    err().print(f"planner API on {http_url(bind_host, bind_port, connect=False)}/")
    uvicorn.run(create_app(settings, bootstrap), host=bind_host, port=bind_port,
                log_level="warning", access_log=False)
