"""deploy/grafana/: valid dashboard JSON whose every query names only metrics the services export
(with their own labels), and uses each of them. Grafana itself does not run here."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.metrics import MetricWrapperBase

from bke.adapters.http.metrics import ServiceMetrics

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
# The metric families the services export, with their labels.
METRICS: dict[str, set[str]] = {
    "bke_messages_handled_total": {"service", "subject"},
    "bke_messages_failed_total": {"service", "subject"},
    "bke_handler_seconds": {"service", "subject"},
    "bke_clusters": {"state"},
    "bke_phases": {"cluster", "state"},
    "bke_commands_in_flight": {"cluster"},
    "bke_nodes": {"cluster", "state"},
    "bke_certificates": {"cluster", "expires_within"},
    "bke_upgrade_nodes": {"cluster", "state"},
    "bke_upgrade_progress_ratio": {"cluster"},
    "bke_service_ready": {"service"},
}
HISTOGRAMS = {"bke_handler_seconds"}
SERIES = re.compile(r"\b(bke_[a-z_]+)\b(\{[^}]*\})?")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def _family(series: str) -> tuple[str, set[str]]:
    """The family a series name belongs to, and the extra labels its suffix brings (`le`)."""
    for name in HISTOGRAMS:
        if series in (f"{name}_bucket", f"{name}_sum", f"{name}_count"):
            return name, {"le"} if series.endswith("_bucket") else set()
    return series, set()


def _queries(node: Any) -> Iterator[str]:
    """Every PromQL text in a dashboard: panel targets and template variable queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                yield value["query"]
            else:
                yield from _queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from _queries(item)


def _dashboards() -> list[Path]:
    found = sorted(GRAFANA.glob("*.json"))
    assert found, "no dashboard under deploy/grafana"
    return found


@pytest.mark.parametrize("path", _dashboards(), ids=lambda p: p.name)
def test_dashboard_queries_name_only_exported_metrics_and_their_labels(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["panels"]
    used: set[str] = set()
    for query in _queries(dashboard):
        families = []
        for series, selector in SERIES.findall(query):
            family, extra = _family(series)
            assert family in METRICS, f"{path.name}: {series!r} is not an exported metric ({query})"
            labels = set(MATCHER.findall(selector))
            assert labels <= METRICS[family] | extra, f"{path.name}: {series} has no label {labels - METRICS[family]}"
            families.append((family, extra))
            used.add(family)
        assert families, f"{path.name}: a query names no BKE metric: {query}"
        known = set().union(*(METRICS[f] | extra for f, extra in families))
        for group in GROUPING.findall(query):
            labels = {g.strip() for g in group.split(",") if g.strip()}
            assert labels <= known, f"{path.name}: grouped by {labels - known}, which {query!r} does not carry"
    assert used == set(METRICS), f"{path.name}: unused metrics {set(METRICS) - used}"


def test_panels_do_not_overlap() -> None:
    for path in _dashboards():
        cells: set[tuple[int, int]] = set()
        for panel in json.loads(path.read_text())["panels"]:
            g = panel["gridPos"]
            mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & mine, f"{path.name}: {panel['title']!r} overlaps another panel"
            assert g["x"] + g["w"] <= 24
            cells |= mine


def test_the_bus_metrics_in_code_are_the_ones_the_dashboard_knows() -> None:
    """The families every service registers (bke.adapters.http.metrics) carry the names and labels above."""
    metrics = ServiceMetrics("planner")
    seen = []
    for attr in vars(metrics).values():
        if isinstance(attr, MetricWrapperBase):
            names = {m.name for m in attr.describe()}
            (name,) = names
            exported = f"{name}_total" if attr._type == "counter" else name
            assert exported in METRICS, exported
            assert set(attr._labelnames) == METRICS[exported], exported
            seen.append(exported)
    assert len(seen) == 4, seen  # handled, failed, handler time, ready
