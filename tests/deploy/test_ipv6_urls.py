"""The URLs the command line builds from a host it listens on: an IPv6 address goes in brackets
(``http://::1:8765`` names no port), an every-interface address is reached on loopback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deploy.cli._api import api_target
from deploy.cli._common import bare_host, http_url
from streams.settings import Settings


@pytest.mark.parametrize(("host", "connect", "url"), [
    ("127.0.0.1", "http://127.0.0.1:8765", "http://127.0.0.1:8765"),
    ("localhost", "http://localhost:8765", "http://localhost:8765"),
    ("::1", "http://[::1]:8765", "http://[::1]:8765"),
    ("[::1]", "http://[::1]:8765", "http://[::1]:8765"),
    ("fe80::1", "http://[fe80::1]:8765", "http://[fe80::1]:8765"),
    ("::", "http://[::1]:8765", "http://[::]:8765"),
    ("[::]", "http://[::1]:8765", "http://[::]:8765"),
    ("0.0.0.0", "http://127.0.0.1:8765", "http://0.0.0.0:8765"),
])
def test_http_url_brackets_ipv6_and_reaches_wildcards_on_loopback(host: str, connect: str, url: str) -> None:
    assert http_url(host, 8765) == connect
    assert http_url(host, 8765, connect=False) == url


def test_bare_host_is_what_a_socket_binds() -> None:
    assert bare_host("[::1]") == "::1"
    assert bare_host(" ::1 ") == "::1"
    assert bare_host("127.0.0.1") == "127.0.0.1"


@pytest.mark.parametrize(("flag", "url"), [("::1", "http://[::1]:8799"), ("[::1]", "http://[::1]:8799"),
                                           ("::", "http://[::1]:8799")])
def test_the_cli_asks_a_local_api_on_ipv6_in_brackets(tmp_path: Path, flag: str, url: str) -> None:
    """The local stack's API, found by its pid file, is asked at a URL with a port."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "api.pid").write_text(json.dumps({"pid": os.getpid(), "cmd": ["usl", "serve", "--port", "8799",
                                                                          "--host", flag]}))
    assert api_target(Settings.from_env({}, home=tmp_path)) == (url, False)
