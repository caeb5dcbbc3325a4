"""A log whose line the sink cannot extend (built under another redaction policy or chunker than
the sink writes) stalls alone: every other log keeps indexing, the stall is published with the
line's watermark for ``usl status``, and ``usl rebuild all --log LOG`` ends it.

Before, the sink's commit to such a line raised ``RedactionPolicyMismatchError`` and the whole
sink process exited, on every restart again: no log was indexed any more."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import sinks.text.base as sinks_text_base
import sinks.text_writer as sinks_text_writer
from deploy.testing import Stack, settings_env
from planner.status import collect_status
from sinks.generations import GenerationStore, Manifest
from sinks.rebuild import rebuild
from sinks.runner import SinkRunner, index_root, stall_of, watermark_of
from sinks.service import make_writer, pipeline_versions
from sinks.watermarks import WatermarkPublisher, read_watermarks
from streams.settings import Settings
from streams.testing import append_events, interleave, session_events
from streams.topics import ensure_topics

KIND = "structured"


def _manifest(policy: str, **chunker: Any) -> Manifest:
    return Manifest(kind=KIND, log_id="rx", line="live", generation_id=7, built_through_seq=3, schema_version="1",
                    asp_version="1", chunker=chunker, embedding=None, redaction_policy_hash=policy)


def test_a_line_of_another_policy_or_chunker_is_stalled_by_one_rule() -> None:
    versions = {"redactionPolicy": "new", "chunker": {"version": "3", "targetTokens": 512}}
    assert stall_of(_manifest("new", version="3", targetTokens=512), versions) is None
    assert stall_of(None, versions) is None
    policy = stall_of(_manifest("old", version="3", targetTokens=512), versions)
    assert policy is not None
    assert (policy["what"], policy["built"], policy["writes"], policy["generationId"]) == (
        "redaction policy", "old", "new", 7)
    assert "usl rebuild all --log rx" in policy["message"]
    chunker = stall_of(_manifest("new", version="3", targetTokens=768), versions)
    assert chunker is not None
    assert (chunker["what"], chunker["built"], chunker["writes"]) == ("chunker", "targetTokens=768", "targetTokens=512")
    # A setting the generation does not record is no evidence; a sink that reads no chunks
    # (tool results) is not stalled by the chunker.
    assert stall_of(_manifest("new", version="3"), versions) is None
    assert stall_of(_manifest("new", version="3", targetTokens=768), versions, chunk_based=False) is None


def test_a_text_line_of_another_analyzer_is_stalled_with_its_own_rebuild() -> None:
    versions = {"redactionPolicy": "new", "chunker": {"version": "3"}}
    current = Manifest(kind="text", log_id="rx", line="live", generation_id=4, built_through_seq=3,
                       schema_version="3", asp_version="1", chunker={"version": "3"}, embedding=None,
                       redaction_policy_hash="new", extra={"analyzer": "nfkc+words+spaceless-chars/5"})
    stall = stall_of(current, versions, analyzer="json-strings+no-ansi+nfkc+words+spaceless-chars/6")
    assert stall is not None
    assert (stall["what"], stall["built"], stall["writes"], stall["remedy"]) == (
        "text analyzer", "nfkc+words+spaceless-chars/5", "json-strings+no-ansi+nfkc+words+spaceless-chars/6",
        "usl rebuild text --log rx")
    assert stall_of(current, versions, analyzer="nfkc+words+spaceless-chars/5") is None
    assert stall_of(current, versions) is None  # a writer without an analyzer (structured, vector)
    # A pipeline change outranks it: every kind must be rebuilt then, this one with them.
    older = stall_of(dataclasses.replace(current, redaction_policy_hash="old"), versions, analyzer="x")
    assert older is not None and older["remedy"] == "usl rebuild all --log rx"


def test_a_tool_results_line_of_another_schema_is_stalled_with_its_own_rebuild() -> None:
    versions = {"redactionPolicy": "new", "chunker": {"version": "3"}}
    current = Manifest(kind="toolresults", log_id="rx", line="live", generation_id=4, built_through_seq=3,
                       schema_version="2", asp_version="1", chunker={}, embedding=None,
                       redaction_policy_hash="new", extra={"analyzer": "a"})
    stall = stall_of(current, versions, chunk_based=False, analyzer="a", schema="3")
    assert stall is not None
    assert (stall["what"], stall["built"], stall["writes"], stall["remedy"]) == (
        "toolresults index schema", "2", "3", "usl rebuild toolresults --log rx")
    assert stall_of(current, versions, chunk_based=False, analyzer="a", schema="2") is None
    assert stall_of(current, versions, chunk_based=False, analyzer="a") is None  # a writer that extends any


@pytest.mark.kafka
def test_a_tool_results_log_of_the_old_schema_stalls_alone_until_rebuilt(
        make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema 3 stores each output's runId and turnId; tantivy refuses a writer of that schema on
    a schema-2 index, which would have crashed the sink for every log on each restart."""
    import sinks.toolresults as toolresults

    def schema_2() -> None:  # rx's tool-results index as the previous release wrote it
        with monkeypatch.context() as patch:
            patch.setattr(toolresults, "SCHEMA_VERSION", "2")
            patch.setattr(toolresults, "_STORED", toolresults._STORED[:-3])
            patch.setattr(toolresults, "_RAW_FIELDS", toolresults._RAW_FIELDS[:-3])
            rebuild(settings, settings.bootstrap_servers or "", "toolresults", log_id="rx")
        assert GenerationStore(index_root(settings), "rx", "toolresults").current().schema_version == "2"

    settings = make_settings(embedder="hash:64")
    _stalls_alone_until_rebuilt(settings, "toolresults", schema_2, "toolresults index schema 2")


