"""The flag table per minor: every flag BKE renders exists in the version it renders for; user
extraArgs outside the table are refused at plan time naming the flag, component and version."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bke.core.flagrules import flag_verdict, known_flags
from bke.core.render.gates import VersionSet
from bke.core.render.presets import PRESETS, ClusterFacts, preset_args
from bke.core.versions import ETCD_MINORS, KUBERNETES, parse_version
from bke_cli.main import main as bke

from tests.unit.core.render.test_render_support import golden_spec, plan_of, render, spec_text, versions_for

APISERVER = "cluster.spec.clusterConfig.cluster.apiServer.extraArgs"
_POD_FLAG = re.compile(r'^\s*- "?--([a-z0-9-]+)=', re.M)
_UNIT_FLAG = re.compile(r'^\s+"?--([a-z0-9-]+)=', re.M)
NODES = [("m1", "10.0.0.11", ["master/node", "etcd"]), ("w1", "10.0.0.12", ["node"])]


def _component(path: str) -> str | None:
    name = path.rsplit("/", 1)[-1]
    if path.endswith("kubelet.service"):
        return "kubelet"
    if name.startswith("etcd"):
        return "etcd"
    if name.startswith("kube-") and name.endswith(".yaml") and "/manifests/" in path:
        return name.removesuffix(".yaml")
    return None


@pytest.mark.parametrize("minor", list(KUBERNETES))
def test_every_rendered_flag_is_in_the_table_for_its_minor(minor: str) -> None:
    v = versions_for(minor)
    rendered = render(plan_of(golden_spec(minor)))
    seen: dict[str, set[str]] = {}
    for node in rendered.nodes:
        for f in node.files:
            comp = _component(f.path)
            if comp is None:
                continue
            text = f.content.decode()
            names = set((_UNIT_FLAG if comp == "kubelet" else _POD_FLAG).findall(text))
            assert names, f"no flags parsed from {f.path}"
            seen.setdefault(comp, set()).update(names)
    assert set(seen) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"}
    versions = {"etcd": parse_version(v["etcd"])}
    for comp, names in seen.items():
        at = versions.get(comp, parse_version(v["kubernetes"]))
        missing = names - known_flags(comp, at)
        assert not missing, f"{comp} {at}: rendered flags not in the table: {sorted(missing)}"


@pytest.mark.parametrize("minor", list(KUBERNETES))
@pytest.mark.parametrize("etcd", [f"{m}.0" for m in ETCD_MINORS] + ["3.5.21", "3.6.6"])
def test_every_preset_of_every_tier_is_in_the_table(minor: str, etcd: str) -> None:
    vs = VersionSet(parse_version(f"{minor}.0"), parse_version(etcd), parse_version("2.1.1"))
    for comp in {p.component for p in PRESETS}:
        args = preset_args(comp, ClusterFacts(nodes=5000, apiservers=3), vs)
        at = vs.of("etcd" if comp == "etcd" else comp)
        assert set(args) <= known_flags(comp, at), (comp, at, sorted(set(args) - known_flags(comp, at)))


def test_verdicts_name_the_version_and_the_change() -> None:
    v = parse_version
    assert flag_verdict("kube-apiserver", "insecure-port", v("1.33.0")).message == "not a kube-apiserver flag in 1.33 (removed in 1.24); use --secure-port"
    assert flag_verdict("kube-apiserver", "cloud-provider", v("1.32.4")).deprecated
    assert "removed in 1.33" in flag_verdict("kube-apiserver", "cloud-provider", v("1.33.0")).message
    assert flag_verdict("kubelet", "pod-infra-container-image", v("1.34.2")).ok
    assert "removed in 1.35" in flag_verdict("kubelet", "pod-infra-container-image", v("1.35.0")).message
    assert flag_verdict("etcd", "listen-client-http-urls", v("3.5.7")).message == "not an etcd flag in 3.5.7 (added in 3.5.8)"
    assert flag_verdict("etcd", "enable-v2", v("3.6.0")).message == "not an etcd flag in 3.6.0 (removed in 3.6.0)"
    assert flag_verdict("etcd", "experimental-watch-progress-notify-interval", v("3.6.1")).deprecated
    assert flag_verdict("kube-scheduler", "no-such-flag", v("1.31.0")).message == "not a kube-scheduler flag in 1.31"


def test_bke_plan_refuses_a_removed_flag_naming_flag_component_and_minor(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(NODES, endpoint=None, cluster={"apiServer": {"extraArgs": {"insecure-port": "0"}}}))
    assert bke(["plan", str(spec)]) == 2
    assert f"ERROR {APISERVER}.insecure-port: not a kube-apiserver flag in 1.33 (removed in 1.24)" in capsys.readouterr().err


def test_a_flag_removed_at_the_target_minor_is_refused_and_accepted_before(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    kubelet = {"kubelet": {"extraArgs": {"pod-infra-container-image": "registry.k8s.io/pause:3.10"}}}
    spec.write_text(spec_text(NODES, kubernetes="v1.35.0", etcd="v3.6.5", endpoint=None, cluster=kubelet))
    assert bke(["plan", str(spec)]) == 2
    assert "kubelet.extraArgs.pod-infra-container-image: not a kubelet flag in 1.35 (removed in 1.35)" in capsys.readouterr().err
    spec.write_text(spec_text(NODES, kubernetes="v1.34.1", etcd="v3.6.4", endpoint=None, cluster=kubelet))
    assert bke(["plan", str(spec)]) == 0
    assert "pod-infra-container-image is deprecated in kubelet 1.34" in capsys.readouterr().err


def test_an_unknown_flag_is_refused_unless_allowed(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    args = {"apiServer": {"extraArgs": {"my-vendor-flag": "1"}}}
    spec.write_text(spec_text(NODES, endpoint=None, cluster=args))
    assert bke(["plan", str(spec)]) == 2
    assert f"ERROR {APISERVER}.my-vendor-flag: not a kube-apiserver flag in 1.33; list 'my-vendor-flag' in allowUnsafeFlags" in capsys.readouterr().err
    spec.write_text(spec_text(NODES, endpoint=None, cluster={**args, "allowUnsafeFlags": ["kube-apiserver/my-vendor-flag"]}))
    assert bke(["plan", str(spec)]) == 0
    assert "allowed by allowUnsafeFlags although not a kube-apiserver flag in 1.33" in capsys.readouterr().err


def test_the_renderer_refuses_a_built_in_flag_the_table_does_not_accept(monkeypatch) -> None:
    from bke.core.render import components
    from bke.core.render.errors import InvalidOutputError

    original = components.scheduler_defaults
    monkeypatch.setattr(components, "scheduler_defaults", lambda ctx: {**original(ctx), "address": "127.0.0.1"})
    with pytest.raises(InvalidOutputError) as exc:
        render(plan_of(spec_text(NODES, endpoint=None)))
    assert "rendered --flag: not a kube-scheduler flag in 1.33 (removed in 1.24)" in str(exc.value)
