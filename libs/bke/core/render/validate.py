"""Parse every rendered file back and validate it before it leaves the renderer.

A file's `kind` (from the file table in render.py) picks its validator. Kubernetes API objects go
through kubernetes-validate --strict for the cluster's version (k8s_schema); other files through
our typed models (file_models, conf_parsers); pods also through checks.py. Validators return
(problems, facts): `facts` feed the node-level checks (ports in use, cgroup drivers).
"""
from __future__ import annotations

import ipaddress
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from bke.core.host_actions.kubeconfigs import is_kubeconfig_path, kubeconfig_problems
from . import checks, yaml_fast
from .conf_parsers import parse_haproxy, parse_keepalived, parse_systemd_unit
from .containerd_keys import v3_key_problems
from .file_models import ContainerdV2, ContainerdV3, HostsToml, KubeletConfiguration, KubeProxyConfiguration
from .host_files import HOST_VALIDATORS
from .k8s_schema import strict_error

__all__ = ["VALIDATORS", "Expect", "load_yaml_docs", "validate_addon"]


@dataclass(frozen=True)
class Expect:
    """What the plan says a file must agree with (cross-checks beyond the file itself)."""

    k8s_minor: str
    etcd_overrides: str | None  # the planner's value, or None when the user overrode it knowingly
    endpoint_port: int
    apiserver_ips: tuple[str, ...]


Result = tuple[list[str], dict[str, Any]]


def load_yaml_docs(text: str) -> list[Any]:
    return yaml_fast.load_all(text)


def _pydantic(model: Any, data: Any) -> list[str]:
    try:
        model.model_validate(data)
    except ValidationError as exc:
        return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]
    return []


def _pod(text: str, expect: Expect) -> Result:
    docs = load_yaml_docs(text)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        return ["a static pod manifest must hold exactly one object"], {}
    pod = docs[0]
    problems = []
    err = strict_error(pod, expect.k8s_minor)
    if err:
        problems.append(f"kubernetes-validate --strict {expect.k8s_minor}: {err}")
    if pod.get("kind") != "Pod":
        return problems + ["not a Pod"], {}
    problems += checks.probe_problems(pod) + checks.hostpath_problems(pod)
    name = pod.get("metadata", {}).get("name", "")
    for c in pod["spec"].get("containers") or []:
        flags = checks.flag_values(c.get("command") or [])
        if "etcd-servers-overrides" in flags:
            problems += [f"--etcd-servers-overrides: {p}" for p in checks.check_overrides(flags["etcd-servers-overrides"])]
            if expect.etcd_overrides is not None and flags["etcd-servers-overrides"] != expect.etcd_overrides:
                problems.append("--etcd-servers-overrides differs from the planner's value")
        elif name == "kube-apiserver" and expect.etcd_overrides:
            problems.append("--etcd-servers-overrides is missing although etcd is split")
    return problems, {"ports": checks.pod_ports(pod), "pod": name}


def _kubelet_config(text: str, expect: Expect) -> Result:
    docs = load_yaml_docs(text)
    problems = _pydantic(KubeletConfiguration, docs[0] if len(docs) == 1 else None)
    if problems:
        return problems, {}
    cfg = KubeletConfiguration.model_validate(docs[0])
    if not cfg.standalone_is_local():
        problems.append("a kubelet with AlwaysAllow authorization must bind to loopback only")
    if cfg.registerNode == (cfg.authorization.mode == "AlwaysAllow"):
        problems.append("registered kubelets use Webhook authorization; only standalone ones AlwaysAllow")
    return problems, {"cgroup": cfg.cgroupDriver}


def _parses(parse: Callable[[str], object]) -> Callable[[str, Expect], Result]:
    """A check that the file parses and nothing more: the parser's ValueError is the problem."""
    def check(text: str, expect: Expect) -> Result:
        try:
            parse(text)
        except ValueError as exc:
            return [str(exc)], {}
        return [], {}
    return check


def _toml(model: Any, fact: Callable[[Any], dict[str, Any]]) -> Callable[[str, Expect], Result]:
    def check(text: str, expect: Expect) -> Result:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            return [f"TOML: {exc}"], {}
        problems = _pydantic(model, data)
        return problems, ({} if problems else fact(model.model_validate(data)))
    return check


