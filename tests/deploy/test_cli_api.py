"""``usl search``, ``sql``, ``sessionql`` and ``status`` through the planner API (SPEC §12).

One real ``usl serve`` runs on a small corpus. Each command runs as a real ``usl`` process twice:
in process (no API known) and through the API (``USL_API_URL``, or the local stack's pid file);
the two must print the same thing and exit with the same code. A run through the API is shown
to be one by giving it a broker address that does not answer: in process it could not work.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.testing import free_port, settings_env, wait_for_api
from planner.auth import create_key, keys_path, read_keys
from planner.client import APIError, Client, Unreachable
from streams.settings import Settings
from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

pytestmark = pytest.mark.kafka

ALICE = "tenant:acme/user:alice/groups:eng"
DEAD_BROKER = "127.0.0.1:1"
TIMEOUT = 120.0


def env_of(settings: Settings, **extra: str) -> dict[str, str]:
    env = settings_env(settings)
    env.pop("USL_API_URL", None)
    env.pop("USL_API_KEY", None)
    env.pop("USL_DEFAULT_PRINCIPAL", None)
    env.update({"USL_EMBEDDER": settings.embedder, "USL_CURSOR_KEY": settings.cursor_key or "",
                "COLUMNS": "160"})
    env.update(extra)
    return env


def usl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)


def same_text(text: str) -> str:
    """Output with what may differ between two runs of one query blanked: a cursor carries the
    second it was issued in, and status its own clock."""
    text = re.sub(r"--cursor [\w.=\s-]+", "--cursor C", text)  # wrapped over lines
    text = re.sub(r'"cursor": "[^"]+"', '"cursor": "C"', text)
    return re.sub(r'"generatedAt": [0-9.]+', '"generatedAt": T', text)


@pytest.fixture(scope="module")
def served(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, str, int]]:
    """(settings, API URL, pid of the API) over the planner tests' corpus."""
    settings = make_test_settings(Path(tmp_path_factory.mktemp("cli-api")), kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "default")
    order, _ = interleaved("default")
    builder.append(order)
    builder.commit("structured", "text", "vector", "toolresults", "analytics")
    builder.close()
    port = free_port()
    log = (Path(settings.home) / "api.log").open("ab")
    api = subprocess.Popen([sys.executable, "-m", "deploy.cli", "serve", "--port", str(port)],
                           env=env_of(settings), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_api(url, api, timeout=TIMEOUT)
        yield settings, url, api.pid
    finally:
        api.terminate()
        api.wait(timeout=60)
        log.close()


COMMANDS = [
    ("search", "deploy", "--as", ALICE, "--k", "3"),
    ("search", "deploy", "--as", ALICE, "--k", "3", "--json"),
    ("search", "deploy", "--as", ALICE, "--session", "s-eng", "--mode", "text", "--json"),
    ("search", "deploy", "--freshness", "sometime", "--json"),
    ("search", "deploy", "--freshness", "sometime"),
    ("sql", "SELECT sessionId, count(*) AS n FROM events GROUP BY 1 ORDER BY 1", "--as", ALICE),
    ("sql", "SELECT sessionId FROM sessions ORDER BY 1", "--as", ALICE, "--json"),
    ("sql", "DROP TABLE sessions", "--as", ALICE, "--json"),
    ("sessionql", "FROM sessions SELECT sessionId ORDER BY sessionId", "--as", ALICE),
    ("sessionql", "FROM events GROUP BY sessionId", "--as", ALICE, "--json"),
    ("sessionql", "FROM nowhere", "--as", ALICE),
]


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:2]) + (" json" if "--json" in a else "")
                                                 for a in COMMANDS])
def test_through_the_api_prints_what_in_process_prints(served: tuple[Settings, str, int],
                                                       args: tuple[str, ...]) -> None:
    settings, url, _ = served
    local = usl(env_of(settings), *args)
    remote = usl(env_of(settings, USL_API_URL=url, KAFKA_BOOTSTRAP_SERVERS=DEAD_BROKER), *args)
    assert remote.returncode == local.returncode, (local.stderr, remote.stderr)
    assert same_text(remote.stdout) == same_text(local.stdout)
    assert same_text(remote.stderr) == same_text(local.stderr)
    if "--json" in args and local.returncode == 0:
        assert json.loads(remote.stdout).get("asOfSeq") is not None


