"""The host's own configuration files: kernel modules (`/etc/modules-load.d/`), kernel parameters
(`/etc/sysctl.d/`) and crictl's `/etc/crictl.yaml`; with their template parameters and the
validators that parse each file back.

Which node gets which (the lists are bke.core.node_kernel's, which the dispatcher's node-env phase
also applies at once, so the file and the running kernel agree):
* every node: the modules file (`overlay` at least: containerd's snapshotter);
* nodes whose kubelet registers: the sysctl file, and `/etc/crictl.yaml`, since crictl is only
  fetched there (an etcd-only node runs host-network static pods only; see bke.core.node_kernel).
"""
from __future__ import annotations

import functools
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bke.core.node_kernel import MODULES_FILE, SYSCTL_FILE, kernel_modules, sysctls
from bke.core.plan import NodePlan
from bke.core.spec.pod_subnets import parse_pod_subnets
from . import yaml_fast
from .context import Ctx
from .layout import CONTAINERD_SOCKET, CRICTL_CONFIG

__all__ = [
    "CrictlConfig",
    "CrictlParams",
    "HOST_VALIDATORS",
    "ModulesLoad",
    "Sysctl",
    "SysctlSetting",
    "crictl_config",
    "modules_load",
    "sysctl_conf",
]

Emit = list[tuple[str, object]]
Result = tuple[list[str], dict[str, Any]]
CRICTL_TIMEOUT_S = 10  # crictl's own default is 2 s, short for a busy node pulling images


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModulesLoad(_Params):
    modules: list[str]


class SysctlSetting(_Params):
    key: str
    value: str


class Sysctl(_Params):
    settings: list[SysctlSetting]


class CrictlParams(_Params):
    endpoint: str
    timeout_s: int


def _proxy_mode(ctx: Ctx, node: NodePlan) -> str | None:
    return ctx.config.kube_proxy.mode if node.runs("kube-proxy") else None


def modules_load(ctx: Ctx, node: NodePlan) -> Emit:
    return [(MODULES_FILE, ModulesLoad(modules=list(kernel_modules(registers=node.registers,
                                                                    proxy_mode=_proxy_mode(ctx, node)))))]


def _ipv6_pods(ctx: Ctx) -> bool:
    return _has_ipv6(ctx.config.networking.pod_subnet)


@functools.lru_cache(maxsize=64)  # one pod subnet per cluster, asked once per node
def _has_ipv6(pod_subnet: str) -> bool:
    try:
        return any(n.version == 6 for n in parse_pod_subnets(pod_subnet))
    except ValueError:
        return False  # a plan holds a validated spec: not reached


def sysctl_conf(ctx: Ctx, node: NodePlan) -> Emit:
    settings = [SysctlSetting(key=k, value=v) for k, v in sysctls(registers=node.registers, ipv6=_ipv6_pods(ctx))]
    return [(SYSCTL_FILE, Sysctl(settings=settings))] if settings else []


def crictl_config(ctx: Ctx, node: NodePlan) -> Emit:
    if not node.registers:
        return []
    return [(CRICTL_CONFIG, CrictlParams(endpoint=f"unix://{CONTAINERD_SOCKET}", timeout_s=CRICTL_TIMEOUT_S))]


# --- parsed back ------------------------------------------------------------------------------
_MODULE = re.compile(r"^[A-Za-z0-9_-]+$")
_SYSCTL = re.compile(r"^([a-z0-9_-]+(?:[./][A-Za-z0-9_-]+)+)\s*=\s*(\S+)$")


def _lines(text: str) -> list[tuple[int, str]]:
    """Meaningful lines (comments start with # or ;, as both file formats allow)."""
    return [(i, line.strip()) for i, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.strip().startswith(("#", ";"))]


def _modules_load(text: str, expect: object) -> Result:
    mods = [line for _, line in _lines(text)]
    problems = [f"line {i}: {line!r} is not a module name" for i, line in _lines(text) if not _MODULE.match(line)]
    if "overlay" not in mods:
        problems.append("overlay is missing (containerd's snapshotter needs it)")
    if len(set(mods)) != len(mods):
        problems.append("a module is listed twice")
    return problems, {}


def _sysctl(text: str, expect: object) -> Result:
    problems, seen = [], set()
    for i, line in _lines(text):
        m = _SYSCTL.match(line)
        if not m:
            problems.append(f"line {i}: {line!r} is not 'key = value'")
        elif m[1] in seen:
            problems.append(f"line {i}: {m[1]} is set twice")
        else:
            seen.add(m[1])
    return problems, {}


class CrictlConfig(BaseModel):
    """The keys of crictl's config file that BKE writes (cri-tools docs/crictl.md), closed."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)
    runtime_endpoint: str = Field(alias="runtime-endpoint", pattern=r"^unix:///")
    image_endpoint: str = Field(alias="image-endpoint", pattern=r"^unix:///")
    timeout: int = Field(gt=0)


def _crictl(text: str, expect: object) -> Result:
    docs = yaml_fast.load_all(text)
    try:
        CrictlConfig.model_validate(docs[0] if len(docs) == 1 else None)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)], {}
    return [], {}


HOST_VALIDATORS = {"modules-load": _modules_load, "sysctl": _sysctl, "crictl-config": _crictl}
