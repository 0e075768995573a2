"""The Grafana dashboard (deploy/grafana/): valid, laid out, and querying only metrics the code exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "reelrl-dashboard.json"
# PromQL words that are neither metrics nor functions (functions and aggregations are followed by "(").
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range and subquery durations
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)  # label lists
    names = set()
    for match in re.finditer(r"(?<![0-9.])[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        if expr[match.end() :].lstrip().startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def test_metric_names_of_promql_by_hand():
    assert metric_names('sum by (queue, state) (rate(reelrl_worker_tasks_total{queue="x"}[5m]))') == {
        "reelrl_worker_tasks_total"
    }
    assert metric_names("histogram_quantile(0.95, sum by (le) (rate(a_bucket[5m]))) / on (x) b") == {
        "a_bucket",
        "b",
    }
    assert metric_names('c{key=~"reward/.*"} > bool 0.5 offset 1h') == {"c"}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found += panel.get("panels", [])  # panels of collapsed rows
    return found


def test_dashboard_has_job_reward_and_training_rows(dashboard):
    assert dashboard["uid"] and dashboard["title"]
    rows = [p["title"] for p in panels(dashboard) if p["type"] == "row"]
    assert rows == ["Jobs", "Reward", "Training"]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))


def test_panels_query_the_prometheus_variable_and_do_not_overlap(dashboard):
    assert [v["name"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"] == ["datasource"]
    occupied: set[tuple[int, int]] = set()
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & occupied, f"panel {panel['title']!r} overlaps another"
        occupied |= cells
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], f"panel {panel['title']!r} has no query"


def test_every_query_names_only_metrics_the_code_exports(dashboard, registered_metrics):
    queried = set()
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            names = metric_names(target["expr"])
            assert names, f"{panel['title']!r}: {target['expr']} selects no metric"
            unknown = names - registered_metrics
            assert not unknown, f"{panel['title']!r}: {sorted(unknown)} are not exported by any service"
            queried |= names
    # Each service's metrics are on the dashboard.
    for prefix in ("reelrl_api_", "reelrl_worker_", "reelrl_reward_", "reelrl_trainer_"):
        assert any(name.startswith(prefix) for name in queried), prefix


def test_training_panels_name_keys_the_trainer_logs(dashboard):
    """A `key="…"` the trainer never writes would leave its panel empty for good."""
    trainer = "\n".join(p.read_text() for p in (ROOT / "services" / "trainer").rglob("*.py"))
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            for key in re.findall(r'key="([^"]+)"', target["expr"]):
                assert f'"{key}"' in trainer, f"{panel['title']!r}: the trainer logs no {key!r}"
