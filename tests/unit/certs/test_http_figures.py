"""The pure cores behind the services' /metrics and pages: the dispatcher's figures of one
install, the certs expiry buckets, the upgrade's node states and progress, and the event
catalogue page (every schema shape the contracts produce, escaped)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bke.contracts.asyncapi import build_asyncapi
from bke.adapters.http.catalogue import catalogue_page, schema_type
from bke.core.pki.expiry import ExpiryRow
from bke.core.upgrade.run import NodeOutcome, StepRun, UpgradeRun
from bke_certs.expiry_view import bucket_of, expiry_buckets
from bke_certs.pages import cluster_page
from bke_dispatcher.metrics import cluster_figures
from bke_upgrader.progress import node_states, progress_ratio

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
EVIL = '<script>alert("x")</script>'


def test_install_figures_count_unrecorded_nodes_as_pending():
    f = cluster_figures("c", {"status": "Running"}, ["Succeeded", None, "Running"], {"Running": 2, "Succeeded": 5}, 10)
    assert f.status == "Running" and f.phases == {"Succeeded": 1, "Pending": 1, "Running": 1}
    assert f.nodes == {"Running": 2, "Succeeded": 5, "Pending": 3, "Failed": 0} and f.in_flight == 2
    unknown_plan = cluster_figures("c", {}, [], {"Failed": 1}, None)
    assert unknown_plan.status == "Pending" and unknown_plan.nodes["Pending"] == 0 and unknown_plan.in_flight == 0


def _row(days: float, name: str = "x") -> ExpiryRow:
    return ExpiryRow(name, name, None, False, NOW + timedelta(days=days), timedelta(days=days), "ca", ("n1",))


def test_expiry_buckets_are_exclusive_and_bounded_inclusively():
    assert [bucket_of(timedelta(days=d)) for d in (-1, 0, 0.5, 7, 7.01, 30, 89, 90, 91)] == [
        "expired", "expired", "7d", "7d", "30d", "30d", "90d", "90d", "later"]
    assert expiry_buckets([_row(-3), _row(3), _row(3), _row(400)], NOW) == {
        "expired": 1, "7d": 2, "30d": 0, "90d": 0, "later": 1}


def test_certs_page_escapes_and_pages():
    rows = [_row(3, EVIL), *[_row(100, f"leaf{i}") for i in range(5)]]
    page = cluster_page(EVIL, rows, NOW, 0, 2, node=EVIL)
    assert "<script>alert" not in page and "rows 0-0 of 0" in page  # no certificate is held by that "node"
    page = cluster_page("c", rows, NOW, 2, 2, node="")
    assert "rows 3-4 of 6" in page and "leaf1" in page and "leaf3" not in page
    assert "previous" in page and "offset=4" in page


def _run() -> UpgradeRun:
    return UpgradeRun(
        request_id="r", cluster="c", current={}, target={}, started_at="t0", left_out=["x"],
        steps=[StepRun("pre-checks", status="Succeeded"),
               StepRun("control-plane", batches=[["m1"], ["m2"], ["m3"]], status="Running", batch=1, done=1),
               StepRun("workers", batches=[["w1", "w2"]]),
               StepRun("post-checks", batches=[["m1", "m2", "m3", "w1", "w2"]])])


def test_upgrade_node_states_and_progress_move_with_the_record():
    run = _run()
    assert node_states(run) == {"Pending": 3, "Upgrading": 2, "Upgraded": 0, "Failed": 0, "RolledBack": 0, "LeftOut": 1}
    before = progress_ratio(run)
    assert before == (1 + 1) / (1 + 3 + 2 + 5)
    run.steps[1].status, run.steps[1].batch, run.steps[1].done = "Succeeded", 3, 3
    run.steps[2].status, run.steps[2].done = "Failed", 1
    run.failed = [NodeOutcome("w2", "RolledBack", "workers")]
    states = node_states(run)
    # w1 answered in the failed batch, but the record keeps only counts: it stays Pending
    assert states["RolledBack"] == 1 and states["Upgrading"] == 3 and states["Pending"] == 1
    assert before < progress_ratio(run) < 1
    run.status = "Succeeded"
    assert progress_ratio(run) == 1.0 and node_states(run)["Upgraded"] == 4


def test_catalogue_page_lists_every_channel_and_schema_and_escapes():
    doc = build_asyncapi()
    page = catalogue_page(doc, "planner")
    for ch in doc["channels"].values():
        if ch["address"]:
            assert f"<code>{ch['address']}</code>" in page
    for name in doc["components"]["schemas"]:
        assert f'id="schema-{name}"' in page
    assert "planner" in page and "<script" not in page
    assert schema_type({"type": "array", "items": {"$ref": "#/components/schemas/A"}}) == 'list of <a href="#schema-A">A</a>'
    assert schema_type({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "string | null"
    assert schema_type({"type": "object", "additionalProperties": {"type": "integer"}}) == "map of integer"
    assert schema_type({"enum": [EVIL]}) == "one of &#x27;&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#x27;"
    hostile = {"channels": {"c": {"address": EVIL, "description": EVIL, "messages": {EVIL: {}}}},
               "components": {"schemas": {EVIL: {"description": EVIL, "properties": {EVIL: {"type": EVIL}}}}}}
    assert "<script>" not in catalogue_page(hostile, EVIL)
