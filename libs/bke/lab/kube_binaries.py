"""The real Kubernetes, etcd and kwok binaries a lab runs, built on demand with Go and cached
outside the repository, keyed by release.

What is built is data: one row per release, each built from a small wrapper module of ours in
`tools/gobuild/<name>-v<version>/` (its go.mod pins the release; go.sum its checksums). Why
wrappers: `k8s.io/kubernetes` requires its staging modules at v0.0.0 and etcd's modules replace
each other by local paths, so `go install module@version` is refused for both; a module of our own
that requires the release (with a `replace` per staging module for Kubernetes) builds them.

    python3 dev.py kube                    # build what is missing, then list the cache
    python -m bke.lab.kube_binaries list   # what is cached, nothing built

The cache (BKE_KUBE_CACHE, default ~/.cache/bke/kube) holds `<name>-v<version>/<binary>` and a
`verified.json` per release, written only after every binary of the release answered `--version`
with that release. A binary that says anything else is removed, never cached.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BUILDS",
    "Build",
    "BuildError",
    "CACHE_ENV",
    "KWOK_VERSION",
    "build_missing",
    "cache_dir",
    "cached",
    "find_build",
    "locate",
    "missing_for",
]

CACHE_ENV = "BKE_KUBE_CACHE"
KWOK_VERSION = "0.8.0"  # the one kwok release built (simulates every Kubernetes minor)
REPO = Path(__file__).resolve().parents[3]
WRAPPERS = REPO / "tools" / "gobuild"
VERIFIED = "verified.json"


class BuildError(RuntimeError):
    """A binary could not be built, or does not report the release it was built as."""


@dataclass(frozen=True)
class Build:
    name: str  # "kubernetes" | "etcd" | "kwok": also the wrapper folder's prefix
    version: str  # without the "v"
    packages: tuple[tuple[str, str], ...]  # (binary, Go package path)
    # -X package.var=value pairs (Kubernetes stamps its release this way; see version_ldflags)
    stamps: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.name}-v{self.version}"

    @property
    def wrapper(self) -> Path:
        return WRAPPERS / self.key

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(b for b, _ in self.packages)

    def ldflags(self) -> str:
        # -s -w: no symbol table or DWARF (a third of the size); nothing here is debugged.
        return " ".join(["-s", "-w", *(f"-X {k}={v}" for k, v in self.stamps)])


def kubernetes_stamps(version: str, build_date: str) -> tuple[tuple[str, str], ...]:
    """What upstream's hack/lib/version.sh passes with -X, so that `--version`, `/version` and
    the `kubernetes_build_info` metric report the release (a plain build says v0.0.0-master).
    gitCommit stays empty: the module proxy serves the release's source, not its commit."""
    major, minor, _ = version.split(".")
    out = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        out += [(f"{pkg}.gitVersion", f"v{version}"), (f"{pkg}.gitMajor", major), (f"{pkg}.gitMinor", minor),
                (f"{pkg}.gitTreeState", "clean"), (f"{pkg}.buildDate", build_date)]
    return tuple(out)


def _kubernetes(version: str, build_date: str) -> Build:
    # kubelet: never run here (kwok stands in), built for its flags (bke.core.flagrules.value_types)
    return Build("kubernetes", version, tuple((c, f"k8s.io/kubernetes/cmd/{c}") for c in
                                              ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl",
                                               "kubelet")),
                 kubernetes_stamps(version, build_date))


def _etcd(version: str) -> Build:
    return Build("etcd", version, (("etcd", "go.etcd.io/etcd/server/v3"), ("etcdctl", "go.etcd.io/etcd/etcdctl/v3"),
                                   ("etcdutl", "go.etcd.io/etcd/etcdutl/v3")))


# Two adjacent Kubernetes minors (the newest patches the module proxy serves), the etcd release
# kubeadm pairs with them, one 3.5 release new enough to upgrade to 3.6 from (etcd's 3.6 upgrade
# guide asks for the newest 3.5 patch first), and kwok. buildDate: the release tag's time as the
# module proxy reports it (`/@v/<version>.info`), so a rebuild stamps the same date.
# Built in this order: what a lab of the older minor needs comes first.
BUILDS: tuple[Build, ...] = (
    _kubernetes("1.36.3", "2026-07-22T18:07:38Z"),
    _etcd("3.6.6"),
    Build("kwok", KWOK_VERSION, (("kwok", "sigs.k8s.io/kwok/cmd/kwok"),)),
    _kubernetes("1.37.2", "2026-10-27T12:01:04Z"),
    _etcd("3.5.36"),
)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "bke" / "kube")


def find_build(name: str, version: str) -> Build | None:
    v = version.lstrip("v")
    return next((b for b in BUILDS if b.name == name and b.version == v), None)


def cached(build: Build, root: Path | None = None) -> bool:
    """True when every binary of the release is in the cache and was verified."""
    d = (root or cache_dir()) / build.key
    return (d / VERIFIED).is_file() and all((d / b).is_file() for b in build.binaries)


