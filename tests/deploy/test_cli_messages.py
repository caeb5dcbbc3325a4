"""What the CLI says while it runs, in its own words: JSON in UTF-8, hints that name its options,
and ingest messages that say where, why and what next. No broker: the import is a fake."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deploy.cli import _common, app
from deploy.cli import ingest as ingest_module
from streams.follow import PollReport
from streams.importers.base import Rejected

_NO_STACK = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "USL_API_URL": ""}


def test_json_is_utf8_and_survives_a_lone_surrogate(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """Found by a new user: `usl search --json` wrote every non-ASCII character as \\uXXXX."""
    _common.print_json({"text": "café · 日本語 · 🙂", "broken": "a\ud800b"})
    written = capsysbinary.readouterr().out
    assert "café · 日本語 · 🙂".encode() in written
    assert json.loads(written.decode("utf-8")) == {"text": "café · 日本語 · 🙂", "broken": "a\ud800b"}


def test_export_hits_without_a_query_names_the_option(tmp_path: Path) -> None:
    """Found by a new user: it printed the API's hint 'Add query, e.g. query=retry budget.'"""
    result = CliRunner().invoke(app, ["export", "hits"], env={"USL_HOME": str(tmp_path), **_NO_STACK})
    assert result.exit_code != 0 and "-q/--query" in str(result.exception) and "query=" not in str(result.exception)
    result = CliRunner().invoke(app, ["export", "turns", "-q", "retry"], env={"USL_HOME": str(tmp_path), **_NO_STACK})
    assert result.exit_code != 0 and "-q/--query" in str(result.exception)


class _Appender:
    highest = 0

    def __init__(self) -> None:
        self.registry = self

    def append(self, event: dict[str, Any], canonical: bytes | None = None) -> None:
        self.highest += 1

    def flush(self) -> int:
        return self.highest

    def committed_seq(self, log_id: str) -> int:
        return self.highest

    def close(self, *, wait: bool = True) -> None:
        self.closed_waiting = wait


class _Follower:
    """Appends ``acknowledged`` events in one flushed batch, more unflushed, then is stopped."""

    def __init__(self, appender: _Appender, reports: list[PollReport], acknowledged: int = 0) -> None:
        self.appender, self.reports, self.acknowledged = appender, reports, acknowledged
        self.store = type("Store", (), {"path": Path("/tmp/positions.json")})()

    def poll(self) -> PollReport:
        for _ in range(self.acknowledged):
            self.appender.append({})
        self.appender.flush()
        self.appender.append({})  # in flight when Ctrl-C comes
        raise KeyboardInterrupt

    def run(self, *, poll_seconds: float, should_stop: Any, on_poll: Any) -> None:
        for report in self.reports:
            on_poll(report)


def _fake_follower(monkeypatch: pytest.MonkeyPatch, follower: _Follower) -> None:
    monkeypatch.setattr(ingest_module, "_follower", lambda *args, **kwargs: (follower, follower.appender))
    monkeypatch.setattr(_common, "configured_cluster", lambda servers: servers)  # no cluster to ask


def test_an_interrupted_import_says_what_reached_l1_and_how_to_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user: Ctrl-C exited 130 without a word."""
    transcript = tmp_path / "s.jsonl"
    transcript.write_text("{}\n")
    appender = _Appender()
    _fake_follower(monkeypatch, _Follower(appender, [], acknowledged=7))
    result = CliRunner().invoke(app, ["ingest", str(transcript)], env={"USL_HOME": str(tmp_path), **_NO_STACK})
    assert result.exit_code == 130
    # Stopped, it does not wait for the acknowledgements: that held Ctrl-C while the broker was away.
    assert appender.closed_waiting is False
    said = " ".join(result.output.split())
    assert "interrupted: at least 7 event(s) reached L1 before Ctrl-C" in said and "run the same command again" in said


def test_the_follower_says_where_and_why_it_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user: the follower printed 'rejected 1' and nothing else."""
    rejects = [Rejected(record=f"live.jsonl:{n}", reason=f"invalid JSON at column {n}", raw="{") for n in range(1, 6)]
    report = PollReport(files=1, records_read=6, appended=1, rejected=5, rejected_items=rejects)
    _fake_follower(monkeypatch, _Follower(_Appender(), [report]))
    monkeypatch.setattr(ingest_module, "_count", lambda report: None)
    result = CliRunner().invoke(app, ["ingest", "--follow", str(tmp_path)],
                                env={"USL_HOME": str(tmp_path), **_NO_STACK})
    assert result.exit_code == 0, result.output
    assert "rejected live.jsonl:1: invalid JSON at column 1" in result.output
    assert "rejected live.jsonl:3: invalid JSON at column 3" in result.output
    assert "live.jsonl:4" not in result.output and "and 2 more (`usl deadletters` lists them)" in result.output


