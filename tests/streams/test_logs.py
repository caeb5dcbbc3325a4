"""The worker and the sinks log in one format, with a timestamp, and their own lifecycle lines
(where ``/metrics`` is served, a line switch) at INFO, shown at the default level.

Before, the sinks logged them at WARNING, and the worker's "worker metrics on" line went out
before faust set up logging, through Python's last-resort handler: no timestamp, no level."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from streams.logs import level_of

_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] (INFO|WARNING) usl\.(sink|worker): ")

_PROCESS = """
import logging
from mode.utils.logging import setup_logging
from streams.logs import configure_logging, faust_logging_config, level_of

configure_logging("usl.worker", "warn")
logging.getLogger("usl.worker").info("worker metrics on http://127.0.0.1:1/metrics")
logging.getLogger("kafka.conn").info("library chatter")
# What faust.Worker does with the logging_config run_worker gives it.
setup_logging(loglevel=level_of("warn"), logging_config=faust_logging_config())
logging.getLogger("usl.worker").info("after faust")
logging.getLogger("faust.app").info("faust chatter")
logging.getLogger("usl.sink").warning("a warning")
"""


def test_own_lines_carry_time_and_level_through_fausts_logging_setup() -> None:
    done = subprocess.run([sys.executable, "-c", _PROCESS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = (done.stdout + done.stderr).splitlines()
    assert len(lines) == 3, lines
    assert all(_LINE.match(line) for line in lines), lines
    assert [line.split(": ", 1)[1] for line in lines] == [
        "worker metrics on http://127.0.0.1:1/metrics", "after faust", "a warning"]


@pytest.mark.parametrize(("name", "level"), [("crit", 50), ("error", 40), ("warn", 30), ("info", 20),
                                               ("debug", 10), ("WARNING", 30), (20, 20)])
def test_every_loglevel_the_cli_offers_is_a_level(name: str | int, level: int) -> None:
    assert level_of(name) == level


def test_an_unknown_loglevel_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        level_of("loud")
