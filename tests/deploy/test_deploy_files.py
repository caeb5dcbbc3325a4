"""Checks of the deploy files: metrics, dashboard, Prometheus config and alerts, compose, k8s.

No Docker engine or Kubernetes cluster is needed: files are parsed and checked for the
promises docs/operations.md makes. promtool and a real Prometheus check the PromQL when
installed; in CI (``CI`` set) they must be, so those tests fail instead of skipping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

import streams.metrics as metrics
from deploy.testing import as_grafana_sends, free_port
from sinks.kinds import ALL_KINDS
from streams.settings import setting_docs

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROM_DIR = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "usl.json"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
K8S = DEPLOY / "k8s"
OPERATIONS = ROOT / "docs" / "operations.md"

SETTING_ENVS = {env for env, _default, _doc in setting_docs()}
INDEX_KINDS = ALL_KINDS
ALLOWED_LABELS = {"stage", "kind", "log", "partition", "rule", "reason", "mode", "outcome", "version"}
# Histograms that count things rather than time them; every other histogram is a duration.
COUNT_HISTOGRAMS = {"usl_sink_batch_chunks", "usl_tail_scan_events"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_METRIC_RE = re.compile(r"\b(usl_[a-z0-9_]+)")
# Label values inside selectors ({job="usl-x"}) are strings, not metric names.
_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is not installed; CI must install prometheus")
        pytest.skip(f"{tool} is not installed (apt-get install prometheus)")
    return path


def _family_names() -> dict[str, str]:
    """PromQL name → type of every usl_ collector in the default registry."""
    names = {}
    for family in REGISTRY.collect():
        if not family.name.startswith("usl_"):
            continue
        # The client strips "_total" from a counter's family name; PromQL uses it.
        name = family.name + "_total" if family.type == "counter" else family.name
        names[name] = family.type
    return names


def _histograms() -> set[str]:
    return {name for name, kind in _family_names().items() if kind == "histogram"}


def metric_names_in(expr: str) -> set[str]:
    """usl_ metric names an expression reads, histogram series mapped to their metric."""
    histograms = _histograms()
    found = set()
    for name in _METRIC_RE.findall(_STRING_RE.sub('""', expr)):
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in histograms:
                name = name.removesuffix(suffix)
                break
        found.add(name)
    return found


def _dashboard_panels() -> list[dict[str, Any]]:
    dash = json.loads(DASHBOARD.read_text())
    panels = []
    for panel in dash["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # children of a collapsed row
    return panels


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard_panels() for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((PROM_DIR / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def k8s_docs() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


# --- streams.metrics -----------------------------------------------------------------------


def test_all_metric_names_equal_registered_collectors() -> None:
    assert set(metrics.ALL_METRIC_NAMES) == set(_family_names())
    assert len(set(metrics.ALL_METRIC_NAMES)) == len(metrics.ALL_METRIC_NAMES)


def test_metric_names_follow_the_naming_rules() -> None:
    for name, kind in _family_names().items():
        assert re.fullmatch(r"usl_[a-z][a-z0-9_]*", name), name
        assert name.endswith("_total") == (kind == "counter"), name
        if kind == "histogram" and name not in COUNT_HISTOGRAMS:
            assert name.endswith("_seconds"), f"{name}: a timing histogram is in seconds"
        # Base units only: no milliseconds, no kilo/mega bytes.
        assert not re.search(r"_(ms|milliseconds|kb|mb|minutes|hours)(_|$)", name), name


def test_metric_labels_are_low_cardinality() -> None:
    collectors = [getattr(metrics, attr) for attr in metrics.__all__]
    labelled = [c for c in collectors if hasattr(c, "_labelnames")]
    assert len(labelled) == len(metrics.ALL_METRIC_NAMES)
    for collector in labelled:
        assert set(collector._labelnames) <= ALLOWED_LABELS, collector._name


def test_public_names_map_to_metric_names() -> None:
    for name in metrics.ALL_METRIC_NAMES:
        collector = getattr(metrics, name)
        assert collector._name in (name, name.removesuffix("_total"))


def test_importing_the_module_twice_reuses_the_collectors() -> None:
    spec = importlib.util.spec_from_file_location("usl_metrics_second_copy", metrics.__file__)
    assert spec is not None and spec.loader is not None
    second = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(second)
    assert second.usl_records_total is metrics.usl_records_total
    assert second.usl_query_seconds is metrics.usl_query_seconds
    assert set(_family_names()) == set(metrics.ALL_METRIC_NAMES)


def test_metrics_text_and_server_expose_build_info() -> None:
    assert b"usl_build_info{version=" in metrics.metrics_text()
    port = metrics.start_metrics_server(0)
    assert port > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        body = response.read()
    assert b"usl_build_info{version=" in body
    assert metrics.METRICS_CONTENT_TYPE.startswith("text/plain")


def test_each_process_serves_only_the_families_it_sets() -> None:
    """A family a process never sets was served at zero by it: the worker's usl_embed_seconds
    made the embedding panel's per-job quantile a NaN series."""
    served = set().union(*metrics.PROCESS_METRICS.values()) | {"usl_build_info"}
    assert served == set(metrics.ALL_METRIC_NAMES)
    metrics.usl_chunks_emitted_total.inc(0)  # unlabelled: served from import on
    for processes, present, absent in (
            (("worker",), {"usl_chunks_emitted_total", "usl_build_info"},
             {"usl_embed_seconds", "usl_query_seconds", "usl_tail_scan_events"}),
            (("sinks",), {"usl_build_info"}, {"usl_embed_seconds", "usl_chunks_emitted_total", "usl_tail_scan_events"}),
            (("sinks", "vector sink"), {"usl_embed_seconds_bucket"}, {"usl_tail_scan_events"}),
            (("planner",), {"usl_tail_scan_events_bucket", "usl_build_info"},
             {"usl_embed_seconds", "usl_chunks_emitted_total"})):
        text = metrics.metrics_text(metrics.served_by(*processes)).decode()
        names = set(re.findall(r"^(usl_[a-z0-9_]+)", text, re.MULTILINE))
        assert present <= names and not absent & {n for name in names for n in (name, _family_of(name))}, \
            (processes, sorted(names))
    # Without a selection (tests, one process holding everything) the whole registry.
    assert b"usl_embed_seconds_bucket" in metrics.metrics_text()