def test_status_through_the_api(served: tuple[Settings, str, int]) -> None:
    settings, url, _ = served
    local = json.loads(usl(env_of(settings), "status", "--json").stdout)
    remote = usl(env_of(settings, USL_API_URL=url, KAFKA_BOOTSTRAP_SERVERS=DEAD_BROKER), "status", "--json")
    assert remote.returncode == 0, remote.stderr
    answer = json.loads(remote.stdout)
    # The API keeps its broker address to itself; everything else is the same report (but for
    # what depends on the clock: when it was made and how many seconds the lag is).
    local.pop("bootstrap")
    for report in (local, answer):
        report.pop("generatedAt")
        for index in report["logs"]["default"]["indexes"].values():
            index.pop("lagSeconds")
            index.pop("verdict")
    # heldBy names a session and turn only to a caller of the held event's tenant (the API
    # filters per principal, planner.status.for_principal); the operator's local report shows
    # every id. The API withholds them or shows the same ones, and keeps seq and time.
    for kind, index in answer["logs"]["default"]["indexes"].items():
        held, shown = index.get("heldBy"), local["logs"]["default"]["indexes"][kind].get("heldBy")
        if held and shown and held["sessionId"] is None and held["turnId"] is None:
            shown.update(sessionId=None, turnId=None)
    assert answer == local
    table = usl(env_of(settings, USL_API_URL=url, KAFKA_BOOTSTRAP_SERVERS=DEAD_BROKER), "status")
    assert table.returncode == 0 and "L1 committed seq" in table.stdout, table.stderr


def test_the_local_stack_is_found_by_its_pid_file(served: tuple[Settings, str, int]) -> None:
    settings, url, pid = served
    run = Path(settings.home) / "run"
    run.mkdir(parents=True, exist_ok=True)
    port = url.rsplit(":", 1)[1]
    pid_file = run / "api.pid"
    pid_file.write_text(json.dumps({"pid": pid, "cmd": [sys.executable, "-m", "deploy.cli", "serve",
                                                         "--port", port, "--host", "127.0.0.1"]}))
    try:
        found = usl(env_of(settings, KAFKA_BOOTSTRAP_SERVERS=DEAD_BROKER), "search", "deploy", "--as", ALICE,
                    "--json")
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["results"]
    finally:
        pid_file.unlink()


def test_no_api_answering_means_in_process(served: tuple[Settings, str, int]) -> None:
    settings, _, _ = served
    nowhere = f"http://127.0.0.1:{free_port()}"
    local = usl(env_of(settings), "search", "deploy", "--as", ALICE, "--json")
    fallen_back = usl(env_of(settings, USL_API_URL=nowhere), "search", "deploy", "--as", ALICE, "--json")
    assert fallen_back.returncode == local.returncode == 0
    assert same_text(fallen_back.stdout) == same_text(local.stdout)
    assert "answering in this process" in fallen_back.stderr


def test_the_api_is_asked_as_the_cli_principal(served: tuple[Settings, str, int]) -> None:
    settings, url, _ = served
    env = env_of(settings, USL_API_URL=url, KAFKA_BOOTSTRAP_SERVERS=DEAD_BROKER)
    alice = json.loads(usl(env, "search", "deploy", "--as", ALICE, "--json").stdout)
    mallory = json.loads(usl(env, "search", "deploy", "--as", "tenant:globex/user:mallory", "--json").stdout)
    assert {hit["sessionId"] for hit in alice["results"]} & {"s-alice", "s-eng"}
    assert not {hit["sessionId"] for hit in mallory["results"]} & {"s-alice", "s-eng"}
    default = json.loads(usl({**env, "USL_DEFAULT_PRINCIPAL": "tenant:globex/user:mallory"},
                             "search", "deploy", "--json").stdout)
    assert [hit["chunkId"] for hit in default["results"]] == [hit["chunkId"] for hit in mallory["results"]]


