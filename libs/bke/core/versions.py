"""Supported versions, as data shared by the planner and the renderer.

One row per minor release; any patch of a listed minor is accepted. The renderer's
template sets and flag gates key off these minors, so a version that is not in this
table can never reach a template.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CONTAINERD_MINORS",
    "ETCD_MINORS",
    "KUBERNETES",
    "KubernetesRow",
    "RUNC",
    "Version",
    "VersionError",
    "parse_version",
    "spelled_like",
    "supported_summary",
    "check_pairing",
]

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+]([0-9A-Za-z.-]+))?$")


class VersionError(ValueError):
    """A version string that is malformed or not in the supported table."""


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int
    suffix: str = ""

    @property
    def minor_key(self) -> str:
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:  # canonical form, without the leading "v"
        return f"{self.major}.{self.minor}.{self.patch}" + (f"-{self.suffix}" if self.suffix else "")

    def at_least(self, other: str) -> bool:
        o = parse_version(other)
        return (self.major, self.minor, self.patch) >= (o.major, o.minor, o.patch)


def spelled_like(written: str, version: object) -> str:
    """`version` written the way `written` is ("v1.36.3" or "1.36.3"): a spec accepts both, and a
    version BKE writes back into a user's spec keeps the user's spelling."""
    return f"v{version}" if written.startswith("v") else str(version)


def parse_version(text: str) -> Version:
    m = _VERSION_RE.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise VersionError(f"malformed version {text!r}: expected MAJOR.MINOR.PATCH, e.g. v1.33.2")
    return Version(int(m[1]), int(m[2]), int(m[3]), m[4] or "")


@dataclass(frozen=True)
class KubernetesRow:
    minor: str
    etcd: str  # the etcd release kubeadm of this minor ships (upstream pairing)
    coredns: str
    pause: str
    # Node tools paired per minor as Kubernetes' build/dependencies.yaml pairs them
    # ("crictl" and "cni" entries), and the calico release BKE installs with this minor.
    crictl: str = ""
    cni_plugins: str = ""
    calico: str = ""
    # sha256 of upstream's calico.yaml for that release, when known: checked on top of the
    # httpRepo's `.sha256`. Empty: upstream publishes none for the bare manifest and none could be
    # taken offline here, so the httpRepo's `.sha256` (written by `bke bundle build`) is the check.
    calico_sha256: str = ""


# Upstream pairings from kubeadm's constants (cmd/kubeadm/app/constants) for each minor.
# crictl and cni_plugins: the "crictl" and "cni" entries of kubernetes/kubernetes
# build/dependencies.yaml as each minor's development cycle set them, read from the release
# notes of that minor (CHANGELOG/CHANGELOG-1.N.md, "Updated cri-tools to ..." / "Updated CNI
# plugins to ..." with the PR that changed dependencies.yaml). Kubernetes 1.N pins cri-tools
# 1.(N-1).0: cri-tools 1.N is released with Kubernetes 1.N, after its code freeze. Checked on paper
# only, and not against the release branches' heads (the repository is too large to fetch
# here): a bump cherry-picked to a release branch after .0 is not reflected.
# calico: a release whose "Kubernetes requirements" (docs.tigera.io/calico/<minor>/getting-started/
# kubernetes/requirements) list the minor as tested: 3.29 on 1.29-1.32 (as quoted in
# projectcalico discussion #11717), 3.31 on 1.32-1.35, 3.32 on 1.34-1.36, 3.33 on 1.35-1.37 (read
# from those pages' versions by a third party; not re-read here, offline). The newest line
# that covers the minor wins; patch releases: 3.31.3 is on calico's component-versions page,
# 3.29.4, 3.32.0 and 3.33.0 are the best known here and are re-checked by `bke bundle build`.
KUBERNETES: dict[str, KubernetesRow] = {
    r.minor: r
    for r in (
        # crictl 1.30.0 (#124364), cni 1.5.0 (#125113), both in the v1.31.0 notes
        KubernetesRow("1.31", etcd="3.5.15", coredns="1.11.3", pause="3.10",
                      crictl="1.30.0", cni_plugins="1.5.0", calico="3.29.4"),
        # crictl 1.31.0 (#126590), cni 1.5.1 (#126966), v1.32.0 notes
        KubernetesRow("1.32", etcd="3.5.16", coredns="1.11.3", pause="3.10",
                      crictl="1.31.0", cni_plugins="1.5.1", calico="3.31.3"),
        # crictl 1.32.0 (#129116), cni 1.6.2 (#129776), v1.33.0 notes
        KubernetesRow("1.33", etcd="3.5.21", coredns="1.12.0", pause="3.10",
                      crictl="1.32.0", cni_plugins="1.6.2", calico="3.31.3"),
        # crictl 1.33.0 (#131406), cni 1.7.1 (#131602), v1.34.0 notes
        KubernetesRow("1.34", etcd="3.6.4", coredns="1.12.1", pause="3.10.1",
                      crictl="1.33.0", cni_plugins="1.7.1", calico="3.31.3"),
        # crictl 1.34.0 (#133636), cni 1.8.0 (#133837), v1.35.0 notes
        KubernetesRow("1.35", etcd="3.6.5", coredns="1.13.1", pause="3.10.1",
                      crictl="1.34.0", cni_plugins="1.8.0", calico="3.31.3"),
        # crictl 1.35.0 (#135694, v1.36.0-alpha.1 notes); no CNI bump found since 1.8.0
        KubernetesRow("1.36", etcd="3.6.6", coredns="1.13.1", pause="3.10.1",
                      crictl="1.35.0", cni_plugins="1.8.0", calico="3.32.0"),
        # crictl 1.36.0 (#138613, v1.37 alpha notes); no CNI bump found since 1.8.0
        KubernetesRow("1.37", etcd="3.6.6", coredns="1.13.1", pause="3.10.1",
                      crictl="1.36.0", cni_plugins="1.8.0", calico="3.33.0"),
    )
}
ETCD_MINORS: tuple[str, ...] = ("3.5", "3.6")
CONTAINERD_MINORS: tuple[str, ...] = ("1.7", "2.0", "2.1", "2.2")
# The runc release each containerd minor's releases pin: containerd/containerd
# script/setup/runc-version at the head of each release branch (release/1.7 = v1.7.34,
# release/2.0 = v2.0.11, release/2.1 = v2.1.9, release/2.2 = v2.2.7: all v1.3.6; the .0
# releases pinned 1.1.4, 1.2.1, 1.3.0 and 1.3.3, and every branch moved to the newest runc
# for its security fixes). The runc shim (containerd-shim-runc-v2) ships inside containerd's tarball.
RUNC: dict[str, str] = {"1.7": "1.3.6", "2.0": "1.3.6", "2.1": "1.3.6", "2.2": "1.3.6"}

# What upstream changed at a Kubernetes minor that constrains the hosts (first minor it applies to).
# - cgroup v1: from 1.35 the kubelet's failCgroupV1 defaults to true, so it refuses to start on a
#   cgroup v1 host unless told otherwise (--fail-cgroupv1=false, or failCgroupV1: false in its
#   config). Sources: KEP-5573 (kubernetes/enhancements keps/sig-node/5573-remove-cgroup-v1),
#   kubernetes PR 134298 "[KEP-5573] Set failCgroupV1 to true" (release note: "failCgroupV1 will
#   be set to true from 1.35"); the flag itself came with KEP-4569 in 1.31 (kubernetes PR 126031).
# - containerd 1.x: the kubelet learns its cgroup driver from the runtime's RuntimeConfig CRI call
#   (KEP-4033, GA in 1.34), which containerd has from 2.0.0 only (the 1.7 backport, containerd PR
#   11346, was closed unmerged); the kubelet's fallback to its own cgroupDriver setting ends
#   after 1.35 (website feature-gates/KubeletCgroupDriverFromCRI.md: "kubelet will stop falling
#   back to this configuration in Kubernetes 1.36"; kubernetes PR 136731 removes the fallback),
#   which makes 1.35 the last minor that runs on containerd 1.x (SIG Node, v1.35 release notes).
CGROUP_V1_FAILS_FROM = "1.35"
CONTAINERD_2_REQUIRED_FROM = "1.36"


def _minor_tuple(minor: str) -> tuple[int, int]:
    major, _, rest = minor.partition(".")
    return int(major), int(rest)


def cgroup_v1_refused(kubernetes: Version) -> bool:
    """True when this kubelet refuses a cgroup v1 host by default (failCgroupV1 defaults to true)."""
    return (kubernetes.major, kubernetes.minor) >= _minor_tuple(CGROUP_V1_FAILS_FROM)


def host_rule_errors(kubernetes: Version, containerd: Version) -> list[str]:
    """Pairings upstream refuses (each message names both versions and the rule)."""
    if (kubernetes.major, kubernetes.minor) >= _minor_tuple(CONTAINERD_2_REQUIRED_FROM) and containerd.major < 2:
        return [
            f"Kubernetes {kubernetes.minor_key} needs containerd 2.0 or newer, not {containerd}: from "
            f"{CONTAINERD_2_REQUIRED_FROM} the kubelet takes its cgroup driver from the runtime's RuntimeConfig "
            "call, which containerd 1.x lacks (1.35 is the last minor that runs on containerd 1.x)"
        ]
    return []


__all__ += ["CGROUP_V1_FAILS_FROM", "CONTAINERD_2_REQUIRED_FROM", "cgroup_v1_refused", "host_rule_errors"]

_TABLES = {"kubernetes": tuple(KUBERNETES), "etcd": ETCD_MINORS, "containerd": CONTAINERD_MINORS}


def supported_summary(component: str) -> str:
    return ", ".join(_TABLES[component])


def check_supported(component: str, text: str) -> Version:
    """Parse and check one version against the table; the error lists what is supported."""
    v = parse_version(text)
    if v.minor_key not in _TABLES[component]:
        raise VersionError(
            f"unsupported {component} version {text!r}: supported minors are "
            f"{supported_summary(component)} (any patch release)"
        )
    return v


def check_pairing(kubernetes: Version, etcd: Version) -> str | None:
    """A warning (not an error) when etcd is not the release upstream pairs with this Kubernetes."""
    row = KUBERNETES.get(kubernetes.minor_key)
    if row is None:
        return None
    want = parse_version(row.etcd)
    if etcd.minor_key != want.minor_key or etcd.patch < want.patch:
        return (
            f"etcd {etcd} is not the release Kubernetes {kubernetes.minor_key} is tested with "
            f"(upstream pairs it with etcd {row.etcd}); installing anyway"
        )
    return None


__all__.append("check_supported")
