"""Where a lab node keeps what a real node's systemd and kubelet would keep, and the control
files tests use to break things on purpose. Everything is under the node's root:

    <root>/etc/kubernetes/manifests/          static pods, watched by the kubelet stand-in
    <root>/var/lib/bke-lab/pods/<pod>.json    pod status: phase, mode (real|simulated), reason,
                                              pid, ready, health URLs, restarts
    <root>/var/lib/bke-lab/systemd/<unit>.json  simulated unit state: enabled, active
    <root>/var/lib/bke-lab/unhealthy/<pod>    control: while it exists, the simulated pod's
                                              (or, for `kubelet`, the kubelet's own /healthz)
                                              health endpoints answer 500
    <root>/var/lib/bke-lab/faults.json        control: {"unhealthy": [{"component": "kube-apiserver",
                                              "version": "v1.36.2"}]}: a simulated pod of that
                                              component whose image tag is that version answers
                                              500 on its health endpoints (read when the pod
                                              starts; `write_fault` adds an entry). An upgrade
                                              test breaks ONE version so the rollback to the
                                              previous one comes back healthy.
                                              {"refuses": [{"component": ..., "version": ...,
                                              "arg": "--storage-backend=etcd2"}]}: a REAL pod
                                              of that component and version is started with
                                              `arg` appended (default: an unknown flag), so the
                                              binary refuses to start and exits, as one given a
                                              bad flag value does (`write_refusal`)
    <root>/var/lib/bke-lab/fail-step/<id>     control: while it exists, the step with this id
                                              fails with the file's text as stderr (use
                                              `fail_step_file`: ids hold ':' and '/')
    <root>/var/lib/bke-lab/programs.jsonl     RunProgram steps simulated (program not in the tree)
    <root>/var/lib/bke-lab/run/<pod>/         working directory of a real pod process (its PID's
                                              cwd proves the process is ours before we stop it)
    <root>/var/log/pods/<pod>.log             output of a real pod process

Why files: the lab command, tests and an operator can read and flip them with nothing but a
shell, while the agent is running.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["LAB_DIR", "REFUSED_ARG", "LabLayout", "image_version", "write_fault", "write_refusal"]

LAB_DIR = "var/lib/bke-lab"
# what a real component is started with when faults.json says it refuses to start: no binary of
# Kubernetes or etcd has this flag, so each exits saying so (cobra: "Error: unknown flag: ...")
REFUSED_ARG = "--bke-lab-refused-on-purpose"


class _UnderLab:
    """A fixed path of the layout: `name` under its lab directory (`<root>/var/lib/bke-lab`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, layout: LabLayout, owner: type | None = None) -> Path:
        return layout.lab / self.name


def _read_json(path: Path, missing: Any) -> Any:
    """The JSON document in `path`; `missing` when there is none or it does not parse (a control
    file written by hand, a status file cut short by a crash)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return missing


@dataclass(frozen=True)
class LabLayout:
    root: Path

    # the fixed paths under the lab directory (see the module docstring)
    pods = _UnderLab("pods")
    systemd = _UnderLab("systemd")
    tls = _UnderLab("tls")
    programs_log = _UnderLab("programs.jsonl")
    faults_file = _UnderLab("faults.json")

    @property
    def lab(self) -> Path:
        return self.root / LAB_DIR

    @property
    def manifests(self) -> Path:
        return self.root / "etc/kubernetes/manifests"

    def pod_status_file(self, pod: str) -> Path:
        return self.pods / f"{pod}.json"

    def unhealthy_file(self, pod: str) -> Path:
        return self.lab / "unhealthy" / pod

    def _fault_entries(self, kind: str) -> list[Any]:
        """The entries of one kind of faults.json (none if no file)."""
        doc = _read_json(self.faults_file, {})
        return doc.get(kind, []) if isinstance(doc, dict) else []

    def unhealthy_versions(self, component: str) -> set[str]:
        """The versions of `component` that faults.json makes unhealthy (none if no file)."""
        entries = self._fault_entries("unhealthy")
        return {str(e.get("version")) for e in entries if isinstance(e, dict) and e.get("component") == component}

    def refused_arg(self, component: str, version: str) -> str | None:
        """The argument faults.json has a real `component` at `version` started with so that it
        refuses to start (None: no such fault)."""
        for e in self._fault_entries("refuses"):
            if isinstance(e, dict) and e.get("component") == component and str(e.get("version")) == version:
                return str(e.get("arg") or REFUSED_ARG)
        return None

    def fail_step_file(self, step_id: str) -> Path:
        return self.lab / "fail-step" / quote(step_id, safe="-_.@")

    def unit_file(self, unit: str) -> Path:
        return self.systemd / f"{unit}.json"

    def run_dir(self, pod: str) -> Path:
        return self.lab / "run" / pod

    def pod_log(self, pod: str) -> Path:
        return self.root / "var/log/pods" / f"{pod}.log"

    def ensure(self) -> None:
        for d in (self.pods, self.systemd, self.tls, self.lab / "unhealthy", self.lab / "fail-step", self.lab / "run"):
            d.mkdir(parents=True, exist_ok=True)

    def pod_status(self, pod: str) -> dict[str, Any] | None:
        """The pod's status, or None if the stand-in never wrote one."""
        return _read_json(self.pod_status_file(pod), None)

    def unit_state(self, unit: str) -> dict[str, Any]:
        return _read_json(self.unit_file(unit), {"unit": unit, "enabled": False, "active": False})


def image_version(image: str) -> str:
    """The tag of an image reference (`registry.k8s.io/kube-apiserver:v1.36.2` -> `v1.36.2`),
    "" when it has none (a digest alone, or no tag)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def write_fault(root: Path, component: str, version: str) -> Path:
    """Make `component` at `version` (its image tag) unhealthy on the lab node under `root`;
    idempotent. Pods read the file when they start: add the fault before the upgrade."""
    return _add_fault(root, "unhealthy", {"component": component, "version": version})


def write_refusal(root: Path, component: str, version: str, arg: str = "") -> Path:
    """Make a real `component` at `version` refuse to start on the lab node under `root`: it
    is started with `arg` appended (default `REFUSED_ARG`); idempotent. Read when a pod starts.
    Lab only: nothing outside the lab's node trees reads faults.json, and no spec reaches it."""
    return _add_fault(root, "refuses", {"component": component, "version": version, **({"arg": arg} if arg else {})})


def _add_fault(root: Path, kind: str, entry: dict[str, str]) -> Path:
    layout = LabLayout(root)
    layout.lab.mkdir(parents=True, exist_ok=True)
    doc = _read_json(layout.faults_file, {})
    entries = doc.setdefault(kind, [])
    if entry not in entries:
        entries.append(entry)
    tmp = layout.faults_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(layout.faults_file)
    return layout.faults_file
