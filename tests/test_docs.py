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
