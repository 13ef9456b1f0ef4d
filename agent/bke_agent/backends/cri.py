"""How often a static pod's container exited, its last exit code and log tail, from the
container runtime through crictl: the host's `crashloop.ExitSource`.

What is asked, and why it is enough (kubernetes-sigs/cri-tools at v1.36, cmd/crictl):
- `crictl ps -a --name ^<container>$ --namespace ^<namespace>$ -o json` (container.go,
  `listContainersCommand`: `--name` and `--namespace` are regular expressions, `-a` includes
  exited containers; `-o json` prints the CRI `ListContainersResponse` through protojson, util.go
  `protobufObjectToJSON`: lowerCamelCase fields, int64 `createdAt` in nanoseconds as a string,
  the state as its enum name). The kubelet labels each container with its pod's name
  (`io.kubernetes.pod.name`, kubelet pkg/types/labels.go), a static pod's being
  `<metadata.name>-<node name>`, and gives it `metadata.attempt` = its restart count within the
  pod (pkg/kubelet/kuberuntime/kuberuntime_container.go, `startContainer`). A changed manifest
  is a new pod (a new UID, a new sandbox), so its attempts start at 0: the newest container
  created since the write has exited `attempt` times before it, plus once if it is exited too.
- `crictl inspect --quiet -o json <id>` (container.go, `containerStatusCommand`): `status.exitCode`
  of the last exited one. `--quiet` asks the runtime for no verbose `info`, which holds the
  container's whole runtime spec (its environment among it): nothing of it is wanted here.
- `crictl logs --tail 40 <id>` (logs.go): the end of its log; the container's stdout on crictl's
  stdout, its stderr on crictl's stderr. Only `errorlines.error_lines` of it is ever shown.
Verified on paper and against recorded outputs (tests/unit/agent/test_agent_crashloop.py):
the tests have no containerd.
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import yaml

from .crashloop import Exits
from .proc import ProgramRun

__all__ = ["CriExits", "LOG_TAIL_LINES", "PodNames", "exit_code_of", "exits_of", "pod_names"]

LOG_TAIL_LINES = 40  # a component that prints its usage before its error (cobra) still shows it
POD_NAME_LABEL = "io.kubernetes.pod.name"
EXITED = "CONTAINER_EXITED"

# runs `crictl ARGS...` on the node; None where there is no crictl to run
Crictl = Callable[[list[str]], Awaitable[ProgramRun | None]]


@dataclass(frozen=True)
class PodNames:
    pod: str  # metadata.name: the static pod is `<pod>-<node name>`
    namespace: str
    container: str  # the first container's name: the component


def pod_names(manifest: bytes) -> PodNames | None:
    """The names a static pod manifest gives its pod and first container (None: unreadable)."""
    try:
        doc = yaml.safe_load(manifest)
        meta, container = doc["metadata"], doc["spec"]["containers"][0]
        return PodNames(str(meta["name"]), str(meta.get("namespace") or "kube-system"), str(container["name"]))
    except (yaml.YAMLError, KeyError, IndexError, TypeError):
        return None


def _ns(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def exits_of(doc: Any, pod: str, since_ns: int) -> tuple[int, str]:
    """(exits, id of the newest exited container) of pod `pod`'s containers created since
    `since_ns`, from `crictl ps -a -o json`; (0, "") when there are none."""
    containers = doc.get("containers") if isinstance(doc, dict) else None
    mine = [c for c in containers or [] if isinstance(c, dict)
            and str((c.get("labels") or {}).get(POD_NAME_LABEL, "")).startswith(f"{pod}-")
            and _ns(c.get("createdAt")) >= since_ns]
    if not mine:
        return 0, ""
    newest = max(mine, key=lambda c: (_ns((c.get("metadata") or {}).get("attempt")), _ns(c.get("createdAt"))))
    count = _ns((newest.get("metadata") or {}).get("attempt")) + (1 if newest.get("state") == EXITED else 0)
    exited = [c for c in mine if c.get("state") == EXITED]
    last = max(exited, key=lambda c: _ns(c.get("createdAt")), default=None)
    return count, str(last.get("id", "")) if last else ""


def exit_code_of(doc: Any) -> int | None:
    """`status.exitCode` of `crictl inspect --quiet -o json`."""
    status = doc.get("status") if isinstance(doc, dict) else None
    code = status.get("exitCode") if isinstance(status, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _json(run: ProgramRun | None) -> Any:
    if run is None or run.exit_code != 0:
        return None
    try:
        return json.loads(run.stdout)
    except ValueError:
        return None


class CriExits:
    """`crashloop.ExitSource` from crictl. No crictl, or an answer it cannot read: no exits
    known, and the step waits its timeout as before."""

    def __init__(self, crictl: Crictl, manifest: Callable[[str], bytes]) -> None:
        self.crictl, self.manifest = crictl, manifest

    async def pod_exits(self, node_path: str, sha256: str, since: float, detail: bool) -> Exits:
        try:
            names = pod_names(self.manifest(node_path))
        except OSError:
            return Exits()
        if names is None:
            return Exits()
        listed = _json(await self.crictl(["ps", "-a", "--name", f"^{names.container}$", "--namespace",
                                          f"^{names.namespace}$", "-o", "json"]))
        count, last = exits_of(listed, names.pod, int(since * 1e9))
        if not detail or not last:
            return Exits(count)
        code = exit_code_of(_json(await self.crictl(["inspect", "--quiet", "-o", "json", last])))
        logs = await self.crictl(["logs", "--tail", str(LOG_TAIL_LINES), last])
        tail = b"" if logs is None else logs.stdout + b"\n" + logs.stderr
        return Exits(count, code, tail.decode(errors="replace"))
