"""The docs cover every setting, CLI command and option, and metric; the README's two
commands exist and .ci/run calls the test one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_setting_is_documented() -> None:
    from streams.settings import setting_docs

    text = (ROOT / "docs" / "configuration.md").read_text()
    for env, _default, doc in setting_docs():
        assert f"`{env}`" in text, f"{env} missing from docs/configuration.md"
        assert doc in text, f"the meaning of {env} in docs/configuration.md is out of date"


def test_cli_reference_is_current() -> None:
    generated = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--print"],
                               capture_output=True, text=True, check=False)
    assert generated.returncode == 0, generated.stderr
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_cli_docs import render
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / "cli.md").read_text() == render(), \
        "docs/cli.md is stale: run .venv/bin/python scripts/gen_cli_docs.py"


def test_cli_reference_names_arguments_as_the_usage_line_does() -> None:
    """Found by a new user: docs/cli.md listed `usl sql QUERY` and `usl ingest PATHS` where
    `--help` says `SQL` and `PATH...`, and `usl export`'s WHAT as required (it defaults to
    sessions)."""
    from typer.testing import CliRunner

    from deploy.cli import app

    text = (ROOT / "docs" / "cli.md").read_text()
    for command, usage, row in [("sql", "usl sql [OPTIONS] SQL", "| `SQL` | required |"),
                                ("ingest", "usl ingest [OPTIONS] PATH...", "| `PATH...` | required |"),
                                ("export", "usl export [OPTIONS] [WHAT]", "| `WHAT` | `sessions` |")]:
        assert usage in CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "120"}).output
        assert row in text, row


def test_every_metric_is_documented() -> None:
    from streams.metrics import ALL_METRIC_NAMES

    text = (ROOT / "docs" / "operations.md").read_text()
    for name in ALL_METRIC_NAMES:
        assert name in text, f"metric {name} missing from docs/operations.md"


def test_every_topic_is_documented() -> None:
    from streams.settings import Settings
    from streams.topics import topic_specs

    text = (ROOT / "docs" / "architecture.md").read_text() + (ROOT / "docs" / "operations.md").read_text()
    for spec in topic_specs(Settings.from_env({})):
        generic = spec.name.replace("usl.pipeline-", "").replace("-changelog", "")
        assert spec.name in text or generic in text, f"topic {spec.name} is not documented"


def test_readme_commands_and_ci() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_curl_examples_that_post_json_say_so() -> None:
    """The API takes only JSON bodies (docs/security.md) and ``curl -d`` alone sends a form type:
    every printed curl command that sends a body names its Content-Type, so it works as printed."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    commands = [(page.name, line) for page in pages
                for line in page.read_text().replace("\\\n", " ").splitlines()]  # continued lines joined
    posts = [(page, line) for page, line in commands
             if re.match(r"\s*(\$ )?curl\b", line) and re.search(r"\s(-d|--data(-raw|-binary)?)\s", line)]
    assert posts, "the README's curl examples were not found"
    for page, line in posts:
        assert re.search(r"-H ['\"]Content-Type: application/json['\"]", line), f"{page}: {line}"