def _family_of(sample: str) -> str:
    for suffix in (*HISTOGRAM_SUFFIXES, "_created"):
        if sample.endswith(suffix):
            return sample.removesuffix(suffix)
    return sample


def test_operations_doc_names_the_processes_that_set_each_metric() -> None:
    """The metrics table's "exported by" column is PROCESS_METRICS."""
    spelled = {"follower": "follower", "workers": "worker", "sinks": "sinks", "vector sink": "vector sink",
               "planner": "planner"}
    rows = {match.group(1): match.group(2) for match in
            re.finditer(r"^\| `(usl_[a-z0-9_]+)` \|.*\| ([^|]+) \|$", OPERATIONS.read_text(), re.MULTILINE)}
    assert set(rows) == set(metrics.ALL_METRIC_NAMES)
    for name, column in rows.items():
        if name == "usl_build_info":
            assert column.strip() == "every process"
            continue
        named = {part.strip() for part in column.split(",")}
        assert named <= set(spelled), (name, column)
        expected = {process for process, families in metrics.PROCESS_METRICS.items() if name in families}
        assert {spelled[part] for part in named} == expected, (name, column)


# --- Grafana --------------------------------------------------------------------------------


def test_dashboard_panels_query_only_known_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert 36 <= dash["schemaVersion"] <= 41
    assert dash["uid"] == "usl-search"
    panels = _dashboard_panels()
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    used: set[str] = set()
    for panel in panels:
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == PROMETHEUS_VARIABLE, panel["title"]
        assert all(target["datasource"] == PROMETHEUS_VARIABLE for target in panel["targets"]), panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names_in(target["expr"])
            assert names, f"{panel['title']}: {target['expr']} reads no usl_ metric"
            assert names <= set(metrics.ALL_METRIC_NAMES), (panel["title"], names)
            used |= names
    # Every metric is on the dashboard; an unwatched metric is one nobody notices.
    assert used == set(metrics.ALL_METRIC_NAMES)


def test_grafana_provisioning_matches_the_dashboard() -> None:
    prov = DEPLOY / "grafana" / "provisioning"
    datasources = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())
    assert [d["type"] for d in datasources["datasources"]] == ["prometheus"]
    assert sum(bool(d.get("isDefault")) for d in datasources["datasources"]) == 1
    providers = yaml.safe_load((prov / "dashboards" / "usl.yml").read_text())
    assert providers["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


# No Grafana server installs from Debian, PyPI or npm here, so the files are checked against
# the provisioning format (grafana.com/docs/grafana/latest/administration/provisioning/) and
# the dashboard JSON model as Grafana 10-12 read them: every key they accept, typed, nothing else.
_DATASOURCE_SCHEMA = {
    "type": "object", "required": ["apiVersion", "datasources"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": 1},
        "deleteDatasources": {"type": "array", "items": {"type": "object", "required": ["name"]}},
        "datasources": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "type", "access", "url"], "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1}, "type": {"type": "string"},
                "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"},
                "access": {"enum": ["proxy", "direct"]}, "url": {"type": "string", "pattern": "^https?://"},
                "orgId": {"type": "integer"}, "isDefault": {"type": "boolean"},
                "editable": {"type": "boolean"}, "version": {"type": "integer"},
                "basicAuth": {"type": "boolean"}, "basicAuthUser": {"type": "string"},
                "withCredentials": {"type": "boolean"}, "user": {"type": "string"},
                "database": {"type": "string"},
                "jsonData": {"type": "object", "properties": {
                    "timeInterval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                    "httpMethod": {"enum": ["GET", "POST"]}}},
                "secureJsonData": {"type": "object"}}}}}}
