"""``usl status`` verdicts: a stalled sink, an index waiting on an open turn, a log's own events on
a shared L1 partition, a log that does not exist, and ``usl rebuild KIND`` refusing to leave a
log's chunk-keyed indexes under two policies."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console
from starlette.testclient import TestClient

import streams.redaction.events
import streams.redaction.policy
import streams.redaction.text
from deploy.testing import settings_env
from planner.api import create_app
from planner.exceptions import NotFound
from planner.status import build_status, collect_status, held_by
from planner.status_render import render_status
from sinks.watermarks import WatermarkPublisher, read_watermarks
from streams.redaction import RedactionPolicy
from streams.testing import append_events
from tests.planner.corpus import IndexBuilder, acl, interleaved, make_test_settings, session_events

STALL = {"what": "redaction policy", "built": "2fdadad94be4e113", "writes": "685d251b0a4acb35", "generationId": 41,
         "since": 1.0, "message": "built under ..."}


@contextmanager
def earlier_release() -> Iterator[None]:
    """The code of an earlier release: every module that redacts (or hashes) by default uses
    another policy (any option is part of the hash)."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (streams.redaction.policy, streams.redaction.events, streams.redaction.text):
            patch.setattr(module, "DEFAULT_POLICY", RedactionPolicy(env_dump_min_lines=4))
        yield


def _watermark(through: int, **extra: Any) -> dict[str, Any]:
    return {"generationId": 41, "builtThroughSeq": through, "committedAt": 1.0, "line": "live", **extra}


def test_a_stalled_index_says_so_and_what_ends_it() -> None:
    report = build_status({"rx": 30}, {("rx", "text"): _watermark(20, stalled=STALL),
                                       ("rx", "vector"): _watermark(30)}, {}, now=100.0)
    text = report["logs"]["rx"]["indexes"]["text"]
    # Before: 'catching up: 10 seqs behind', with nothing about a sink that cannot commit.
    assert text["verdict"] == ("stalled: built under redaction policy 2fdadad94be4e113, this code writes "
                               "685d251b0a4acb35; not indexing until `usl rebuild all --log rx`")
    assert text["stalled"] == {"what": "redaction policy", "built": "2fdadad94be4e113",
                               "writes": "685d251b0a4acb35", "generationId": 41, "since": 1.0,
                               "remedy": "usl rebuild all --log rx"}
    assert text["lagSeqs"] == 10 and text["builtThroughSeq"] == 20  # the contract's fields stay
    assert report["logs"]["rx"]["indexes"]["vector"]["stalled"] is None
    out = io.StringIO()
    render_status(report, Console(file=out, width=250))
    assert ("not indexing text: built under redaction policy 2fdadad94be4e113, the sinks write 685d251b0a4acb35; "
            "run `usl rebuild all --log rx`") in out.getvalue()


def test_an_analyzer_stall_names_each_kind_s_own_rebuild() -> None:
    analyzer = {"what": "text analyzer", "built": "a/5", "writes": "a/6", "generationId": 41, "since": 1.0}
    report = build_status({"rx": 30}, {
        ("rx", "text"): _watermark(20, stalled={**analyzer, "remedy": "usl rebuild text --log rx"}),
        ("rx", "toolresults"): _watermark(20, stalled={**analyzer, "remedy": "usl rebuild toolresults --log rx"})},
        {}, now=100.0, held={("rx", 21): {"seq": 21, "sessionId": "s1", "turnId": None}})
    text = report["logs"]["rx"]["indexes"]["text"]
    assert text["verdict"] == ("stalled: built under text analyzer a/5, this code writes a/6; not indexing until "
                               "`usl rebuild text --log rx`")
    out = io.StringIO()
    render_status(report, Console(file=out, width=250))
    assert ("not indexing text, toolresults: built under text analyzer a/5, the sinks write a/6; run "
            "`usl rebuild text --log rx` and `usl rebuild toolresults --log rx`") in out.getvalue()
    assert "held back by" not in out.getvalue()  # it waits for the rebuild, not for an event