def test_piped_output_is_for_scripts(served: tuple[Settings, str, int]) -> None:
    """Piped (not a terminal), ``usl sql`` printed its table squeezed into 80 columns, every cell
    cut to '…'; now the rows are tab-separated under a header, whole, the same values as
    ``--json``, and the snapshot line goes to stderr. ``usl search`` wraps no line (a cursor
    stays whole)."""
    settings, url, _ = served
    env = env_of(settings, USL_API_URL=url, KAFKA_BOOTSTRAP_SERVERS=DEAD_BROKER, COLUMNS="80")
    query = "SELECT * FROM events ORDER BY seq LIMIT 3"
    piped = usl(env, "sql", query, "--as", ALICE)
    answer = json.loads(usl(env, "sql", query, "--as", ALICE, "--json").stdout)
    assert piped.returncode == 0, piped.stderr
    header, *lines = piped.stdout.splitlines()
    assert header.split("\t") == answer["columns"] and len(answer["columns"]) > 8
    assert len(lines) == len(answer["rows"]) == 3 and "…" not in piped.stdout
    for line, row in zip(lines, answer["rows"], strict=True):
        for cell, value in zip(line.split("\t"), row, strict=True):
            if value is None:
                assert cell == "\\N"
            elif isinstance(value, str):  # whole, its backslashes, tabs and newlines escaped
                assert cell == value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n") \
                    .replace("\r", "\\r")
    assert "3 rows · asOfSeq" in piped.stderr
    search = usl(env, "search", "deploy", "--as", ALICE, "--k", "1")
    cursor = json.loads(usl(env, "search", "deploy", "--as", ALICE, "--k", "1", "--json").stdout)["cursor"]
    assert search.returncode == 0 and cursor
    assert re.search(r"^next page: the same command with --cursor c1\.\S{60,}$", search.stdout, re.M), search.stdout


def test_with_api_keys_the_cli_sends_its_key(served: tuple[Settings, str, int]) -> None:
    """Runs last in this module: once a keys file exists the API enforces keys for good."""
    settings, url, _ = served
    key, _ = create_key(keys_path(settings), ALICE, name="cli-test")
    env = env_of(settings, USL_API_URL=url, KAFKA_BOOTSTRAP_SERVERS=DEAD_BROKER)
    keyless = usl(env, "search", "deploy", "--json")
    assert keyless.returncode == 2 and json.loads(keyless.stdout)["error"]["code"] == "unauthorized"
    keyed = usl({**env, "USL_API_KEY": key}, "search", "deploy", "--json")
    assert keyed.returncode == 0, keyed.stderr
    assert {hit["sessionId"] for hit in json.loads(keyed.stdout)["results"]} & {"s-alice", "s-eng"}
    wider = usl({**env, "USL_API_KEY": key}, "search", "deploy", "--as", "tenant:acme/user:bob", "--json")
    assert wider.returncode == 2 and json.loads(wider.stdout)["error"]["code"] == "forbidden"
    status = usl({**env, "USL_API_KEY": key}, "status", "--json")
    assert status.returncode == 0 and "default" in json.loads(status.stdout)["logs"], status.stderr


