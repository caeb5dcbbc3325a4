"""SPEC §9: every dashboard panel's query is checked against a real Prometheus scraping the
real services.

One test starts the real processes of a deployment against the session's broker: a
``usl worker``, a ``usl sink`` for text, structured, analytics and tool results, a second
``usl sink`` for vectors and the planner API (``usl serve``), each serving ``/metrics`` on its
own port. It ingests the sample sessions through ``usl ingest`` (one malformed line, one file
twice) and synthetic sessions, and makes the events a healthy run rarely sees happen for real:

- a record that is not an ASP event on L1 → the worker dead-letters it (``schema``);
- the same file ingested twice → the worker skips duplicate eventIds;
- a secret in a tool output → a redaction;
- searches before any index exists → a tail scan, and a vector fallback (hybrid → text);
- a vector sink started late with a backlog and ``USL_SINK_BATCH_SIZE=2`` → more than
  ``MAX_SEGMENTS`` segments, so a segment merge;
- a tampered cursor → a cursor refusal; searches in every freshness mode.

Then a real Prometheus scrapes the four targets every second, and every panel expression of
``deploy/grafana/dashboards/usl.json`` must return data and every alert expression of
``deploy/prometheus/alerts.yml`` must evaluate without error.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaProducer

from deploy.testing import Stack, as_grafana_sends, free_port, settings_env
from sinks.testing import wait_for_watermarks
from streams.l1 import LogRegistry
from streams.settings import Settings
from streams.testing import append_events, interleave, l1_seq, session_events
from streams.topics import Topics

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "usl.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
EXAMPLES = ROOT / "examples" / "sessions"
FIRST_KINDS = ("text", "structured", "analytics", "toolresults")
SECRET = "ghp_" + "R4nd0mT0kenV4lue" * 2 + "abcd"
TIMEOUT = 180.0


def panel_exprs() -> list[tuple[str, str]]:
    """(panel title, expression) of every panel target, rows' children included, with the
    dashboard's variables substituted as Grafana does (every log and index kind selected)."""
    panels = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return [(p["title"], as_grafana_sends(t["expr"])) for p in panels for t in p.get("targets", [])]