def test_a_stalled_shard_stalls_its_kind() -> None:
    shards = {"shard-0-of-2": _watermark(20), "shard-1-of-2": _watermark(25, stalled=STALL)}
    report = build_status({"rx": 30}, {("rx", "text"): _watermark(20, shards=shards, shard="shard-0-of-2")}, {},
                          now=100.0)
    text = report["logs"]["rx"]["indexes"]["text"]
    assert text["verdict"].startswith("stalled: built under redaction policy")
    assert text["stalled"]["shard"] == "shard-1-of-2"


def test_an_index_held_by_an_open_turn_is_waiting() -> None:
    raw = orjson.dumps({"sessionId": "s-open", "turnId": "t-9", "time": "2099-01-01T00:00:00Z"})
    key = ("rx", 21)
    report = build_status({"rx": 30}, {("rx", "text"): _watermark(20)}, {key: 10.0}, now=500.0,
                          held={key: held_by(26, raw)}, pending={key: 2}, open_unit={key})
    text = report["logs"]["rx"]["indexes"]["text"]
    # Before: 'behind: 10 seqs, oldest unindexed event appended 490s ago', counting other logs' seqs.
    assert text["verdict"] == "waiting: an open turn holds seq 26; it is indexed once the turn ends or idles out"
    assert text["lagSeqs"] == 2 and text["heldBy"]["seq"] == 26
    # Nothing of the log above the watermark: caught up, whatever other logs appended.
    caught = build_status({"rx": 30}, {("rx", "text"): _watermark(20)}, {}, now=500.0, pending={key: 0})
    assert caught["logs"]["rx"]["indexes"]["text"]["verdict"] == "ok: caught up"
    assert caught["logs"]["rx"]["indexes"]["text"]["heldBy"] is None