_PROVIDERS_SCHEMA = {
    "type": "object", "required": ["apiVersion", "providers"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": 1},
        "providers": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "type", "options"], "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1}, "orgId": {"type": "integer"},
                "folder": {"type": "string"}, "folderUid": {"type": "string"}, "type": {"const": "file"},
                "disableDeletion": {"type": "boolean"}, "allowUiUpdates": {"type": "boolean"},
                "updateIntervalSeconds": {"type": "integer", "minimum": 10},
                "options": {"type": "object", "required": ["path"], "additionalProperties": False,
                            "properties": {"path": {"type": "string", "pattern": "^/"},
                                           "foldersFromFilesStructure": {"type": "boolean"}}}}}}}}
_DATASOURCE_REF = {"type": "object", "required": ["type", "uid"], "additionalProperties": False,
                   "properties": {"type": {"type": "string"}, "uid": {"type": "string"}}}
_VARIABLE_SCHEMA = {
    "type": "object", "required": ["name", "type"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "type": {"enum": ["query", "datasource", "custom", "constant", "interval", "textbox", "adhoc"]},
        "label": {"type": "string"}, "hide": {"enum": [0, 1, 2]}, "multi": {"type": "boolean"},
        "includeAll": {"type": "boolean"}, "allValue": {"type": ["string", "null"]},
        "refresh": {"enum": [0, 1, 2]}, "sort": {"type": "integer", "minimum": 0, "maximum": 8},
        "regex": {"type": "string"}, "datasource": _DATASOURCE_REF, "definition": {"type": "string"},
        "query": {"oneOf": [{"type": "string"}, {"type": "object", "required": ["query"],
                                                  "properties": {"query": {"type": "string"},
                                                                 "refId": {"type": "string"}}}]},
        "current": {"type": "object"}, "options": {"type": "array"}}}
_DASHBOARD_SCHEMA = {
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"}, "title": {"type": "string"},
        "schemaVersion": {"type": "integer"}, "version": {"type": "integer"},
        "refresh": {"type": "string"}, "editable": {"type": "boolean"},
        "time": {"type": "object", "required": ["from", "to"]},
        "__requires": {"type": "array", "items": {"type": "object", "required": ["type", "id"]}},
        "templating": {"type": "object", "required": ["list"], "properties": {
            "list": {"type": "array", "items": _VARIABLE_SCHEMA}}},
        "panels": {"type": "array", "items": {
            "type": "object", "required": ["id", "type", "title", "gridPos"],
            "properties": {
                "id": {"type": "integer"}, "type": {"type": "string"}, "title": {"type": "string"},
                "gridPos": {"type": "object", "required": ["h", "w", "x", "y"], "properties": {
                    key: {"type": "integer", "minimum": 0} for key in ("h", "w", "x", "y")}},
                "datasource": _DATASOURCE_REF,
                "targets": {"type": "array", "items": {
                    "type": "object", "required": ["expr", "refId"],
                    "properties": {"expr": {"type": "string"}, "refId": {"type": "string"},
                                   "legendFormat": {"type": "string"}, "datasource": _DATASOURCE_REF}}}}}}}}
PROMETHEUS_VARIABLE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's own variables that a panel query may use.
_GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range", "__all"}


def test_grafana_files_follow_the_provisioning_format() -> None:
    import fastjsonschema

    prov = DEPLOY / "grafana" / "provisioning"
    fastjsonschema.compile(_DATASOURCE_SCHEMA)(yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text()))
    fastjsonschema.compile(_PROVIDERS_SCHEMA)(yaml.safe_load((prov / "dashboards" / "usl.yml").read_text()))
    fastjsonschema.compile(_DASHBOARD_SCHEMA)(json.loads(DASHBOARD.read_text()))
    # The checks can fail: a typo in a key, or a datasource named by a fixed uid again.
    with pytest.raises(fastjsonschema.JsonSchemaException):
        fastjsonschema.compile(_PROVIDERS_SCHEMA)({"apiVersion": 1, "providers": [
            {"name": "usl", "type": "file", "options": {"pth": "/var/lib/grafana/dashboards"}}]})