def locate(binary: str, version: str, root: Path | None = None) -> Path | None:
    """The cached, verified `binary` of `version` (e.g. ("kube-apiserver", "v1.36.3")), or None."""
    v = version.lstrip("v")
    for b in BUILDS:
        if b.version == v and binary in b.binaries and cached(b, root):
            return (root or cache_dir()) / b.key / binary
    return None


def missing_for(needs: list[tuple[str, str]], root: Path | None = None) -> list[str]:
    """Which of `needs` ((binary, version) pairs) the cache cannot run, each said with the reason."""
    out = []
    for binary, version in needs:
        if locate(binary, version, root) is not None:
            continue
        known = any(b.version == version.lstrip("v") and binary in b.binaries for b in BUILDS)
        if known:
            out.append(f"{binary} {version} is not built yet: run `python3 dev.py kube`")
        else:
            rows = ", ".join(f"v{b.version}" for b in BUILDS if binary in b.binaries)
            out.append(f"{binary} {version} is not a release the lab builds (it builds {rows}: bke.lab.kube_binaries.BUILDS)")
    return out


_VERSION_ARGS = {"kwok": ["--version"], "etcd": ["--version"], "etcdctl": ["version"], "etcdutl": ["version"],
                 "kubectl": ["version", "--client"]}


def reported_version(binary: Path, name: str = "") -> str:
    """What the binary (called `name`, default its file name) says its version is."""
    args = _VERSION_ARGS.get(name or binary.name, ["--version"])
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)
    return (proc.stdout + proc.stderr).strip()


def _says(output: str, version: str) -> bool:
    return re.search(rf"(?<![\d.])v?{re.escape(version)}(?![\d])", output) is not None


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None)
    if go is None:
        raise BuildError("no Go toolchain on PATH: install Go 1.26 (its go.mod files need it) to build the lab's "
                         "Kubernetes binaries; the default lab needs none of them")
    return go


def build_one(build: Build, binary: str, package: str, out: Path, go: str) -> str:
    """Build `binary` into `out` (through a .part file, never a half binary); what it says its
    version is, checked against the release."""
    tmp = out.with_name(out.name + ".part")
    cmd = [go, "build", "-trimpath", "-ldflags", build.ldflags(), "-o", str(tmp), package]
    proc = subprocess.run(cmd, cwd=build.wrapper, capture_output=True, text=True,
                          env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly -buildvcs=false"})
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"go build {package} ({build.key}) failed:\n{proc.stderr[-3000:]}")
    said = reported_version(tmp, binary)
    if not _says(said, build.version):
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{binary} built from {build.key} reports {said[:200]!r}, not {build.version}")
    tmp.replace(out)
    return said


def build_missing(progress: Callable[[str], None] = print, root: Path | None = None,
                  only: tuple[str, ...] = ()) -> list[str]:
    """Build every release of BUILDS (or of `only`: keys such as "kubernetes-v1.36.3") that is not
    cached; returns the keys built. Idempotent: a cached release costs a stat per binary."""
    root = root or cache_dir()
    built = []
    todo = [b for b in BUILDS if not only or b.key in only]
    for i, build in enumerate(todo, 1):
        if cached(build, root):
            progress(f"[{i}/{len(todo)}] {build.key}: cached")
            continue
        go = _go()
        d = root / build.key
        d.mkdir(parents=True, exist_ok=True)
        versions = {}
        for binary, package in build.packages:
            out = d / binary
            said = reported_version(out, binary) if out.is_file() else ""
            if _says(said, build.version):  # built by an earlier run cut short before verified.json
                versions[binary] = said.splitlines()[0]
                continue
            started = time.monotonic()
            progress(f"[{i}/{len(todo)}] {build.key}: go build {binary} ...")
            versions[binary] = build_one(build, binary, package, out, go).splitlines()[0]
            progress(f"[{i}/{len(todo)}] {build.key}: {binary} built in {time.monotonic() - started:.0f}s "
                     f"({out.stat().st_size / 2**20:.0f} MiB): {versions[binary]}")
        (d / VERIFIED).write_text(json.dumps({"release": build.version, "versions": versions}, indent=1))
        built.append(build.key)
    return built


def _main(argv: list[str]) -> int:
    cmd = argv[0] if argv else "build"
    if cmd not in {"build", "list"}:
        print("usage: python -m bke.lab.kube_binaries [build [KEY...] | list]", file=sys.stderr)
        return 2
    if cmd == "build":
        started = time.monotonic()
        try:
            built = build_missing(only=tuple(argv[1:]))
        except BuildError as exc:
            print(f"ERROR {exc}", file=sys.stderr)
            return 1
        if built:
            print(f"built {', '.join(built)} in {time.monotonic() - started:.0f}s")
    root = cache_dir()
    for b in BUILDS:
        state = "verified" if cached(b, root) else "missing"
        size = sum(p.stat().st_size for p in (root / b.key).glob("*") if p.is_file()) if cached(b, root) else 0
        print(f"{b.key:24} {state:9} {size / 2**20:6.0f} MiB  {root / b.key}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