def alert_exprs() -> list[tuple[str, str]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [(rule["alert"], rule["expr"]) for group in doc["groups"] for rule in group["rules"]]


def get_json(url: str, *, timeout: float = 10.0) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body: dict[str, Any] = json.load(response)
            return body
    except urllib.error.HTTPError as exc:  # Prometheus puts a parse error in a 400 body
        return {"status": "error", "error": exc.read().decode(errors="replace")}


def promql(base: str, expr: str) -> dict[str, Any]:
    return get_json(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")


def post_search(api: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{api}/v1/search", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_until(check: Callable[[], bool], what: str, *, timeout: float = TIMEOUT,
               alive: Callable[[], str | None] = lambda: None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        problem = alive()
        assert problem is None, problem
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.5)


def api_ready(api: str) -> bool:
    try:
        return bool(get_json(f"{api}/healthz", timeout=2).get("ready"))
    except OSError:
        return False


def exited(stack: Stack) -> str | None:
    """Which stack process died, with its log tail (a crashed service fails the test fast)."""
    for name, proc in stack.procs.items():
        if proc.poll() is not None:
            return f"{name} exited with {proc.returncode}:\n{stack.log_text(name)[-4000:]}"
    return None


def ingest(settings: Settings, path: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "ingest", str(path), "--json"],
                          env=settings_env(settings), capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def append_foreign_record(settings: Settings, log_id: str = "default") -> None:
    """Write a JSON record that is no ASP event straight onto the log's L1 partition, as a
    misconfigured producer would; the redaction agent must dead-letter it."""
    registry = LogRegistry(settings.bootstrap_servers or "", settings)
    partition = registry.partition_of(log_id)
    assert partition is not None
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    producer.send(Topics.from_settings(settings).l1, partition=partition,
                  value=b'{"note": "written by something that is not an ASP producer"}').get(timeout=30)
    producer.close()


@pytest.fixture
def stack(make_settings: Callable[..., Settings]) -> Iterator[Stack]:
    # Batches of two chunks: many generations, so the vector sink merges segments.
    running = Stack(make_settings(sink_batch_size=2, sink_batch_seconds=0.3, tick_every_seqs=16))
    try:
        yield running
    finally:
        running.close()


def test_every_panel_and_alert_works_on_prometheus_scraping_the_real_services(
    stack: Stack, tmp_path: Path,
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed; CI must install it (scripts/install-test-tools)")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    settings = stack.settings
    ports = {"worker": free_port(), "sinks": free_port(), "sink-vector": free_port(), "api": free_port()}
    api = f"http://127.0.0.1:{ports['api']}"
    alive = lambda: exited(stack)  # noqa: E731

    # Sinks except vector, and the API, before any event or worker exists.
    stack.sinks(",".join(FIRST_KINDS), env={"USL_METRICS_PORT": str(ports["sinks"])})
    stack.start("api", "serve", "--port", str(ports["api"]))

    # Real-format input: the samples, one malformed line, one file twice (the second time nothing).
    samples = tmp_path / "samples"
    samples.mkdir()
    claude = samples / "claude-code-session.jsonl"
    claude.write_text((EXAMPLES / "claude-code-session.jsonl").read_text().rstrip("\n")
                      + '\n{"type": "user", "uuid": "broken-line", "message": {"role": \n')
    first = ingest(settings, claude)
    assert first["rejected"] == 1 and first["rejectedByReason"], first
    again = ingest(settings, claude)  # SPEC §12: a re-import appends nothing
    assert again["eventsAppended"] == 0 and again["duplicatesSkipped"] == first["eventsAppended"] > 0
    ingest(settings, EXAMPLES / "openai-chat.json")
    sessions = [session_events(f"prom-{n}", turns=3, seed=n, long_output_words=60,
                               secret=SECRET if n == 0 else None) for n in range(6)]
    events = interleave(*sessions)
    # Duplicate eventIds still reach L1 from producers other than usl ingest; the worker drops them.
    append_events(settings, events[:5])
    append_events(settings, events[: len(events) // 2])
    append_foreign_record(settings)
    seq = append_events(settings, events[len(events) // 2:])
    assert seq == l1_seq(settings)

    wait_until(lambda: api_ready(api), "the planner API", alive=alive)
    # No index has a generation yet: the answer is a tail scan of L1, vector left out.
    status, cold = post_search(api, {"query": "refund rounding", "freshness": "latest"})
    assert status == 200, cold
    assert cold["freshness"]["tailScan"] is not None, cold["freshness"]
    assert cold["freshness"]["fallbacks"], cold["freshness"]

    stack.worker(env={"USL_METRICS_PORT": str(ports["worker"])})
    wait_for_watermarks(settings, seq, FIRST_KINDS, timeout=TIMEOUT)
    status, text_only = post_search(api, {"query": "kafka broker timeout", "freshness": "indexed"})
    assert status == 200 and text_only["freshness"]["fallbacks"], text_only

    # The vector sink starts late on a backlog of chunks, committing two at a time.
    stack.sinks("vector", name="sink-vector", env={"USL_METRICS_PORT": str(ports["sink-vector"])})
    wait_for_watermarks(settings, seq, ("vector", *FIRST_KINDS), timeout=TIMEOUT)
    assert exited(stack) is None, exited(stack)

    cursor = None
    for freshness in ("indexed", "latest", "wait:5"):
        status, body = post_search(api, {"query": "deploy refund", "freshness": freshness,
                                         "k": 2, "explain": True})
        assert status == 200, (freshness, body)
        assert body["results"] and body["freshness"]["mode"] == freshness.split(":")[0]
        cursor = body["cursor"] or cursor
    assert cursor, "no search returned a cursor to page with"
    status, page = post_search(api, {"query": "deploy refund", "freshness": "wait:5", "k": 2,
                                     "explain": True, "cursor": cursor})
    assert status == 200, page
    tampered = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")
    status, refused = post_search(api, {"query": "deploy refund", "freshness": "wait:5", "k": 2,
                                        "explain": True, "cursor": tampered})
    assert status == 400 and refused["error"]["code"] == "bad_cursor", refused

    # A real Prometheus scraping the four processes every second, with the alert rules.
    web = f"127.0.0.1:{free_port()}"
    base = f"http://{web}"
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": "usl-workers",
             "static_configs": [{"targets": [f"127.0.0.1:{ports['worker']}"]}]},
            {"job_name": "usl-sinks",
             "static_configs": [{"targets": [f"127.0.0.1:{ports['sinks']}"], "labels": {"sink": "other"}},
                                {"targets": [f"127.0.0.1:{ports['sink-vector']}"], "labels": {"sink": "vector"}}]},
            # The planner's /metrics asks Kafka for the freshness gauges: on a loaded machine
            # that takes more than the 1 s the other scrapes may take.
            {"job_name": "usl-planner", "scrape_interval": "5s", "scrape_timeout": "5s",
             "static_configs": [{"targets": [f"127.0.0.1:{ports['api']}"]}]},
        ],
    }))
    log_path = tmp_path / "prometheus.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address={web}"],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            def prometheus_alive() -> str | None:
                if server.poll() is not None:
                    return f"prometheus exited:\n{log_path.read_text()[-4000:]}"
                return exited(stack)

            def scraped_enough() -> bool:
                # rate() needs two samples in its window; ask for more of every target.
                try:
                    answer = promql(base, 'count_over_time(up{job=~"usl-.*"}[1m])')
                except OSError:
                    return False
                counts = [float(r["value"][1]) for r in answer.get("data", {}).get("result", [])]
                return len(counts) == 4 and min(counts) >= 4

            wait_until(scraped_enough, "four scrapes of every target", timeout=90, alive=prometheus_alive)
            # Every target answers: the cheap ones at every scrape, the planner (whose /metrics
            # asks Kafka) at least at most scrapes of the last minute.
            targets = get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]
            answered = promql(base, 'avg_over_time(up{job=~"usl-.*"}[1m])')["data"]["result"]
            share = {r["metric"]["instance"]: float(r["value"][1]) for r in answered}
            down = [(t["labels"]["job"], t["scrapeUrl"], t["lastError"]) for t in targets
                    if (share.get(t["labels"]["instance"], 0.0) < 0.5 if t["labels"]["job"] == "usl-planner"
                        else t["health"] != "up")]
            assert not down, f"targets not up: {down}"

            empty, broken = [], []
            for title, expr in panel_exprs():
                answer = promql(base, expr)
                if answer.get("status") != "success":
                    broken.append((title, expr, answer.get("error")))
                elif not answer["data"]["result"]:
                    empty.append((title, expr))
            for name, expr in alert_exprs():
                answer = promql(base, expr)
                if answer.get("status") != "success":
                    broken.append((name, expr, answer.get("error")))
            assert not broken, f"expressions Prometheus rejects: {broken}"
            assert not empty, "dashboard panels without data on the real services:\n" + "\n".join(
                f"  {title}: {expr}" for title, expr in empty)

            # The rule manager evaluated every alert without error.
            def rules_evaluated() -> bool:
                groups = get_json(f"{base}/api/v1/rules")["data"]["groups"]
                return all(rule.get("health") == "ok" for g in groups for rule in g["rules"])

            wait_until(rules_evaluated, "every alert rule to be evaluated", timeout=60, alive=prometheus_alive)
            groups = get_json(f"{base}/api/v1/rules")["data"]["groups"]
            assert {rule["name"] for g in groups for rule in g["rules"]} == {n for n, _ in alert_exprs()}
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