def test_a_follower_stopped_prints_its_summary_with_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new user: `usl ingest --follow --json` printed nothing on stdout when stopped
    (the option says "Print the summary as JSON"), so a script had no totals to read."""
    report = PollReport(files=1, records_read=4, appended=3, rejected=1,
                        rejected_items=[Rejected(record="live.jsonl:2", reason="invalid JSON", raw="{")])
    appender = _Appender()
    appender.highest = 42
    _fake_follower(monkeypatch, _Follower(appender, [report, PollReport(files=1, appended=2)]))
    monkeypatch.setattr(ingest_module, "_count", lambda report: None)
    result = CliRunner().invoke(app, ["ingest", "--follow", "--json", str(tmp_path)],
                                env={"USL_HOME": str(tmp_path), **_NO_STACK})
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["eventsAppended"] == 5 and summary["rejected"] == 1 and summary["l1CommittedSeq"] == 42
    assert summary["logId"] == "default" and summary["follow"] is True


def _usl(tmp_path: Path, env: dict[str, str], *args: str) -> Any:
    import os
    import subprocess
    import sys

    base = {name: value for name, value in os.environ.items()
            if name not in ("KAFKA_BOOTSTRAP_SERVERS", "USL_API_URL", "USL_API_KEY", "USL_HOME")}
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], env={**base, "COLUMNS": "80", **env},
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_output_its_encoding_cannot_hold_is_escaped_not_a_traceback(tmp_path: Path) -> None:
    """Found with non-Latin sessions: on a stdout that is not UTF-8 (a Windows console's cp1252,
    an ISO-8859-1 locale, PYTHONIOENCODING=ascii) every table or result holding a character it
    cannot encode, usl's own '·' and '—' too, ended in a UnicodeEncodeError traceback, exit 1."""
    home = {"USL_HOME": str(tmp_path / "home")}
    created = _usl(tmp_path, home, "apikey", "create", "--principal", "tenant:acme/user:小明", "--name", "clé-名前")
    assert created.returncode == 0, created.stderr
    listed = _usl(tmp_path, {**home, "PYTHONIOENCODING": "ascii"}, "apikey", "list")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert "cl\\xe9-\\u540d\\u524d" in listed.stdout and "user:\\u5c0f\\u660e" in listed.stdout


