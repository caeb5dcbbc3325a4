"""``free_port``: the ports the project's servers are started on (brokers, S3Proxy, the API in
the fault suite and the tests) must not be the ones outgoing connections take, and no two
callers may be handed the same one while it is fresh."""

from __future__ import annotations

import socket
import subprocess
import sys

from deploy.jars import _ephemeral_low, free_port


def test_a_port_is_below_the_ephemeral_range_and_binds() -> None:
    port = free_port()
    assert 1024 <= port < _ephemeral_low()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))  # free for the server it was asked for
        server.listen()


def test_processes_asking_at_once_are_handed_different_ports() -> None:
    ask = "from deploy.jars import free_port; print(' '.join(str(free_port()) for _ in range(50)))"
    runs = [subprocess.Popen([sys.executable, "-c", ask], stdout=subprocess.PIPE, text=True) for _ in range(4)]
    ports = [int(port) for run in runs for port in run.communicate(timeout=60)[0].split()]
    assert len(ports) == 200
    assert len(set(ports)) == len(ports)



def test_a_temp_directory_it_cannot_hold_ports_in_leaves_the_choice_to_the_kernel(tmp_path, monkeypatch) -> None:
    """No temp directory to write in was a traceback out of `usl up` (the broker's ports), where
    the kernel's pick had served."""
    import tempfile

    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(blocked))
    with socket.socket() as server:
        server.bind(("127.0.0.1", free_port()))


def test_a_hold_directory_others_may_write_is_not_used(tmp_path, monkeypatch) -> None:
    """The hold directory has a name anyone can guess, in a directory anyone can write: one made
    by another user (here: writable by all) is theirs, who could keep its lock taken and make
    every start wait for ever."""
    import os
    import tempfile

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    squatted = tmp_path / f"usl-ports-{os.getuid()}"
    squatted.mkdir()
    squatted.chmod(0o777)
    with socket.socket() as server:
        server.bind(("127.0.0.1", free_port()))
    assert list(squatted.iterdir()) == []
