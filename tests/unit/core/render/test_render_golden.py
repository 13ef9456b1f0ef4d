"""Golden files: one split-etcd node set per supported Kubernetes minor, every template covered
(etcd 3.5 and 3.6 through the upstream pairing, containerd 1.7 and 2.x, the VIP load balancer,
registry hosts files, standalone and registered kubelets, the addons).

Regenerate after an intended change:  BKE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/core/render/test_render_golden.py
then read the diff of tests/golden/render/ before committing it.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from bke.core.render import FILES, RenderedFile
from bke.core.versions import KUBERNETES

from tests.unit.core.render.test_render_support import golden_spec, plan_of, render

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "render"
UPDATE = os.environ.get("BKE_UPDATE_GOLDEN") == "1"
HOSTS = ("m1", "e1", "ev1", "w1")  # p1 is ev1's twin with other ports; m2 is m1's


def _expected_files(minor: str) -> dict[Path, RenderedFile]:
    """Every file of m1; of the other hosts only files whose bytes differ from an earlier host's
    file at the same path (containerd and registry files are the same everywhere)."""
    rendered = render(plan_of(golden_spec(minor)))
    out = {}
    seen: set[tuple[str, bytes]] = set()
    for host in HOSTS:
        for f in rendered.node(host).files:
            if (f.path, f.content) in seen:
                continue
            seen.add((f.path, f.content))
            out[GOLDEN / minor / host / PurePosixPath(f.path).relative_to("/")] = f
    for f in rendered.addons:
        out[GOLDEN / minor / "addons" / f.path] = f
    return out


@pytest.mark.parametrize("minor", list(KUBERNETES))
def test_rendered_files_match_golden(minor: str) -> None:
    expected = _expected_files(minor)
    if UPDATE:
        for old in (GOLDEN / minor).rglob("*") if (GOLDEN / minor).exists() else ():
            if old.is_file() and old not in expected:
                old.unlink()
        for path, f in expected.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f.content)
    on_disk = {p for p in (GOLDEN / minor).rglob("*") if p.is_file()}
    assert on_disk == set(expected), "golden set differs (BKE_UPDATE_GOLDEN=1 to regenerate)"
    for path, f in sorted(expected.items()):
        assert path.read_bytes() == f.content, f"{path.relative_to(GOLDEN)} differs (BKE_UPDATE_GOLDEN=1 to regenerate)"


def test_golden_set_covers_every_template() -> None:
    used = set()
    for minor in KUBERNETES:
        rendered = render(plan_of(golden_spec(minor)))
        for host in HOSTS:
            paths = {f.path for f in rendered.node(host).files}
            used |= {(r.template, rendered.template_sets) for r in FILES if any(p.endswith(_suffix(r.template)) for p in paths)}
    templates = {t for t, _ in used}
    assert templates == {r.template for r in FILES}
    folders = {s for _, sets in used for s in sets}
    assert {"etcd/3.5", "etcd/3.6", "containerd/1.7", "containerd/2.0", "kubernetes/1.31"} <= folders


def _suffix(template: str) -> str:
    name = template.split("/")[-1].removesuffix(".j2")
    return {"kubelet-config.yaml": "kubelet/config.yaml", "etcd.yaml": ".yaml", "modules-load.conf": "modules-load.d/bke.conf",
            "sysctl.conf": "sysctl.d/99-bke.conf"}.get(name, name)