def test_client_follows_cursors_and_raises_the_api_error(served: tuple[Settings, str, int]) -> None:
    settings, url, _ = served
    key, _ = create_key(keys_path(settings), ALICE, name="client-test")
    with Client(url, api_key=key) as client:
        first = client.search("deploy", k=100)
        paged = [hit["chunkId"] for hit in client.iter_results("deploy", k=2)]
        assert paged == [hit["chunkId"] for hit in first["results"]]
        assert [hit["chunkId"] for hit in client.iter_results("deploy", k=2, limit=3)] == paged[:3]
        pages = list(client.iter_pages("deploy", k=2))
        assert len({page["asOfSeq"] for page in pages}) == 1
        assert client.sessionql("FROM sessions SELECT sessionId ORDER BY sessionId")["rows"]
        assert client.sql("SELECT count(*) FROM sessions")["rows"]
        assert "default" in client.status()["logs"]
        with pytest.raises(APIError) as refused:
            client.search("deploy", freshness="sometime")
        assert (refused.value.status, refused.value.code) == (400, "bad_query")

        # Export: only what the key's principal may read, at the position the header names.
        exported = client.export("sessions")
        events = [json.loads(line) for line in exported.data.splitlines()]
        assert {event["sessionId"] for event in events} == {"s-alice", "s-eng", "s-all"}
        assert exported.as_of_seq >= 1
        assert all("payload" not in event for event in events)
        one = client.export("sessions", session_id="s-eng").data.splitlines()
        assert one and {json.loads(line)["sessionId"] for line in one} == {"s-eng"}
        assert not client.export("sessions", session_id="s-bob").data  # not hers: nothing, not an error
        turns = [json.loads(line) for line in client.export("turns").data.splitlines()]
        assert turns and {turn["sessionId"] for turn in turns} <= {"s-alice", "s-eng", "s-all"}
        found = [json.loads(line) for line in client.export("hits", query="deploy", limit=3).data.splitlines()]
        assert [hit["chunkId"] for hit in found] == paged[:3]
        assert [hit["rank"] for hit in found] == [1, 2, 3]
        # Events go in through the same client, once each (SPEC §12 live ingest).
        event = {"eventId": "client-e1", "logId": "default", "sessionId": "s-client",
                 "type": "session.started", "time": "2026-02-01T00:00:00Z",
                 "acl": {"tenant": "acme", "read": ["user:alice"]}}
        first_append = client.events([event])
        assert (first_append["appended"], first_append["duplicates"], first_append["rejected"]) == (1, 0, [])
        assert client.events([event])["duplicates"] == 1
        refused_event = client.events([{"eventId": "client-e2"}])["rejected"]
        assert [r["index"] for r in refused_event] == [0]
        for what, extra in (("everything", {}), ("sessions", {"query": "deploy"}), ("hits", {})):
            with pytest.raises(APIError) as refused:
                client.export(what, **extra)  # type: ignore[arg-type]
            assert (refused.value.status, refused.value.code) == (400, "bad_query"), what
    with pytest.raises(Unreachable):
        Client(f"http://127.0.0.1:{free_port()}").search("deploy")


@pytest.mark.parametrize("args", [("sessions", "--session", "s-eng"), ("turns",), ("hits", "-q", "deploy"),
                                  ("sessions", "--as-of", "3")], ids=" ".join)
def test_export_from_a_local_stack_with_keys_exports_what_was_asked(served: tuple[Settings, str, int],
                                                                     args: tuple[str, ...]) -> None:
    """Found following the README: after `usl apikey create`, `usl export turns` exported every
    session's events, `--session` and `--as-of` were ignored and `hits -q` was refused. The
    local stack's API answers 401 (no USL_API_KEY in the shell), the CLI then reads the files
    in process, and the request it had tried took `what`, `asOfSeq` and `sessionId` out of the
    parameters it passed on."""
    settings, url, pid = served
    if not read_keys(keys_path(settings)):
        create_key(keys_path(settings), ALICE, name="export-test")  # keys for good (runs after the others)
    expected = usl(env_of(settings), "export", *args, "--as", ALICE)  # no API known: in process
    assert expected.returncode == 0 and expected.stdout, expected.stderr
    run = Path(settings.home) / "run"
    run.mkdir(parents=True, exist_ok=True)
    pid_file = run / "api.pid"
    pid_file.write_text(json.dumps({"pid": pid, "cmd": [sys.executable, "-m", "deploy.cli", "serve",
                                                         "--port", url.rsplit(":", 1)[1], "--host", "127.0.0.1"]}))
    try:
        exported = usl(env_of(settings), "export", *args, "--as", ALICE)
    finally:
        pid_file.unlink()
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == expected.stdout
    assert exported.stderr.splitlines()[-1] == expected.stderr.splitlines()[-1]  # "exported WHAT ... at asOfSeq N"
