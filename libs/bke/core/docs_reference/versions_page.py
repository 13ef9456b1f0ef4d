"""docs/reference/versions.md: the supported versions, their pairings and the version rules of
upgrades, from the tables the planner, the renderer and the upgrader read (bke.core.versions,
bke.core.render.TEMPLATE_RANGES, bke.core.upgrade.paths, bke.core.upgrade.order, bke.core.upgrade.checks)."""
from __future__ import annotations

from bke.core import versions
from bke.core.render.templates import TEMPLATE_RANGES
from bke.core.upgrade.checks import CHECKS
from bke.core.upgrade.order import ORDER
from bke.core.upgrade.paths import ETCD_MIN_PATCH, MAX_KUBERNETES_MINOR_STEP, PATH_RULES
from .markdown import cell, code, table

__all__ = ["render_versions_page"]

_INTRO = """\
# Versions

Which Kubernetes, etcd and containerd releases BKE installs and upgrades, what each Kubernetes
minor is paired with, and the rules a version change follows. Generated from the tables the
planner, renderer and upgrader read (`python -m bke_cli.docs_reference`); `bke versions` prints
the same table from the `bke` you run (`-o json` for scripts, `--gates` for the flag gates, which
are listed in [Flag rules](flags.md)).

Any patch release of a listed minor is accepted; a spec naming another minor is refused, with the
supported minors in the message.
"""


def _folder(family: str, minor: str) -> str:
    major, mi = (int(p) for p in minor.split("."))
    return next((f"templates/{r.folder}" for r in TEMPLATE_RANGES if r.family == family and r.covers(major, mi)), "")


def _kubernetes() -> str:
    rows = [[code(r.minor), code(r.etcd), code(r.coredns), code(r.pause), code(r.crictl), code(r.cni_plugins),
             code(r.calico), code(_folder("kubernetes", r.minor))] for r in versions.KUBERNETES.values()]
    return ("## Kubernetes\n\nPer minor, the releases it is paired with: etcd, CoreDNS and pause as kubeadm of "
            "that minor ships them, crictl and the CNI plugins as Kubernetes' own build pins them, and the calico "
            "release BKE installs with it (`cni: calico`). The CoreDNS and calico versions can be changed per "
            "cluster with an `addons` entry.\n\n"
            + table(["Kubernetes", "etcd", "CoreDNS", "pause", "crictl", "CNI plugins", "calico", "templates"], rows)
            + "\n")


def _etcd_containerd() -> str:
    etcd = [[code(m), code(_folder("etcd", m))] for m in versions.ETCD_MINORS]
    containerd = [[code(m), code(versions.RUNC.get(m, "-")), code(_folder("containerd", m))]
                  for m in versions.CONTAINERD_MINORS]
    return ("## etcd\n\n" + table(["etcd", "templates"], etcd) + "\n\n"
            "## containerd\n\nWith the runc release each containerd minor pins (the runc shim ships inside "
            "containerd's archive).\n\n" + table(["containerd", "runc", "templates"], containerd) + "\n")


def _pairings() -> str:
    rules = [
        ["etcd", cell("An etcd release other than the Kubernetes minor's pairing (another minor, or an older "
                      "patch) is a warning, not an error: the install goes on.")],
        ["containerd", cell(f"Kubernetes {versions.CONTAINERD_2_REQUIRED_FROM} and newer need containerd 2.0 or "
                            "newer: from that minor the kubelet takes its cgroup driver from the runtime's "
                            "RuntimeConfig call, which containerd 1.x lacks (an error).")],
        ["cgroup v1", cell(f"From Kubernetes {versions.CGROUP_V1_FAILS_FROM} the kubelet refuses a cgroup v1 host "
                           "by default (`failCgroupV1`): the install's node preflight fails on one, and an upgrade "
                           "to such a minor is refused while a host runs cgroup v1 (the `CgroupV2` check), unless "
                           "the kubelet's `extraArgs` set `fail-cgroupv1: \"false\"` (a warning).")],
    ]
    return "## Pairing rules\n\nChecked when a spec is validated (`bke plan`) and again for an upgrade's target.\n\n" \
        + table(["component", "rule"], rules) + "\n"


def _upgrades() -> str:
    paths = [[code(r.name), cell(r.summary)] for r in PATH_RULES]
    minimums = [[code(r.minor), code(r.minimum), cell(r.source)] for r in ETCD_MIN_PATCH.values()]
    others = [[code(name), kind] for name, kind in CHECKS.items() if name not in {r.name for r in PATH_RULES}]
    order = [[code(s.name), cell(s.summary), s.batching, "yes" if s.drain else ""] for s in ORDER]
    return (
        "## Upgrade rules\n\n"
        f"An upgrade moves Kubernetes at most {MAX_KUBERNETES_MINOR_STEP} minor at a time and never "
        "downgrades. These rules are mandatory: `--ignore-check` lifts none of them.\n\n"
        + table(["rule", "what it requires"], paths) + "\n\n"
        "Before an upgrade moves etcd to a new minor, every member must run at least this patch:\n\n"
        + table(["etcd target minor", "minimum running release", "source"], minimums) + "\n\n"
        "Checks on the live cluster: a mandatory one refuses the upgrade, a skippable one refuses it unless "
        "named in `--ignore-check`.\n\n"
        + table(["check", "kind"], others) + "\n\n"
        "### Upgrade order\n\n"
        "The steps run in this order, so that no component ever talks to an older one it must not be newer "
        "than (Kubernetes' version skew policy): etcd before the apiservers, every kube-apiserver before any "
        "controller-manager or scheduler, kubelets after the control plane, masters before workers. A step "
        "whose versions do not change is skipped.\n\n"
        + table(["step", "what", "batches", "drains"], order) + "\n"
    )


def render_versions_page() -> str:
    return "\n".join([_INTRO, _kubernetes(), _etcd_containerd(), _pairings(), _upgrades()])
