"""One bundle, start to end: the httpRepo files, the image list, the agent's wheelhouse, and
`bundle.json` last (its presence says the build finished).

The cluster comes from a spec, or from versions alone (`spec_for_versions`: a stand-in spec of
three masters behind a VIP and a worker, so that every image the renderer can write - haproxy
and keepalived included - is listed; the files do not depend on node count).
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bke.core.artefacts import ARCHES, file_sha256
from bke.core.plan import Plan
from bke.core.pythons import AGENT_PYTHONS, STANDALONE
from bke.core.render import RenderInputs, render_cluster
from bke.core.versions import KUBERNETES, RUNC, parse_version
from .build import BundleFile, bundle_artefacts, downloads, ensure_files, write_atomic
from .fetch import Fetcher
from .images import Image, calico_images, rendered_images, resolve_digests
from .upstreams import UPSTREAMS, Upstream
from .wheelhouse import ensure_wheelhouse

__all__ = ["BundleOptions", "INDEX", "build_bundle", "spec_for_versions"]

INDEX = "bundle.json"
Say = Callable[[str, str], None]


@dataclass(frozen=True)
class BundleOptions:
    arches: tuple[str, ...] = ARCHES
    upstreams: Mapping[str, Upstream] = field(default_factory=lambda: dict(UPSTREAMS))
    pins: Mapping[str, str] = field(default_factory=dict)  # file name or tree path -> sha256
    registries: Mapping[str, str] = field(default_factory=dict)  # registry host -> API base URL
    resolve_images: bool = True  # False: the list without digests (no registry reachable)
    agent: bool = True  # the wheelhouse and the BKE wheel
    wheel: Path | None = None  # the BKE wheel to ship (the CLI builds one from the checkout)
    requirements: Path | None = None  # requirements-agent.txt
    pip_args: tuple[str, ...] = ()
    pythons: tuple[tuple[int, int], ...] = AGENT_PYTHONS


def spec_for_versions(kubernetes: str, etcd: str, containerd: str, image_repo: str = "registry.k8s.io",
                      cni: str = "calico", name: str = "bundle") -> str:
    def node(i: int, role: str) -> str:
        host = f"master{i}" if "master" in role else "node1"
        return (f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: {name}-{host}}}\n"
                f"spec: {{hostname: {host}, ip: 10.0.0.{i}, role: [{role}]}}\n")
    head = (f"apiVersion: bke.bocloud.com/v1beta1\nkind: BKECluster\nmetadata: {{name: {name}}}\nspec:\n"
            f"  controlPlaneEndpoint: {{host: 10.0.0.100, port: 36443}}\n  clusterConfig:\n    cluster:\n"
            f"      kubernetesVersion: {kubernetes}\n      etcdVersion: {etcd}\n      containerdVersion: {containerd}\n"
            f"      imageRepo: {image_repo}\n      cni: {cni}\n")
    return head + "".join(node(i, "master/node, etcd") for i in (1, 2, 3)) + node(4, "node")


def _versions(plan: Plan) -> dict[str, str]:
    c = plan.spec.config
    k8s, ctd = parse_version(c.kubernetes_version), parse_version(c.containerd_version)
    row = KUBERNETES[k8s.minor_key]
    return {"kubernetes": str(k8s), "etcd": str(parse_version(c.etcd_version)), "containerd": str(ctd),
            "runc": RUNC[ctd.minor_key], "crictl": row.crictl, "cniPlugins": row.cni_plugins,
            **({"calico": row.calico} if c.cni == "calico" else {}), "coredns": row.coredns, "pause": row.pause,
            "python": STANDALONE.version}


def _previous(index: Path) -> dict[str, str]:
    """How the last finished build verified each file (kept files keep it)."""
    try:
        files = json.loads(index.read_text()).get("files", [])
        return {str(f["path"]): str(f["verified"]) for f in files}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return {}


def _table_pins(plan: Plan) -> dict[str, str]:
    """Digests the versions table vouches for (calico.yaml, whose upstream publishes no checksum),
    when the table carries one (`KubernetesRow.calico_sha256`); a user's --pin wins."""
    row = KUBERNETES[parse_version(plan.spec.config.kubernetes_version).minor_key]
    digest = row.calico_sha256
    return {"calico.yaml": digest} if digest and plan.spec.config.cni == "calico" else {}