@pytest.mark.kafka
def test_a_text_log_of_another_analyzer_stalls_alone_until_its_text_is_rebuilt(
        make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch) -> None:
    """Found upgrading a running stack to analyzer 6: the text and tool-results sinks opened a
    log's analyzer-5 index, raised, and restarted every few seconds with a traceback, indexing
    no log at all; `usl status` said "catching up"."""
    def analyzer_5() -> None:  # rx's text index as the previous release wrote it
        with monkeypatch.context() as patch:
            for module in (sinks_text_base, sinks_text_writer):
                patch.setattr(module, "ANALYZER", "nfkc+words+spaceless-chars/5")
            rebuild(settings, settings.bootstrap_servers or "", "text", log_id="rx")

    settings = make_settings(embedder="hash:64")
    _stalls_alone_until_rebuilt(settings, "text", analyzer_5, "text analyzer nfkc+words+spaceless-chars/5")


def _stalls_alone_until_rebuilt(settings: Settings, kind: str, build_old: Callable[[], None], built: str) -> None:
    """Logs rx and ok; rx's ``kind`` index built by ``build_old`` as an older release would:
    the sink indexes ok, leaves rx alone with a stall naming ``built`` and the rebuild of ``kind``
    alone, and indexes rx again once that rebuild has run, never failing."""
    bootstrap = settings.bootstrap_servers or ""
    with _sinks(settings) as sinks:
        heads = {log: append_events(settings, _events(log, f"{log}-a", seed)) for seed, log in enumerate(("rx", "ok"))}
        build_old()
        thread = sinks.start(SinkRunner(settings, bootstrap, make_writer(kind, settings),
                                        versions=pipeline_versions(settings)))
        heads = {log: append_events(settings, _events(log, f"{log}-b", 10 + seed)) for seed, log in enumerate(("rx", "ok"))}
        rx_before = _through(settings, "rx", kind)
        _wait(lambda: _through(settings, "ok", kind) >= heads["ok"], "the log of this release", thread)
        assert not sinks.failures and _through(settings, "rx", kind) == rx_before
        remedy = f"usl rebuild {kind} --log rx"
        stalled = read_watermarks(bootstrap, settings)[("rx", kind)]["stalled"]
        assert (f"{stalled['what']} {stalled['built']}", stalled["remedy"]) == (built, remedy)
        index = collect_status(settings, bootstrap, log_id="rx")["logs"]["rx"]["indexes"][kind]
        assert index["verdict"].startswith(f"stalled: built under {built}")
        assert index["verdict"].endswith(f"not indexing until `{remedy}`")
        rebuild(settings, bootstrap, kind, log_id="rx")
        _wait(lambda: _through(settings, "rx", kind) >= heads["rx"], "the rebuilt log", thread)
        _wait(lambda: "stalled" not in read_watermarks(bootstrap, settings)[("rx", kind)], "the stall to clear",
              thread)
        assert not sinks.failures