def _flat(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [event for group in groups for event in group]


@pytest.mark.kafka
def test_status_on_a_shared_partition_names_the_logs_own_event(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = make_test_settings(tmp_path, kafka_bootstrap, l1_partitions=1)
    access = acl("acme", "*")
    rx = session_events("rx", "rx-s", access, turns=2, words="alpha beta", open_last=True)
    closed = append_events(settings, _flat(rx[:2]))
    bulk = append_events(settings, _flat(session_events("bulk", "bulk-0", access, turns=2, words="gamma delta")))
    head = append_events(settings, rx[2])
    publisher = WatermarkPublisher(kafka_bootstrap, settings)
    publisher.publish({"logId": "rx", "kind": "text", "line": "live", "generationId": 1, "builtThroughSeq": closed,
                       "committedAt": 1.0, "manifest": "", "versions": {}})
    publisher.close()
    entry = collect_status(settings, kafka_bootstrap, log_id="rx")["logs"]["rx"]
    text = entry["indexes"]["text"]
    # Before: held back by seq closed + 1, an event of session 'bulk-0' of log 'bulk', and
    # lagSeqs counted the bulk log's seqs too.
    assert text["heldBy"]["seq"] == bulk + 1 and text["heldBy"]["sessionId"] == "rx-s"
    assert text["lagSeqs"] == head - bulk
    assert text["verdict"] == (f"waiting: an open turn holds seq {bulk + 1}; it is indexed once the turn "
                               "ends or idles out")
    assert entry["indexes"]["structured"]["lagSeqs"] == closed + head - bulk  # missing: every rx event
    open_turn = rx[2][0]["turnId"]
    append_events(settings, [{**rx[2][-1], "eventId": "rx-s-end", "type": "turn.ended", "turnId": open_turn,
                              "fields": {}}])
    ended = collect_status(settings, kafka_bootstrap, log_id="rx")["logs"]["rx"]["indexes"]["text"]
    assert ended["verdict"].startswith("catching up: ") and ended["lagSeqs"] == head - bulk + 1


@pytest.mark.kafka
def test_status_of_a_log_that_does_not_exist_is_not_found(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = make_test_settings(tmp_path, kafka_bootstrap)
    append_events(settings, _flat(session_events("rx", "rx-s", acl("acme", "*"), turns=1, words="alpha")))
    # Before: a row of 'missing' indexes for the log, exit code 0.
    with pytest.raises(NotFound) as missing:
        collect_status(settings, kafka_bootstrap, log_id="nosuch")
    assert missing.value.message == "no log named 'nosuch'"
    # Entered, so the consumers its status collects keep are closed when it shuts down.
    with TestClient(create_app(settings, kafka_bootstrap, planner=object()), base_url="http://localhost:8765") as client:
        response = client.get("/v1/status", params={"log": "nosuch"})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
        assert client.get("/v1/status", params={"log": "rx"}).status_code == 200
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "status", "--log", "nosuch"],
                          env={**settings_env(settings), "USL_API_URL": ""}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no log named 'nosuch'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.kafka
def test_rebuilding_one_kind_under_another_policy_is_refused(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = make_test_settings(tmp_path, kafka_bootstrap)
    with earlier_release():
        builder = IndexBuilder(settings, kafka_bootstrap, "default")
        builder.append(interleaved("default")[0])
        builder.commit()
        builder.close()
    before = read_watermarks(kafka_bootstrap, settings)[("default", "text")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "deploy.cli", "rebuild", *args], env=settings_env(settings),
                              capture_output=True, text=True, timeout=400, check=False)

    refused = cli("text", "--log", "default")
    # Before: 'rebuilt text ... now active', and every search of the log answered 503 index_mismatch.
    assert refused.returncode == 2, refused.stdout + refused.stderr
    message = " ".join(refused.stderr.split())
    assert "rebuilding text alone would build it under redaction policy" in message
    assert "structured (redaction policy" in message and "vector (redaction policy" in message
    assert "usl rebuild all --log default" in message and "--allow-mismatch" in message
    assert read_watermarks(kafka_bootstrap, settings)[("default", "text")] == before  # nothing switched
    # A kind no search joins by chunk id is rebuilt alone as before.
    assert cli("toolresults", "--log", "default").returncode == 0
    allowed = cli("text", "--log", "default", "--allow-mismatch")
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "now active" in allowed.stdout


def test_one_policy_goes_in_the_title_and_a_verdict_fits_80_columns() -> None:
    every = {("rx", kind): _watermark(30, redactionPolicy="306c8b9cb001d554")
             for kind in ("text", "vector", "structured", "analytics", "toolresults")}
    report = build_status({"rx": 30}, every, {}, now=100.0)
    for index in report["logs"]["rx"]["indexes"].values():
        index["redactionPolicy"] = "306c8b9cb001d554"
    out = io.StringIO()
    render_status(report, Console(file=out, width=80))
    shown = out.getvalue()
    assert "redaction policy 306c8b9c" in shown.splitlines()[0]
    assert shown.count("ok: caught up") == 5  # one line each, not 'ok:' over 'caught up'
    # Indexes under different policies keep the column, which shows which is which.
    report["logs"]["rx"]["indexes"]["text"]["redactionPolicy"] = "2fdadad94be4e113"
    out = io.StringIO()
    render_status(report, Console(file=out, width=200))
    assert "policy" in out.getvalue().splitlines()[2] and "2fdadad9" in out.getvalue()


def test_indexes_without_a_policy_leave_it_in_the_title_and_a_piped_table_keeps_its_width() -> None:
    """As a stack reports it: the vector and analytics indexes state no redaction policy. The
    policy still goes in the title, and piped (no terminal, rich's default of 80 columns) a long
    verdict stays on its row's one line instead of wrapping over eight."""
    marks = {("rx", kind): _watermark(30, redactionPolicy=None if kind in ("vector", "analytics") else "306c8b9cb001d554")
             for kind in ("text", "vector", "structured", "analytics", "toolresults")}
    report = build_status({"rx": 9000}, marks, {}, now=100.0)
    for kind, index in report["logs"]["rx"]["indexes"].items():
        index["redactionPolicy"] = None if kind in ("vector", "analytics") else "306c8b9cb001d554"
        index["verdict"] = "behind: 8970 seqs, oldest unindexed event appended 169s ago"
    out = io.StringIO()
    render_status(report, Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    assert "redaction policy 306c8b9c" in lines[0]
    assert "policy" not in lines[2]
    rows = [line for line in lines if "behind: 8970 seqs, oldest unindexed event appended 169s ago" in line]
    assert len(rows) == 5