@pytest.mark.parametrize("args", [("status",), ("deadletters",), ("search", "kafka"), ("ingest", "x.jsonl")])
def test_a_cluster_that_does_not_answer_is_one_line_not_a_traceback(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Found by a platform engineer: with KAFKA_BOOTSTRAP_SERVERS naming a cluster that is down,
    every command ended in kafka-python's traceback (KafkaTimeoutError), exit code 1; then, once
    that was one line, only after kafka-python's 30 s request timeout."""
    (tmp_path / "x.jsonl").write_text("{}\n")
    servers = "no-such-host.invalid:9092,127.0.0.1:9"
    done = _usl(tmp_path, {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": servers}, *args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert f"KAFKA_BOOTSTRAP_SERVERS={servers} does not answer" in done.stderr
    assert "Connection refused" in done.stderr, done.stderr  # each server tried, each reason said


def test_a_configured_cluster_is_asked_only_once_one_of_its_servers_listens() -> None:
    """The check before a command connects: any server that accepts a connection is enough, and
    a list kafka-python reads but this check does not is left to kafka-python."""
    import socket

    from deploy.cli._common import ClusterDown, configured_cluster

    with socket.create_server(("127.0.0.1", 0)) as listening:
        port = listening.getsockname()[1]
        servers = f"127.0.0.1:9, PLAINTEXT://127.0.0.1:{port}"
        assert configured_cluster(servers) == servers
    with pytest.raises(ClusterDown, match=r"does not answer \(.*Connection refused\)"):
        configured_cluster(f"[::1]:9,127.0.0.1:{port}")
    assert configured_cluster("localhost") == "localhost"


@pytest.mark.parametrize("args", [("up", "--detach", "--port", "9"), ("ingest", "x.jsonl"), ("deadletters",)])
def test_a_usl_home_that_cannot_be_made_is_one_line_not_a_traceback(tmp_path: Path, args: tuple[str, ...]) -> None:
    """Found by a platform engineer: USL_HOME under a file (or in /proc) ended in a traceback of
    pathlib's mkdir."""
    (tmp_path / "a-file").write_text("")
    (tmp_path / "x.jsonl").write_text("{}\n")
    home = tmp_path / "a-file" / "home"
    done = _usl(tmp_path, {"USL_HOME": str(home)}, *args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert f"Not a directory: {home}" in done.stderr and "USL_HOME=" in done.stderr


def test_every_command_runs_with_a_private_umask(tmp_path: Path) -> None:
    """Found by a platform engineer: `usl rebuild` run from a shell with umask 022 wrote its new
    index line 0644 (the stack's processes run with umask 077, the CLI did not)."""
    import subprocess
    import sys

    script = ("import os, sys\nos.umask(0o022)\nsys.argv = ['usl', 'topics', '--help']\n"
              "from deploy.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
              "print('umask', oct(os.umask(0)))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert "umask 0o77" in done.stdout, (done.stdout, done.stderr)


_ARENAS_SCRIPT = """
import ctypes, sys, threading
if sys.argv[1] == "usl":
    sys.argv = ["usl", "topics", "--help"]
    from deploy.cli import main
    try:
        main()
    except SystemExit:
        pass
together = threading.Barrier(9)
def hold():
    held = bytearray(1 << 16)  # past Python's small-object allocator: from the thread's arena
    together.wait()
    together.wait()
threads = [threading.Thread(target=hold) for _ in range(8)]
for thread in threads:
    thread.start()
together.wait()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
together.wait()
"""


def _glibc() -> bool:
    try:
        return "glibc" in (os.confstr("CS_GNU_LIBC_VERSION") or "")
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not _glibc(), reason="malloc arenas are glibc's")
@pytest.mark.parametrize(("environment", "expected"), [({}, 2), ({"MALLOC_ARENA_MAX": "3"}, 3)])
def test_every_command_keeps_two_malloc_arenas_unless_told(environment: dict[str, str], expected: int) -> None:
    """While index generations rolled every 2 s, the planner API's threads spread over glibc's
    16 malloc arenas (8 a core), each keeping its high-water mark: 150+ MB held free and one
    more arena filling every few minutes. Every process of the CLI keeps two, or what
    MALLOC_ARENA_MAX says."""
    import subprocess
    import sys

    def arenas(mode: str) -> int:
        env = {**{k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}, **environment}
        done = subprocess.run([sys.executable, "-c", _ARENAS_SCRIPT, mode], capture_output=True,
                              text=True, timeout=60, env=env, cwd=Path(__file__).resolve().parents[2])
        assert done.returncode == 0, done.stderr
        return sum(line.startswith("Arena ") for line in done.stderr.splitlines())

    assert arenas("usl") == expected
    if not environment:
        assert arenas("python") == 9  # without it, each of the eight threads took an arena of its own


def test_api_keys_say_when_the_api_locks_and_how_it_opens_again(tmp_path: Path) -> None:
    """Found following the README: it creates a key, calls with it, revokes it, and then shows a
    key-less curl, which got 401: the first key locks the API for good (docs/security.md), and
    neither `create` nor `revoke` said so."""
    home = {"USL_HOME": str(tmp_path / "home")}
    first = _usl(tmp_path, home, "apikey", "create", "--principal", "tenant:acme/user:alice", "--name", "alice")
    assert first.returncode == 0 and first.stdout.startswith("usl_"), first.stderr
    said = " ".join(first.stderr.split())
    assert "the API now needs a key for every /v1 request" in said and "after the last key is revoked" in said
    second = _usl(tmp_path, home, "apikey", "create", "--principal", "tenant:acme/user:bob", "--name", "bob", "--json")
    assert second.returncode == 0 and "needs a key" not in second.stderr  # said once, for the first key
    json.loads(second.stdout)
    revoked = _usl(tmp_path, home, "apikey", "revoke", "alice")
    assert revoked.returncode == 0 and "no API keys left" not in revoked.stdout  # bob's is left
    last = _usl(tmp_path, home, "apikey", "revoke", "bob")
    said = " ".join(last.stdout.split())
    assert last.returncode == 0 and "no API keys left: every /v1 request is refused until one is created" in said
    assert f"`usl down`, remove {tmp_path / 'home' / 'api-keys.json'}, `usl up --detach`" in said