def test_the_dashboard_imports_into_any_grafana() -> None:
    """No fixed datasource uid and no fixed rate window; log and index kind are variables."""
    dash = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name, label in (("log", "log"), ("kind", "kind")):
        variable = variables[name]
        assert variable["type"] == "query" and variable["datasource"] == PROMETHEUS_VARIABLE
        assert variable["includeAll"] and variable["multi"] and variable["allValue"] == ".*"
        assert re.fullmatch(rf"label_values\(usl_[a-z0-9_]+, {label}\)", variable["query"]["query"])
    # Every datasource reference anywhere in the dashboard is the variable (or Grafana's own).
    text = DASHBOARD.read_text()
    assert '"uid": "prometheus"' not in text
    for panel in _dashboard_panels():
        for target in panel.get("targets", []):
            expr = target["expr"]
            assert not re.search(r"\[[0-9]+[smhdw]\]", expr), f"fixed window in {expr}"
            if "rate(" in expr or "increase(" in expr:
                assert "[$__rate_interval]" in expr, expr
            used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expr))
            assert used <= set(variables) | _GRAFANA_VARIABLES, (expr, used)
    # Each metric labelled by log or index kind is filtered by the variable on every panel.
    index_kind_metrics = {"usl_sink_batch_seconds", "usl_sink_commit_seconds", "usl_sink_batch_chunks",
                          "usl_generation_switches_total", "usl_generation_merges_total",
                          "usl_generation_id", "usl_sink_failures_total", "usl_watermark_seq",
                          "usl_index_lag_seqs", "usl_index_lag_seconds"}
    for expr in dashboard_exprs():
        for name in metric_names_in(expr):
            if name in index_kind_metrics:
                assert 'kind=~"$kind"' in expr, expr
            if name in {"usl_generation_id", "usl_watermark_seq", "usl_index_lag_seqs",
                        "usl_index_lag_seconds", "usl_l1_committed_seq", "usl_progress_marker_seq"}:
                assert 'log=~"$log"' in expr, expr


# --- Prometheus -----------------------------------------------------------------------------


def test_prometheus_config_scrapes_every_process() -> None:
    config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {"usl-workers", "usl-sinks", "usl-planner"} <= set(jobs)
    sink_targets = [t for sc in jobs["usl-sinks"]["static_configs"] for t in sc["targets"]]
    assert {t.split(":")[0] for t in sink_targets} == {f"sink-{k}" for k in INDEX_KINDS}
    assert config["rule_files"] == ["alerts.yml"]


