"""Every version path rule, table-driven: which rules a (current, target) pair breaks."""
from __future__ import annotations

import pytest

from bke.core.upgrade import ETCD_MIN_PATCH, PATH_RULES, UpgradeRequestError, path_findings, resolve_target
from bke.core.versions import KUBERNETES, parse_version

from ...upgrade_helpers import SEED, SPLIT, plan_of

# (current k8s, etcd, containerd), (--to, --etcd-version, --containerd-version), rules broken
CASES = [
    (("v1.33.2", "v3.5.32", "v2.1.1"), ("v1.34.1", "v3.6.4", None), set()),
    (("v1.33.2", "v3.5.1", "v2.1.1"), ("v1.33.5", None, None), set()),  # patch, etcd to the row's 3.5.21
    (("v1.33.2", "v3.5.1", "v2.1.1"), ("v1.33.2", "v3.5.32", None), set()),  # etcd patch only
    (("v1.33.2", "v3.5.1", "v2.1.1"), ("v1.32.4", "v3.5.1", None), {"KubernetesNoDowngrade"}),
    (("v1.33.2", "v3.5.1", "v2.1.1"), ("v1.33.1", "v3.5.1", None), {"KubernetesNoDowngrade"}),
    (("v1.33.2", "v3.5.32", "v2.1.1"), ("v1.35.0", "v3.6.5", None), {"KubernetesOneMinor"}),
    (("v1.33.2", "v3.5.32", "v2.1.1"), ("v1.38.0", "v3.6.5", None), {"KubernetesOneMinor", "TargetSupported"}),
    (("v1.37.0", "v3.6.6", "v2.2.0"), ("v1.38.0", None, None), {"TargetSupported"}),
    (("v1.33.2", "v3.5.1", "v2.1.1"), ("v2.0.0", "v3.5.1", None), {"KubernetesOneMinor", "TargetSupported"}),
    (("v1.33.2", "v3.5.32", "v2.1.1"), ("v1.33.2", "v3.5.1", None), {"EtcdNoDowngrade"}),
    (("v1.34.1", "v3.6.4", "v2.1.1"), ("v1.34.1", "v3.5.32", None), {"EtcdNoDowngrade"}),
    (("v1.33.2", "v3.5.1", "v2.1.1"), ("v1.34.1", None, None), {"EtcdMinimumPatch"}),  # default etcd 3.6.4
    (("v1.33.2", "v3.5.31", "v2.1.1"), ("v1.34.1", "v3.6.4", None), {"EtcdMinimumPatch"}),
    (("v1.34.1", "v3.6.4", "v2.1.1"), ("v1.34.1", "v3.7.0", None), {"TargetSupported"}),
    (("v1.33.2", "v3.5.32", "v2.1.1"), ("v1.33.2", "v3.7.0", None), {"TargetSupported", "EtcdOneMinor"}),
    (("v1.33.2", "v3.5.1", "v2.1.1"), ("v1.33.2", None, "v2.0.3"), {"ContainerdNoDowngrade"}),
    (("v1.33.2", "v3.5.1", "v2.1.1"), ("v1.33.2", None, "v3.0.0"), {"TargetSupported"}),
    (("v1.35.0", "v3.6.5", "v1.7.20"), ("v1.36.0", None, None), {"ContainerdSupported"}),
    (("v1.35.0", "v3.6.5", "v1.7.20"), ("v1.36.0", None, "v2.0.0"), set()),
]


@pytest.mark.parametrize(("current", "request_", "broken"), CASES)
def test_path_rules(current: tuple[str, str, str], request_: tuple, broken: set[str]) -> None:
    plan = plan_of(SEED, *current)
    target = resolve_target(plan, *request_)
    assert {name for name, _ in path_findings(plan, target)} == broken


def test_every_rule_is_exercised_by_the_table() -> None:
    hit = set().union(*(b for _, _, b in CASES)) | {"EtcdOneMinor", "SplitUnchanged"}  # both tested below
    assert hit == {r.name for r in PATH_RULES}


def test_etcd_minor_skip_is_refused() -> None:
    # 3.4 is outside the table, so a plan running it is built by hand: the rule is general
    plan = plan_of(SEED).model_copy(update={"etcd_version": "v3.4.23"})
    target = resolve_target(plan, "v1.33.2", "v3.6.4")
    found = dict(path_findings(plan, target))
    assert "EtcdOneMinor" in found and "3.4.23 to 3.6.4 skips a minor" in found["EtcdOneMinor"]


@pytest.mark.parametrize(("current", "target"), [(SEED, SPLIT), (SPLIT, SEED)])
def test_split_layout_change_is_refused_both_ways(current, target) -> None:
    cur, new = plan_of(current), plan_of(target)
    t = resolve_target(cur, "v1.33.2", etcd_clusters=tuple(c.name for c in new.etcd_clusters))
    found = dict(path_findings(cur, t))
    assert set(found) == {"SplitUnchanged"}
    assert "never turns a non-split cluster into a split one or back" in found["SplitUnchanged"]


def test_same_layout_passes_the_split_rule() -> None:
    cur = plan_of(SPLIT)
    t = resolve_target(cur, "v1.33.5", etcd_clusters=tuple(c.name for c in plan_of(SPLIT).etcd_clusters))
    assert path_findings(cur, t) == []


def test_etcd_minimum_patch_message_names_the_minimum_and_its_source() -> None:
    plan = plan_of(SEED)
    (name, reason), = path_findings(plan, resolve_target(plan, "v1.34.1"))
    row = ETCD_MIN_PATCH["3.6"]
    assert row.minimum in reason and "upgrade_3_6.md" in reason and "--etcd-version 3.5.32" in reason


def test_skip_minor_message_names_the_next_minor() -> None:
    plan = plan_of(SEED, etcd="v3.5.32")
    found = dict(path_findings(plan, resolve_target(plan, "v1.35.0", "v3.6.5")))
    assert "first to a 1.34 release" in found["KubernetesOneMinor"]


def test_default_etcd_is_the_target_rows_pairing_never_below_the_running_one() -> None:
    plan = plan_of(SEED, etcd="v3.5.1")
    assert str(resolve_target(plan, "v1.34.1").etcd) == KUBERNETES["1.34"].etcd
    newer = plan_of(SEED, etcd="v3.5.30")
    assert str(resolve_target(newer, "v1.33.5").etcd) == "3.5.30"  # the 1.33 row pairs 3.5.21
    assert resolve_target(plan, "v1.33.5").containerd == parse_version(plan.containerd_version)


@pytest.mark.parametrize(("args", "flag"), [
    (("1.34",), "--to"), (("v1.34.1", "three"), "--etcd-version"), (("v1.34.1", None, "2.x"), "--containerd-version"),
])
def test_malformed_request_names_the_flag(args: tuple, flag: str) -> None:
    with pytest.raises(UpgradeRequestError, match=f"^{flag}: malformed version"):
        resolve_target(plan_of(SEED), *args)