def _events(log_id: str, prefix: str, seed: int) -> list[dict[str, Any]]:
    return interleave(*[session_events(f"{prefix}-{i}", turns=2, seed=seed + i, log_id=log_id) for i in range(2)],
                      seed=seed)


def _through(settings: Settings, log_id: str, kind: str = KIND) -> int:
    manifest = GenerationStore(index_root(settings), log_id, kind).current()
    return 0 if manifest is None else manifest.built_through_seq


def _wait(predicate: Callable[[], bool], what: str, thread: threading.Thread, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert thread.is_alive(), f"the sink stopped while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


class _Sinks:
    """A worker, and one sink runner at a time in a thread, whose failures are kept."""

    def __init__(self, settings: Settings) -> None:
        self.stack = Stack(settings)
        self.stack.worker()
        self.failures: list[BaseException] = []
        self.runner: SinkRunner | None = None
        self.thread: threading.Thread | None = None

    def start(self, runner: SinkRunner) -> threading.Thread:
        self.stop()
        self.runner, self.thread = runner, _run(runner, self.failures)
        return self.thread

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.stop()
        if self.thread is not None:
            self.thread.join(timeout=60)
        self.runner = self.thread = None


@contextmanager
def _sinks(settings: Settings) -> Iterator[_Sinks]:
    sinks = _Sinks(settings)
    try:
        yield sinks
    finally:
        sinks.stop()
        sinks.stack.close()


def _run(runner: SinkRunner, failures: list[BaseException]) -> threading.Thread:
    def drive() -> None:
        try:
            runner.run()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    return thread


@pytest.mark.kafka
def test_a_log_of_another_policy_stalls_alone_until_rebuilt(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(embedder="hash:64")
    bootstrap = settings.bootstrap_servers or ""
    current = pipeline_versions(settings)
    earlier = {**current, "redactionPolicy": "0123456789abcdef"}  # an earlier release's sinks
    with _sinks(settings) as sinks:
        heads = {log: append_events(settings, _events(log, f"{log}-a", seed)) for seed, log in enumerate(("rx", "ok"))}
        # Both logs indexed by the earlier release's sink.
        thread = sinks.start(SinkRunner(settings, bootstrap, make_writer(KIND, settings), versions=earlier))
        _wait(lambda: all(_through(settings, log) >= seq for log, seq in heads.items()), "the first index", thread)
        sinks.stop()
        assert not sinks.failures
        # The upgrade: 'ok' is rebuilt under this code's policy, 'rx' not yet.
        rebuild(settings, bootstrap, KIND, log_id="ok")
        thread = sinks.start(SinkRunner(settings, bootstrap, make_writer(KIND, settings), versions=current))
        heads = {log: append_events(settings, _events(log, f"{log}-b", 10 + seed))
                 for seed, log in enumerate(("rx", "ok"))}
        rx_before = _through(settings, "rx")
        # Before: the commit to rx's line raised RedactionPolicyMismatchError and the sink exited,
        # leaving 'ok' unindexed too.
        _wait(lambda: _through(settings, "ok") >= heads["ok"], "the log under this policy", thread)
        assert not sinks.failures and _through(settings, "rx") == rx_before
        watermark = read_watermarks(bootstrap, settings)[("rx", KIND)]
        assert watermark["stalled"]["what"] == "redaction policy"
        assert (watermark["stalled"]["built"], watermark["stalled"]["writes"]) == (
            earlier["redactionPolicy"], current["redactionPolicy"])
        assert "stalled" not in read_watermarks(bootstrap, settings)[("ok", KIND)]
        index = collect_status(settings, bootstrap, log_id="rx")["logs"]["rx"]["indexes"][KIND]
        assert index["verdict"].startswith(
            f"stalled: built under redaction policy {earlier['redactionPolicy']}, this code writes "
            f"{current['redactionPolicy']}")
        assert "usl rebuild all --log rx" in index["verdict"]
        assert index["stalled"]["what"] == "redaction policy"
        # The rebuild switches rx to a line of this policy: the running sink follows it.
        rebuild(settings, bootstrap, KIND, log_id="rx")
        more = append_events(settings, _events("rx", "rx-c", 20))
        _wait(lambda: _through(settings, "rx") >= more, "the rebuilt log", thread)
        assert not sinks.failures
        _wait(lambda: "stalled" not in read_watermarks(bootstrap, settings)[("rx", KIND)], "the stall to clear",
              thread)
        index = collect_status(settings, bootstrap, log_id="rx")["logs"]["rx"]["indexes"][KIND]
        assert index["stalled"] is None and not index["verdict"].startswith("stalled")


def test_a_rebuild_under_other_settings_than_the_stalled_sinks_is_refused(
        make_settings: Callable[..., Settings]) -> None:
    """The upgrade trap: the sinks run with USL_CHUNK_TOKENS=512 and stall on a 768 line; a
    rebuild from a shell without the setting wrote 768 again, said 'now active' and exited 0,
    and the log stayed stalled."""
    settings = make_settings(embedder="hash:64")
    bootstrap = settings.bootstrap_servers or ""
    ensure_topics(bootstrap, settings)
    for seed, log_id in enumerate(("ok", "rx")):
        append_events(settings, _events(log_id, f"{log_id}-a", seed))
    built = rebuild(settings, bootstrap, "text", log_id="rx")  # under the default 768
    sinks = pipeline_versions(settings)
    sinks["chunker"] = {**sinks["chunker"], "targetTokens": 512}
    stall = stall_of(built, sinks)
    assert stall is not None
    publisher = WatermarkPublisher(bootstrap, settings)
    try:  # what a sink running with 512 publishes for that line
        publisher.publish(watermark_of(built, GenerationStore(index_root(settings), "rx", "text"), sinks, stall))
    finally:
        publisher.close()

    def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "deploy.cli", "rebuild", *args],
                              env={**settings_env(settings), **env}, capture_output=True, text=True,
                              timeout=400, check=False)

    for args in (("--log", "rx"), ("--all-logs",)):
        refused = cli("text", *args)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        message = " ".join(refused.stderr.split())
        assert "text of log 'rx' is stalled: the sinks write chunker targetTokens=512; this rebuild would " \
               "write targetTokens=768" in message
        assert "USL_CHUNK_TOKENS=512" in message and "Traceback" not in message
    assert GenerationStore(index_root(settings), "ok", "text").current() is None  # no log was rebuilt
    assert GenerationStore(index_root(settings), "rx", "text").current() == built
    done = cli("text", "--all-logs", USL_CHUNK_TOKENS="512")
    assert done.returncode == 0, done.stdout + done.stderr
    text = " ".join(done.stdout.split())
    assert "rebuilt text of log 'ok'" in text and "rebuilt text of log 'rx'" in text
    for log_id in ("ok", "rx"):
        manifest = GenerationStore(index_root(settings), log_id, "text").current()
        assert manifest is not None and manifest.chunker["targetTokens"] == 512