def _cgroup(systemd: bool) -> dict[str, Any]:
    return {"cgroup": "systemd" if systemd else "cgroupfs"}


_containerd_v3_model = _toml(ContainerdV3, lambda m: _cgroup(m.plugins.runtime.containerd.runtimes.runc.options.SystemdCgroup))


def _containerd_v3(text: str, expect: Expect) -> Result:
    """Our typed model, then every key against what containerd 2.x reads (containerd_keys): no real
    program here knows version 3, and containerd itself ignores a key it does not know."""
    problems, facts = _containerd_v3_model(text, expect)
    if problems and problems[0].startswith("TOML:"):
        return problems, facts
    return problems + v3_key_problems(tomllib.loads(text)), facts
_containerd_v2 = _toml(ContainerdV2, lambda m: _cgroup(m.plugins.cri.containerd.runtimes.runc.options.SystemdCgroup))


def _haproxy(text: str, expect: Expect) -> Result:
    try:
        cfg = parse_haproxy(text)
    except ValueError as exc:
        return [str(exc)], {}
    problems = []
    if ("*", expect.endpoint_port) not in cfg.bind_ports():
        problems.append(f"no frontend binds the endpoint port {expect.endpoint_port}")
    backends = sorted(str(ipaddress.ip_address(s.host)) for s in cfg.servers("apiserver")) if "apiserver" in cfg.named("backend") else []
    if backends != sorted(expect.apiserver_ips):
        problems.append(f"backend servers {backends} are not the kube-apiserver nodes {sorted(expect.apiserver_ips)}")
    return problems, {}


def _shell(text: str, expect: Expect) -> Result:
    return ([] if text.startswith("#!/bin/sh\n") else ["a shell script must start with #!/bin/sh"]), {}


VALIDATORS: dict[str, Callable[[str, Expect], Result]] = {
    "pod": _pod,
    "kubelet-config": _kubelet_config,
    "systemd-unit": _parses(parse_systemd_unit),
    # Chosen by containerd version in render.py, so a file of the wrong schema version fails.
    "containerd-v2": _containerd_v2,
    "containerd-v3": _containerd_v3,
    "hosts-toml": _toml(HostsToml, lambda m: {}),
    "haproxy-cfg": _haproxy,
    "keepalived-conf": _parses(parse_keepalived),
    "shell": _shell,
    **HOST_VALIDATORS,  # modules-load, sysctl, crictl-config
}


def validate_addon(text: str, k8s_minor: str) -> list[str]:
    """Every object strict-validated; the kube-proxy ConfigMap's config by our typed model, its
    kubeconfig as a kubeconfig BKE writes (no exec plugin, no auth provider)."""
    problems = []
    for i, obj in enumerate(load_yaml_docs(text)):
        where = f"document {i} ({obj.get('kind')}/{obj.get('metadata', {}).get('name')})" if isinstance(obj, dict) else f"document {i}"
        if not isinstance(obj, dict):
            problems.append(f"{where}: not an object")
            continue
        err = strict_error(obj, k8s_minor)
        if err:
            problems.append(f"{where}: kubernetes-validate --strict {k8s_minor}: {err}")
        for key, value in (obj.get("data") or {}).items() if obj.get("kind") == "ConfigMap" else ():
            if is_kubeconfig_path(str(key)):  # kube-proxy's kubeconfig.conf: credentials only, no program
                problems += [f"{where}: {key} {p}" for p in kubeconfig_problems(str(value))]
        if obj.get("kind") == "ConfigMap" and "config.conf" in (obj.get("data") or {}):
            conf = load_yaml_docs(obj["data"]["config.conf"])
            problems += [f"{where}: config.conf {p}" for p in _pydantic(KubeProxyConfiguration, conf[0] if conf else None)]
        for kind in ("Deployment", "DaemonSet"):
            if obj.get("kind") == kind:
                pod = {"spec": obj["spec"]["template"]["spec"]}
                problems += [f"{where}: {p}" for p in checks.probe_problems(pod)]
    return problems
