"""The liveness rule of ``usl up``'s supervisor (:mod:`deploy.liveness`): which process is hung,
and what counts as an answer. The supervisor itself is driven in ``test_stack_liveness.py``."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from deploy.liveness import Liveness, Watchdog, answers
from streams.settings import Settings


def test_a_process_is_hung_after_enough_failures_in_a_row_and_the_whole_grace() -> None:
    liveness = Liveness(last_answer=0.0)
    for second in range(1, 6):
        liveness.record(False, float(second))
    assert not liveness.hung(5.0, failures=6, grace_seconds=3.0)  # a fifth failure is not a sixth
    liveness.record(False, 6.0)
    assert liveness.hung(6.0, failures=6, grace_seconds=3.0)
    assert not liveness.hung(6.0, failures=6, grace_seconds=10.0)  # quick failures: the grace runs on
    assert liveness.hung(10.0, failures=6, grace_seconds=10.0)
    assert not liveness.hung(10.0, failures=0, grace_seconds=0.0)  # the check is off
    liveness.record(True, 11.0)
    assert liveness.failures == 0 and not liveness.hung(25.0, failures=6, grace_seconds=10.0)


def test_a_long_pause_with_few_probes_is_not_a_hang() -> None:
    """One probe every 20 s: a process silent for 70 s failed 3 probes, not 6."""
    liveness = Liveness(last_answer=0.0)
    for second in (20.0, 40.0, 60.0):
        liveness.record(False, second)
    assert not liveness.hung(70.0, failures=6, grace_seconds=30.0)


def _settings(**overrides: object) -> Settings:
    values: dict[str, object] = {"liveness_probe_seconds": 1.0, "liveness_failures": 2, "liveness_grace_seconds": 1.6}
    return Settings.from_env({}, **{**values, **overrides})


def _settle(watchdog: Watchdog) -> None:
    for watched in watchdog._watched.values():
        if watched.probe is not None:
            watched.probe.result(timeout=10)


def _run(watchdog: Watchdog, pid: int, seconds: list[float]) -> list[str | None]:
    verdicts = []
    for now in seconds:
        verdicts.append(watchdog.check("api", pid, "http://127.0.0.1:1/healthz", now))
        _settle(watchdog)
    return verdicts


def test_the_watchdog_probes_once_per_interval_and_starts_afresh_for_a_new_pid() -> None:
    probed: list[float] = []

    def silent(url: str, timeout_seconds: float) -> bool:
        probed.append(timeout_seconds)
        return False

    watchdog = Watchdog(_settings(), 1, probe=silent)
    try:
        verdicts = _run(watchdog, 10, [0.0, 0.5, 1.0, 1.5, 2.0])
        assert len(probed) == 3 and set(probed) == {1.0}  # at 0, 1 and 2 s; timeout: the interval
        assert verdicts[:4] == [None] * 4
        assert verdicts[4] == "no answer from http://127.0.0.1:1/healthz for 2s (2 probes in a row)"
        assert _run(watchdog, 11, [2.5, 3.0]) == [None, None]  # restarted: a new process
    finally:
        watchdog.close()


def test_no_probe_when_the_check_is_off_or_the_process_serves_no_http() -> None:
    probed: list[str] = []

    def silent(url: str, timeout_seconds: float) -> bool:
        probed.append(url)
        return False

    off = Watchdog(_settings(liveness_failures=0), 1, probe=silent)
    on = Watchdog(_settings(), 1, probe=silent)
    try:
        assert _run(off, 10, [0.0, 5.0, 10.0]) == [None, None, None]
        assert [on.check("follow", 12, None, now) for now in (0.0, 5.0, 10.0)] == [None, None, None]
        assert probed == []
    finally:
        off.close()
        on.close()


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(503)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def unavailable_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_any_http_answer_counts_and_a_listening_socket_that_never_answers_does_not(unavailable_server: int) -> None:
    assert answers(f"http://127.0.0.1:{unavailable_server}/healthz", 5.0)  # 503: it answers
    with socket.socket() as silent:  # what a stopped process's port is: the kernel accepts
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        assert not answers(f"http://127.0.0.1:{silent.getsockname()[1]}/metrics", 0.5)
        assert time.monotonic() - started < 3
        port = silent.getsockname()[1]
    assert not answers(f"http://127.0.0.1:{port}/metrics", 0.5)  # nothing listens any more