def test_alerts_exist_and_read_known_metrics() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert {"USLIndexLagHigh", "USLDeadLettersRising", "USLWatermarkStalled",
            "USLCursorRefusalsSpike"} <= set(rules)
    assert rules["USLIndexLagHigh"]["for"] == "5m"
    assert "changes(usl_watermark_seq[10m])" in rules["USLWatermarkStalled"]["expr"]
    for rule in rules.values():
        assert metric_names_in(rule["expr"]) <= set(metrics.ALL_METRIC_NAMES), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_promtool_checks_config_and_rules() -> None:
    promtool = _require("promtool")
    for args in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"]):
        done = subprocess.run([promtool, *args], cwd=PROM_DIR, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


RULE_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'usl_dead_letters_total{{stage="ingest", reason="schema", instance="w1"}}'
        values: '0+3x20'
      - series: 'usl_dead_letters_total{{stage="chunking", reason="chunking_failed", instance="w1"}}'
        values: '5x20'
      - series: 'usl_watermark_seq{{log="default", kind="text", instance="s1"}}'
        values: '100x30'
      - series: 'usl_index_lag_seqs{{log="default", kind="text", instance="p1"}}'
        values: '50x30'
      - series: 'usl_watermark_seq{{log="default", kind="vector", instance="s2"}}'
        values: '100+10x30'
      - series: 'usl_index_lag_seqs{{log="default", kind="vector", instance="p1"}}'
        values: '20000x30'
      - series: 'usl_sink_failures_total{{kind="vector", reason="write_error", instance="s2"}}'
        values: '0 0 0 1 2 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3 3'
      - series: 'usl_sink_failures_total{{kind="text", reason="verification", instance="s1"}}'
        values: '0x30'
      - series: 'usl_query_fallbacks_total{{reason="generation_unverified", instance="p1"}}'
        values: '0x10 1x20'
    alert_rule_test:
      - eval_time: 10m
        alertname: USLDeadLettersRising
        exp_alerts:
          - exp_labels: {{severity: warning, stage: ingest, reason: schema}}
      - eval_time: 20m
        alertname: USLWatermarkStalled
        exp_alerts:
          - exp_labels: {{severity: critical, log: default, kind: text}}
      - eval_time: 20m
        alertname: USLIndexLagHigh
        exp_alerts:
          - exp_labels: {{severity: warning, log: default, kind: vector}}
      - eval_time: 20m
        alertname: USLCursorRefusalsSpike
        exp_alerts: []
      - eval_time: 10m
        alertname: USLSinkFailing
        exp_alerts:
          - exp_labels: {{severity: warning, kind: vector, reason: write_error}}
      - eval_time: 30m
        alertname: USLSinkFailing
        exp_alerts: []
      - eval_time: 15m
        alertname: USLGenerationRefused
        exp_alerts:
          - exp_labels: {{severity: warning, reason: generation_unverified}}
      - eval_time: 5m
        alertname: USLGenerationRefused
        exp_alerts: []
"""


def test_alerts_fire_on_the_conditions_they_name(tmp_path: Path) -> None:
    promtool = _require("promtool")
    # promtool compares annotations exactly; this test is about when alerts fire, not prose.
    rules = yaml.safe_load((PROM_DIR / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules_file = tmp_path / "alerts.yml"
    rules_file.write_text(yaml.safe_dump(rules))
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(RULE_TESTS.format(rules=json.dumps(str(rules_file))))
    done = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _populate_every_metric() -> None:
    """Give every labelled metric a series, so each dashboard query has data to return.

    ``labels()`` alone creates a zero-valued child: no value other tests might count on moves.
    """
    for stage in metrics.STAGES:
        metrics.usl_records_total.labels(stage=stage)
        metrics.usl_duplicate_events_total.labels(stage=stage)
    metrics.usl_dead_letters_total.labels(stage="ingest", reason="schema")
    for reason in metrics.SINK_FAILURE_REASONS:
        metrics.usl_sink_failures_total.labels(kind="text", reason=reason)
    metrics.usl_redactions_total.labels(rule="deploy_test")
    metrics.usl_ticks_total.labels(kind="regular")
    metrics.usl_progress_marker_seq.labels(log="deploy_test", partition="0")
    metrics.usl_l1_committed_seq.labels(log="deploy_test")
    for kind in metrics.INDEX_KINDS:
        for collector in (metrics.usl_sink_batch_seconds, metrics.usl_sink_commit_seconds,
                          metrics.usl_sink_batch_chunks, metrics.usl_generation_switches_total,
                          metrics.usl_generation_merges_total, metrics.usl_objectstore_backlog_generations,
                          metrics.usl_objectstore_publish_failures_total):
            collector.labels(kind=kind)
        for gauge in (metrics.usl_generation_id, metrics.usl_watermark_seq,
                      metrics.usl_index_lag_seqs, metrics.usl_index_lag_seconds, metrics.usl_index_stalled):
            gauge.labels(log="deploy_test", kind=kind)
    for mode in metrics.QUERY_MODES:
        metrics.usl_query_seconds.labels(mode=mode)
        metrics.usl_queries_total.labels(mode=mode, outcome="ok")
    metrics.usl_query_fallbacks_total.labels(reason="deploy_test")
    metrics.usl_cursor_refusals_total.labels(reason="deploy_test")


def _query(base: str, expr: str) -> dict[str, Any]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            result: dict[str, Any] = json.load(response)
            return result
    except urllib.error.HTTPError as exc:  # 400 carries Prometheus' parse error
        return {"status": "error", "error": exc.read().decode()}


def test_every_panel_and_alert_query_runs_on_a_real_prometheus(tmp_path: Path) -> None:
    binary = _require("prometheus")
    _populate_every_metric()
    target_port = metrics.start_metrics_server(0)
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(PROM_DIR / "alerts.yml")],
        "scrape_configs": [{"job_name": "usl-test",
                            "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
    }))
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{web_port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + 60
        # rate() needs two samples of every series in its window.
        while True:
            assert server.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                ready = _query(base, "count_over_time(usl_build_info[1m])")
                result = ready.get("data", {}).get("result", [])
                if result and float(result[0]["value"][1]) >= 3:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Prometheus never scraped the metrics server"
            time.sleep(0.5)
        for expr in map(as_grafana_sends, dashboard_exprs()):
            answer = _query(base, expr)
            assert answer["status"] == "success", (expr, answer)
            assert answer["data"]["result"], f"no data for dashboard query {expr}"
        for rule in alert_rules():
            answer = _query(base, rule["expr"])
            assert answer["status"] == "success", (rule["alert"], answer)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


# --- docker compose -------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def test_compose_runs_a_three_broker_kraft_cluster() -> None:
    services = _compose()["services"]
    brokers = {name: s for name, s in services.items() if "apache/kafka" in s.get("image", "")}
    assert len(brokers) == 3
    node_ids = set()
    cluster_ids = set()
    for service in brokers.values():
        assert re.search(r"apache/kafka:\$\{KAFKA_VERSION:-4\.1\.\d+\}|apache/kafka:4\.1\.\d+",
                         service["image"])
        env = service["environment"]
        assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
        voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
        assert {v.split("@")[1].split(":")[0] for v in voters} == set(brokers)
        assert int(env["KAFKA_DEFAULT_REPLICATION_FACTOR"]) == 3
        assert int(env["KAFKA_MIN_INSYNC_REPLICAS"]) == 2
        assert int(env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]) == 3
        assert int(env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"]) == 3
        assert int(env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"]) == 2
        node_ids.add(env["KAFKA_NODE_ID"])
        cluster_ids.add(env["CLUSTER_ID"])
        assert service["healthcheck"]["test"]
    assert len(node_ids) == 3
    assert len(cluster_ids) == 1


def test_compose_runs_workers_sinks_planner_and_monitoring() -> None:
    services = _compose()["services"]
    usl = {name: s for name, s in services.items() if "build" in s}
    for service in usl.values():
        env = service["environment"]
        assert set(env) <= SETTING_ENVS, set(env) - SETTING_ENVS
        assert env["USL_REPLICATION_FACTOR"] == "3"
        assert env["USL_MIN_INSYNC_REPLICAS"] == "2"
        assert len(env["KAFKA_BOOTSTRAP_SERVERS"].split(",")) == 3
        assert (COMPOSE.parent / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    assert services["usl-topics"]["command"] == ["topics", "create"]
    assert services["worker"]["command"] == ["worker"]
    assert services["worker"]["deploy"]["replicas"] >= 2
    for kind in INDEX_KINDS:
        sink = services[f"sink-{kind}"]
        assert sink["command"] == ["sink", "--kind", kind]
        assert any(v.endswith(":/data/usl") for v in sink["volumes"])
    planner = services["planner"]
    assert planner["command"][0] == "serve" and "0.0.0.0" in planner["command"]
    assert "8765:8765" in planner["ports"]
    # Beyond loopback `usl serve` refuses to start without API keys: compose mounts them.
    keys_secret = _compose()["secrets"][planner["secrets"][0]]
    assert planner["environment"]["USL_API_KEYS_FILE"] == f"/run/secrets/{planner['secrets'][0]}"
    assert keys_secret["file"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    assert (COMPOSE.parent / mounts["/etc/prometheus"] / "prometheus.yml").is_file()
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert (COMPOSE.parent / mounts["/etc/grafana/provisioning"] / "datasources").is_dir()
    assert (COMPOSE.parent / mounts["/var/lib/grafana/dashboards"] / "usl.json").is_file()


OBJECT_STORE_ENVS = {"USL_OBJECT_STORE", "USL_S3_ENDPOINT", "USL_S3_ACCESS_KEY", "USL_S3_SECRET_KEY"}


def test_compose_sinks_publish_to_an_optional_s3_service() -> None:
    services = _compose()["services"]
    store = services["s3"]
    # Optional: the default `docker compose up` runs without it, and the sinks then stay local.
    assert store["profiles"] == ["objectstore"]
    assert re.fullmatch(r"andrewgaul/s3proxy:\$\{S3PROXY_VERSION:-2\.6\.0\}", store["image"])
    env = store["environment"]
    assert env["JCLOUDS_PROVIDER"] == "filesystem"
    assert env["S3PROXY_AUTHORIZATION"] == "aws-v2-or-v4"
    port = env["S3PROXY_ENDPOINT"].rsplit(":", 1)[1]
    assert any(v.endswith(":" + env["JCLOUDS_FILESYSTEM_BASEDIR"]) for v in store["volumes"])
    assert store["volumes"][0].split(":")[0] in _compose()["volumes"]
    for kind in INDEX_KINDS:
        sink = services[f"sink-{kind}"]
        sink_env = sink["environment"]
        assert OBJECT_STORE_ENVS <= set(sink_env), kind
        # Every value comes from the operator's environment; empty means unset (local only).
        for name in OBJECT_STORE_ENVS:
            assert re.fullmatch(rf"\$\{{{name}:?-[^}}]*\}}", sink_env[name]), (kind, name)
        assert sink_env["USL_S3_ENDPOINT"] == f"${{USL_S3_ENDPOINT-http://s3:{port}}}"
        assert sink["depends_on"]["s3"]["required"] is False
    # The server accepts exactly the keys the sinks sign with.
    assert env["S3PROXY_IDENTITY"] == "${USL_S3_ACCESS_KEY:-}"
    assert env["S3PROXY_CREDENTIAL"] == "${USL_S3_SECRET_KEY:-}"
    for name in ("worker", "planner", "usl-topics"):
        assert not OBJECT_STORE_ENVS & set(services[name]["environment"]), name


def test_dockerfile_installs_the_project_as_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert "pip install" in text
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert re.search(r'^ENTRYPOINT \["usl"\]', text, re.M)


# --- Kubernetes -----------------------------------------------------------------------------


def test_every_k8s_document_is_a_named_object() -> None:
    docs = list(k8s_docs())
    assert docs
    for filename, doc in docs:
        assert doc.get("apiVersion") and doc.get("kind"), filename
        assert doc["metadata"]["name"], filename


def test_k8s_deployments_have_probes_resources_and_matching_selectors() -> None:
    deployments = {d["metadata"]["name"]: d for _, d in k8s_docs() if d["kind"] == "Deployment"}
    assert {"usl-worker", "usl-planner"} <= set(deployments)
    assert {f"usl-sink-{k}" for k in INDEX_KINDS} <= set(deployments)
    for name, deployment in deployments.items():
        spec = deployment["spec"]
        template = spec["template"]
        labels = template["metadata"]["labels"]
        assert spec["selector"]["matchLabels"].items() <= labels.items(), name
        assert template["spec"]["securityContext"]["runAsNonRoot"] is True, name
        for container in template["spec"]["containers"]:
            ports = {p["name"] for p in container.get("ports", [])}
            for probe in ("readinessProbe", "livenessProbe"):
                assert probe in container, f"{name}: {probe}"
                assert container[probe]["httpGet"]["port"] in ports, f"{name}: {probe} port"
            assert container["resources"]["requests"], name
            assert container["resources"]["limits"], name
        for container in template["spec"].get("initContainers", []):
            assert container["resources"]["requests"], name
    worker = deployments["usl-worker"]["spec"]
    assert worker["replicas"] >= 2
    assert worker["template"]["spec"]["containers"][0]["args"] == ["worker"]
    for kind in INDEX_KINDS:
        sink = deployments[f"usl-sink-{kind}"]["spec"]
        # Exactly one writer per index, also during a rollout.
        assert sink["replicas"] == 1 and sink["strategy"]["type"] == "Recreate"
        assert sink["template"]["spec"]["containers"][0]["args"] == ["sink", "--kind", kind]
    pod = deployments["usl-planner"]["spec"]["template"]["spec"]
    planner = pod["containers"][0]
    assert planner["readinessProbe"]["httpGet"]["path"] == "/healthz"
    # The planner listens on 0.0.0.0, so it must find its API keys where the config says.
    config = next(d for _, d in k8s_docs() if d["kind"] == "ConfigMap")["data"]
    mounts = {m["name"]: m["mountPath"] for m in planner["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    keys_volume = next(name for name, path in mounts.items()
                       if config["USL_API_KEYS_FILE"].startswith(path + "/"))
    assert secrets[keys_volume] == "usl-api-keys"


def test_k8s_service_selects_the_planner_pods() -> None:
    docs = [d for _, d in k8s_docs()]
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "usl-planner")
    planner = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "usl-planner")
    pod_labels = planner["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    for other in docs:
        if other["kind"] == "Deployment" and other is not planner:
            other_labels = other["spec"]["template"]["metadata"]["labels"]
            assert not service["spec"]["selector"].items() <= other_labels.items()
    port = service["spec"]["ports"][0]
    assert port["port"] == 8765
    container_ports = {p["name"]: p["containerPort"] for p in planner["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert container_ports[port["targetPort"]] == 8765


def test_k8s_configmap_keys_are_settings() -> None:
    config = next(d for _, d in k8s_docs() if d["kind"] == "ConfigMap")
    data = config["data"]
    assert set(data) <= SETTING_ENVS, set(data) - SETTING_ENVS
    assert data["USL_REPLICATION_FACTOR"] == "3"
    assert data["USL_MIN_INSYNC_REPLICAS"] == "2"
    assert data["USL_METRICS_PORT"] == "9100"
    # Secrets come from the optional Secret, never from a ConfigMap.
    assert not {"USL_CURSOR_KEY", "USL_EMBEDDINGS_API_KEY"} & set(data)


def test_k8s_sinks_read_the_object_store_from_config_and_its_keys_from_a_secret() -> None:
    config = next(d for _, d in k8s_docs() if d["kind"] == "ConfigMap")["data"]
    assert {"USL_OBJECT_STORE", "USL_S3_ENDPOINT"} <= set(config)
    assert not {"USL_S3_ACCESS_KEY", "USL_S3_SECRET_KEY"} & set(config)
    # Unset by default (empty is unset): the manifests keep working without a store.
    assert config["USL_OBJECT_STORE"] == "" or config["USL_OBJECT_STORE"].startswith("s3://")
    deployments = {d["metadata"]["name"]: d for _, d in k8s_docs() if d["kind"] == "Deployment"}
    for kind in INDEX_KINDS:
        container = deployments[f"usl-sink-{kind}"]["spec"]["template"]["spec"]["containers"][0]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container.get("env", [])
                if "secretKeyRef" in e.get("valueFrom", {})}
        assert set(refs) == {"USL_S3_ACCESS_KEY", "USL_S3_SECRET_KEY"}, kind
        assert {r["name"] for r in refs.values()} == {"usl-objectstore"}, kind
        assert all(r["key"] == name for name, r in refs.items()), kind
    # The planner still reads generations from the shared volume (docs/operations.md).
    claims = {d["metadata"]["name"]: d for _, d in k8s_docs() if d["kind"] == "PersistentVolumeClaim"}
    assert "ReadWriteMany" in claims["usl-home"]["spec"]["accessModes"]


def test_k8s_volumes_and_rebuild_job() -> None:
    docs = [d for _, d in k8s_docs()]
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    for doc in docs:
        if doc["kind"] in {"Deployment", "Job"}:
            for volume in doc["spec"]["template"]["spec"].get("volumes", []):
                if "persistentVolumeClaim" in volume:
                    assert volume["persistentVolumeClaim"]["claimName"] in claims
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["rebuild", "text", "--from-seq", "0"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in {"Never", "OnFailure"}


def test_kustomization_lists_every_manifest_but_the_job() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    resources = set(kustomization["resources"])
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "rebuild-job.yaml"}
    assert resources == manifests
    assert kustomization["namespace"] == "usl"


# --- docs -----------------------------------------------------------------------------------


def test_operations_doc_covers_every_metric_and_alert() -> None:
    text = OPERATIONS.read_text()
    for name in metrics.ALL_METRIC_NAMES:
        assert f"`{name}`" in text, name
    for rule in alert_rules():
        assert rule["alert"] in text, rule["alert"]


# --- the object-store layout (deploy/k8s-objectstore): no shared volume ----------------------

K8S_OBJECTSTORE = DEPLOY / "k8s-objectstore"


def _objectstore_layout() -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k deploy/k8s-objectstore`` would create."""
    for path in sorted(K8S_OBJECTSTORE.glob("*.yaml")):  # every file parses on its own too
        assert [doc for doc in yaml.safe_load_all(path.read_text()) if doc], path
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is not installed; CI must render the kustomizations")
        pytest.skip("kubectl is not installed (it renders the kustomization)")
    done = subprocess.run([kubectl, "kustomize", str(K8S_OBJECTSTORE)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}


def test_k8s_objectstore_layout_needs_no_shared_volume() -> None:
    """Sink shards each on their own ReadWriteOnce volume, planner replicas on an emptyDir each,
    both reading the store's keys from the Secret usl-objectstore; no PersistentVolumeClaim
    (the ReadWriteMany usl-home) and no unsharded sink Deployment is left."""
    objects = _objectstore_layout()
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    assert "PersistentVolumeClaim" not in by_kind
    assert not [name for name in by_kind["Deployment"] if name.startswith("usl-sink")]
    assert by_kind["ConfigMap"]["usl-config"]["data"]["USL_OBJECT_STORE"].startswith("s3://")
    for obj in objects:
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        assert not [v for v in spec.get("volumes", []) if "persistentVolumeClaim" in v], obj["metadata"]["name"]

    shards = by_kind["StatefulSet"]["usl-sink-shard"]
    (claim,) = shards["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    (sink,) = shards["spec"]["template"]["spec"]["containers"]
    env = _env(sink)
    assert int(env["USL_SINK_SHARDS"]) == shards["spec"]["replicas"] == 2
    assert '--shard "${HOSTNAME##*-}/${USL_SINK_SHARDS}"' in " ".join(sink["command"])
    assert {"name": claim["metadata"]["name"], "mountPath": "/data/usl"} in sink["volumeMounts"]
    governing = by_kind["Service"][shards["spec"]["serviceName"]]  # a StatefulSet needs its Service
    assert governing["spec"]["clusterIP"] == "None"
    assert governing["spec"]["selector"].items() <= shards["spec"]["template"]["metadata"]["labels"].items()

    replicas = by_kind["Deployment"]["usl-planner-replica"]
    assert replicas["spec"]["replicas"] >= 2
    pod = replicas["spec"]["template"]["spec"]
    (planner,) = pod["containers"]
    env = _env(planner)
    assert env["USL_PLANNER_SOURCE"] == "object-store" and int(env["USL_PLANNER_CACHE_BYTES"]) > 0
    home = next(m["name"] for m in planner["volumeMounts"] if m["mountPath"] == "/data/usl")
    (volume,) = [v for v in pod["volumes"] if v["name"] == home]
    assert "emptyDir" in volume
    service = by_kind["Service"]["usl-planner"]
    assert service["spec"]["selector"].items() <= replicas["spec"]["template"]["metadata"]["labels"].items()

    for container in (sink, planner):  # the store's keys come from a Secret, never the ConfigMap
        env = _env(container)
        for key in ("USL_S3_ACCESS_KEY", "USL_S3_SECRET_KEY"):
            assert env[key] == {"secretKeyRef": {"name": "usl-objectstore", "key": key}}, (container["name"], key)
    assert not {"USL_S3_ACCESS_KEY", "USL_S3_SECRET_KEY"} & set(by_kind["ConfigMap"]["usl-config"]["data"])

    docs = OPERATIONS.read_text()
    assert "kubectl apply -k deploy/k8s-objectstore" in docs
    assert "kubectl -n usl exec usl-sink-shard-0 -- usl rebuild" in docs


def test_compose_planner_replica_reads_the_store_not_the_sinks_volume() -> None:
    services = _compose()["services"]
    replica = services["planner-replica"]
    assert replica["profiles"] == ["objectstore"]
    env = replica["environment"]
    assert env["USL_PLANNER_SOURCE"] == "object-store" and int(env["USL_PLANNER_CACHE_BYTES"]) > 0
    assert env["USL_OBJECT_STORE"] == services["sink-text"]["environment"]["USL_OBJECT_STORE"]
    assert replica["volumes"] == ["planner-replica-home:/data/usl"]
    assert not [v for s in services.values() if s is not replica for v in s.get("volumes", [])
                if v.startswith("planner-replica-home:")]
    assert "planner-replica" in OPERATIONS.read_text()
    # One cursor key for both planners, so a cursor continues on either (issue 18: cursors valid
    # on any replica); no other service gets it.
    assert env["USL_CURSOR_KEY"] == services["planner"]["environment"]["USL_CURSOR_KEY"] == "${USL_CURSOR_KEY:-}"
    assert [name for name, service in services.items()
            if "USL_CURSOR_KEY" in (service.get("environment") or {})] == ["planner", "planner-replica"]