def _images(plan: Plan, out: Path, files: list[BundleFile]) -> list[Image]:
    rendered = render_cluster(plan, RenderInputs(vrrp_password="bundle00" if plan.load_balancer else None))
    texts = [f.content.decode(errors="replace") for n in rendered.nodes for f in n.files if not f.secret]
    texts += [f.content.decode(errors="replace") for f in rendered.addons]
    images = rendered_images(texts, plan.spec.config.image_repo)
    for f in files:
        if f.path.endswith("/calico.yaml"):
            images += calico_images((out / f.path).read_text(), plan.spec.config.image_repo)
    return sorted({i.ref: i for i in images}.values(), key=lambda i: i.ref)


def _place_agent(out: Path, opts: BundleOptions, say: Say) -> tuple[list[BundleFile], str]:
    assert opts.wheel is not None and opts.requirements is not None
    version = opts.wheel.name.split("-")[1]
    base = out / "agent" / version
    base.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(opts.wheel, base / opts.wheel.name)
    shutil.copyfile(opts.requirements, base / "requirements.txt")
    wheels = ensure_wheelhouse(opts.requirements, base / "wheels", opts.arches, pythons=opts.pythons,
                               pip_args=opts.pip_args)
    placed = [base / opts.wheel.name, base / "requirements.txt", *wheels, base / "wheels" / "index.html"]
    files = []
    for p in placed:
        digest = file_sha256(p)
        write_atomic(p.with_name(p.name + ".sha256"), f"{digest}\n".encode())
        rel = str(p.relative_to(out))
        files.append(BundleFile(rel, digest, p.stat().st_size, "pip" if p.parent.name == "wheels" else "local",
                                "built here"))
    say(f"agent/{version}/wheels/", f"{len(wheels)} wheels for Python "
        + ", ".join(f"{a}.{b}" for a, b in opts.pythons) + " on " + ", ".join(opts.arches))
    return files, f"agent/{version}"


def build_bundle(plan: Plan, out: Path, opts: BundleOptions, fetcher: Fetcher, now: datetime,
                 say: Say | None = None) -> dict[str, object]:
    """Build (or complete) the bundle in `out`; returns the index written to bundle.json."""
    say = say or (lambda path, what: None)
    out.mkdir(parents=True, exist_ok=True)
    previous = _previous(out / INDEX)
    (out / INDEX).unlink(missing_ok=True)  # an index is the mark of a finished build
    arts = bundle_artefacts(plan.spec.config, opts.arches)
    files = ensure_files(out, downloads(arts, opts.upstreams), fetcher, {**_table_pins(plan), **opts.pins}, say,
                         previous)
    images = _images(plan, out, files)
    if opts.resolve_images:
        images = resolve_digests(images, opts.registries)
    write_atomic(out / "images.json", (json.dumps([i.as_dict() for i in images], indent=2) + "\n").encode())
    write_atomic(out / "images.txt", "".join(
        f"{i.ref}\t{i.source}\t{i.digest or '-'}\n" for i in images).encode())
    say("images.txt", f"{len(images)} images" + ("" if opts.resolve_images else " (digests not resolved)"))
    agent_dir = None
    if opts.agent:
        agent_files, agent_dir = _place_agent(out, opts, say)
        files += agent_files
    index: dict[str, object] = {
        "bundleVersion": 1,
        "createdAt": now.isoformat(),
        "cluster": plan.cluster,
        "versions": _versions(plan),
        "arches": list(opts.arches),
        "files": [f.__dict__ for f in sorted(files, key=lambda f: f.path)],
        "images": "images.json",
        "agent": None if agent_dir is None else {
            "dir": agent_dir, "pythons": [f"{a}.{b}" for a, b in opts.pythons]},
    }
    write_atomic(out / INDEX, (json.dumps(index, indent=2) + "\n").encode())
    return index
