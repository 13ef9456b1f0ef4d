"""Typed models of the files that are not Kubernetes API objects (so kubernetes-validate has no
schema for them): KubeletConfiguration, KubeProxyConfiguration, containerd config.toml (schema 2
for containerd 1.7, schema 3 for 2.x) and registry hosts.toml.

Each model covers the fields BKE renders, closed with extra="forbid": a template typo or a key in
the wrong schema version (a 1.7 key in a 2.x file) fails here instead of being ignored by the
component at start-up. Enums and formats are checked, which the JSON schemas would not do.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

__all__ = [
    "ContainerdV2",
    "ContainerdV3",
    "HostsToml",
    "KubeProxyConfiguration",
    "KubeletConfiguration",
]

_DURATION = re.compile(r"^(0|(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+)$")


def _duration(v: str) -> str:
    if not _DURATION.match(v):
        raise ValueError(f"{v!r} is not a Go duration (e.g. 0s, 500ms, 2m)")
    return v


def _ip(v: str) -> str:
    ipaddress.ip_address(v)
    return v


def _abs_path(v: str) -> str:
    if not v.startswith("/") or "//" in v or "/../" in v:
        raise ValueError(f"{v!r} is not a clean absolute path")
    return v


def _unix_endpoint(v: str) -> str:
    if not v.startswith("unix:///"):
        raise ValueError(f"{v!r} is not a unix:// socket endpoint")
    return v


Duration = Annotated[str, AfterValidator(_duration)]
IP = Annotated[str, AfterValidator(_ip)]
AbsPath = Annotated[str, AfterValidator(_abs_path)]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --- kubelet.config.k8s.io/v1beta1 -----------------------------------------------------------
class _Anonymous(_Closed):
    enabled: bool


class _Webhook(_Closed):
    enabled: bool
    cacheTTL: Duration | None = None


class _X509(_Closed):
    clientCAFile: AbsPath | None = None


class _Authn(_Closed):
    anonymous: _Anonymous
    webhook: _Webhook
    x509: _X509


class _AuthzWebhook(_Closed):
    cacheAuthorizedTTL: Duration
    cacheUnauthorizedTTL: Duration


class _Authz(_Closed):
    mode: Literal["Webhook", "AlwaysAllow"]
    webhook: _AuthzWebhook | None = None


class _Taint(_Closed):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class KubeletConfiguration(_Closed):
    apiVersion: Literal["kubelet.config.k8s.io/v1beta1"]
    kind: Literal["KubeletConfiguration"]
    address: IP | None = None
    authentication: _Authn
    authorization: _Authz
    cgroupDriver: Literal["systemd", "cgroupfs"]
    clusterDNS: list[IP] = []
    clusterDomain: str | None = None
    containerRuntimeEndpoint: Annotated[str, AfterValidator(_unix_endpoint)]
    healthzBindAddress: IP
    healthzPort: int = Field(ge=0, le=65535)
    maxPods: int = Field(ge=1, le=1000)
    kubeAPIQPS: int | None = Field(default=None, ge=1)
    kubeAPIBurst: int | None = Field(default=None, ge=1)
    registerNode: bool
    registerWithTaints: list[_Taint] = []
    rotateCertificates: bool
    serverTLSBootstrap: bool = False
    staticPodPath: AbsPath

    def standalone_is_local(self) -> bool:
        """A kubelet without an API server must not serve AlwaysAllow beyond loopback."""
        return self.authorization.mode != "AlwaysAllow" or self.address in ("127.0.0.1", "::1")


# --- kubeproxy.config.k8s.io/v1alpha1 ---------------------------------------------------------
class _ClientConnection(_Closed):
    kubeconfig: AbsPath
    qps: int | None = Field(default=None, ge=1)
    burst: int | None = Field(default=None, ge=1)


class KubeProxyConfiguration(_Closed):
    apiVersion: Literal["kubeproxy.config.k8s.io/v1alpha1"]
    kind: Literal["KubeProxyConfiguration"]
    bindAddress: IP
    clientConnection: _ClientConnection
    clusterCIDR: str
    healthzBindAddress: str
    metricsBindAddress: str
    mode: Literal["iptables", "ipvs", "nftables"]


# --- containerd ------------------------------------------------------------------------------
class _RuncOptions(_Closed):
    SystemdCgroup: bool


class _Runc(_Closed):
    runtime_type: Literal["io.containerd.runc.v2"]
    options: _RuncOptions


class _Runtimes(_Closed):
    runc: _Runc


class _ContainerdSection(_Closed):
    default_runtime_name: Literal["runc"]
    runtimes: _Runtimes


class _Registry(_Closed):
    config_path: AbsPath


class _Grpc(_Closed):
    address: AbsPath


class _CriV2(_Closed):
    sandbox_image: str = Field(min_length=1)
    containerd: _ContainerdSection
    registry: _Registry


class _PluginsV2(_Closed):
    cri: _CriV2 = Field(alias="io.containerd.grpc.v1.cri")


class ContainerdV2(_Closed):
    """containerd 1.7: config schema version 2."""

    version: Literal[2]
    root: AbsPath
    state: AbsPath
    grpc: _Grpc
    plugins: _PluginsV2


class _Pinned(_Closed):
    sandbox: str = Field(min_length=1)


class _Images(_Closed):
    pinned_images: _Pinned
    registry: _Registry


class _Runtime(_Closed):
    containerd: _ContainerdSection


class _PluginsV3(_Closed):
    images: _Images = Field(alias="io.containerd.cri.v1.images")
    runtime: _Runtime = Field(alias="io.containerd.cri.v1.runtime")


class ContainerdV3(_Closed):
    """containerd 2.x: config schema version 3 (sandbox image moved to pinned_images)."""

    version: Literal[3]
    root: AbsPath
    state: AbsPath
    grpc: _Grpc
    plugins: _PluginsV3


class _Host(_Closed):
    capabilities: list[Literal["pull", "resolve", "push"]] = Field(min_length=1)
    skip_verify: bool = False


_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(/[^\s\"]*)?$")


def _url(v: str) -> str:
    if not _URL.match(v):
        raise ValueError(f"{v!r} is not an http(s) URL")
    return v


class HostsToml(_Closed):
    """/etc/containerd/certs.d/<registry>/hosts.toml"""

    server: Annotated[str, AfterValidator(_url)]
    host: dict[Annotated[str, AfterValidator(_url)], _Host] = {}
