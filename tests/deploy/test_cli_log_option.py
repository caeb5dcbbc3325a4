"""``--log`` (and ``USL_LOG``) of every command takes only a name an ASP event can carry: a bad
one is a usage error before anything runs, not an import whose every record is dead-lettered."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploy.cli import app

COMMANDS = [["ingest", "transcript.jsonl"], ["search", "deploy"], ["sql", "SELECT 1"],
            ["sessionql", "FROM sessions"], ["rebuild", "text"], ["export", "sessions"], ["deadletters"],
            ["status"]]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
@pytest.mark.parametrize("log", ["team a", "-x", "a/b", "é", "x" * 129, ""])
def test_a_bad_log_name_is_a_usage_error(args: list[str], log: str, tmp_path: Path) -> None:
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    result = CliRunner().invoke(app, [*args, "--log", log], env=env)
    assert result.exit_code == 2, result.output
    assert "is not a log name" in result.output
    assert not (tmp_path / "home").exists()  # nothing ran


def test_the_environment_variable_is_checked_too(tmp_path: Path) -> None:
    env = {"USL_HOME": str(tmp_path / "home"), "USL_LOG": "team a", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    result = CliRunner().invoke(app, ["search", "deploy"], env=env)
    assert result.exit_code == 2 and "is not a log name" in result.output, result.output


PRINCIPAL_COMMANDS = [["search", "deploy"], ["sql", "SELECT 1"], ["sessionql", "FROM sessions"],
                      ["export", "sessions"]]


@pytest.mark.parametrize("args", PRINCIPAL_COMMANDS, ids=lambda args: args[0])
@pytest.mark.parametrize("principal", ["", " ", "user:alice", "tenant:acme"])
def test_a_bad_principal_is_a_usage_error(args: list[str], principal: str, tmp_path: Path) -> None:
    # `--as ''` once ran as the default principal: an empty variable in a script widened a read.
    env = {"USL_HOME": str(tmp_path / "home"), "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    result = CliRunner().invoke(app, [*args, "--as", principal], env=env)
    assert result.exit_code == 2, result.output
    assert "invalid principal" in result.output and "USL_DEFAULT_PRINCIPAL" in result.output
    assert not (tmp_path / "home").exists()  # nothing ran
