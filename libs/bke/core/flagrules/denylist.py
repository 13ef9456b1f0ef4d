"""The extraArgs denylist: flags a user may not set (or not to some values), as one table.

Read by spec validation (so the planner and `bke plan` refuse a spec before anything runs), by
the renderer (a second line of defence) and by the docs generator (docs/renderer.md).

Boolean flags are judged the way the component reads them: etcd (Go's `flag`) and the
Kubernetes components (`pflag`) both parse a bool with `strconv.ParseBool`, so "0", "f" or
"FALSE" switch etcd's client-cert-auth off just like "false" does. A value ParseBool rejects is
refused too: the component would not start.

Not listed on purpose: kube-apiserver's `--anonymous-auth=true` is upstream's default, and our
own liveness probes call /livez anonymously, so refusing it would protect nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DENYLIST", "DenyRule", "go_bool"]

# strconv.ParseBool's accepted spellings (Go source: strconv/atob.go); anything else is an error.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def go_bool(value: str) -> bool | None:
    """The value as Go's strconv.ParseBool reads it; None where Go would fail to parse it."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    return None


@dataclass(frozen=True)
class DenyRule:
    """One refused flag. With neither `bad_values`, `must_be` nor `only`, any value is refused."""

    component: str  # family: kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kubelet
    flag: str
    reason: str
    bad_values: tuple[str, ...] = ()  # list flags: refused if any comma item is one of these
    must_be: bool | None = None  # boolean flags: refused unless ParseBool gives exactly this
    only: tuple[str, ...] = ()  # enum flags: refused unless the value is one of these

    @property
    def refused_text(self) -> str:
        """The refused values, for errors and the docs table."""
        if self.must_be is not None:
            return f"anything ParseBool does not read as {str(self.must_be).lower()}"
        if self.only:
            return "anything but " + ", ".join(self.only)
        return ", ".join(self.bad_values) or "any"

    def problem(self, value: str) -> str | None:
        """Why `value` is refused (None: accepted). The rule's reason is added by the caller."""
        if self.must_be is not None:
            parsed = go_bool(value)  # exact, as Go reads it: " true" does not parse
            if parsed is None:
                return f"--{self.flag}={value} is not a boolean (Go reads 1, t, true, 0, f, false and their capitals)"
            return None if parsed is self.must_be else f"--{self.flag}={value} means {str(parsed).lower()} and is refused"
        if self.only:
            return None if value in self.only else f"--{self.flag}={value} is refused (only {', '.join(self.only)})"
        if self.bad_values:
            items = {i.strip().lower() for i in value.split(",")}
            if not any(b.lower() in items for b in self.bad_values):
                return None
            return f"--{self.flag}={value} is refused"
        return f"--{self.flag} is refused"


_CERTS = "certificate and key paths are owned by the certs service (bke certs)"
_ETCD_PLACE = "etcd endpoints are computed by the planner from the etcd roles"
_MEMBER = "etcd membership and listeners come from the plan (ports, probes and peers depend on them)"
_KCONF = "kubeconfig paths are owned by the certs service"


def _rules(component: str, reason: str, *flags: str) -> tuple[DenyRule, ...]:
    return tuple(DenyRule(component, f, reason) for f in flags)


DENYLIST: tuple[DenyRule, ...] = (
    *_rules("kube-apiserver", _ETCD_PLACE, "etcd-servers", "etcd-servers-overrides"),
    *_rules("kube-apiserver", _CERTS, "etcd-cafile", "etcd-certfile", "etcd-keyfile", "client-ca-file", "tls-cert-file",
            "tls-private-key-file", "kubelet-client-certificate", "kubelet-client-key", "proxy-client-cert-file",
            "proxy-client-key-file", "requestheader-client-ca-file", "service-account-key-file",
            "service-account-signing-key-file"),
    *_rules("kube-apiserver", "placement: haproxy backends, probes and certificates use the node address and port 6443",
            "advertise-address", "secure-port"),
    DenyRule("kube-apiserver", "authorization-mode", "AlwaysAllow disables authorization", bad_values=("AlwaysAllow",)),
    # the Node authorizer's partner: without it a kubelet's credentials may change any Node and any
    # pod's status, not only its own (BKE's enable-admission-plugins is merged, never replaced: args.py)
    DenyRule("kube-apiserver", "disable-admission-plugins", "NodeRestriction keeps each kubelet to its own Node and pods",
             bad_values=("NodeRestriction",)),
    *_rules("kube-controller-manager", _KCONF, "kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"),
    *_rules("kube-controller-manager", _CERTS, "cluster-signing-cert-file", "cluster-signing-key-file", "root-ca-file",
            "service-account-private-key-file", "client-ca-file", "requestheader-client-ca-file"),
    *_rules("kube-controller-manager", "the liveness probe uses this port", "secure-port"),
    *_rules("kube-scheduler", _KCONF, "kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig"),
    *_rules("kube-scheduler", "the liveness probe uses this port", "secure-port"),
    *_rules("etcd", _MEMBER, "name", "data-dir", "initial-cluster", "initial-advertise-peer-urls",
            "advertise-client-urls", "listen-client-urls", "listen-peer-urls", "listen-metrics-urls"),
    *_rules("etcd", _CERTS, "cert-file", "key-file", "trusted-ca-file", "peer-cert-file", "peer-key-file",
            "peer-trusted-ca-file"),
    DenyRule("etcd", "client-cert-auth", "etcd would accept clients without a certificate", must_be=True),
    DenyRule("etcd", "peer-client-cert-auth", "etcd would accept peers without a certificate", must_be=True),
    DenyRule("etcd", "auto-tls", "self-signed certificates bypass the cluster CA", must_be=False),
    DenyRule("etcd", "peer-auto-tls", "self-signed certificates bypass the cluster CA", must_be=False),
    *_rules("kubelet", _KCONF, "kubeconfig", "bootstrap-kubeconfig", "config"),
    *_rules("kubelet", _CERTS, "client-ca-file", "tls-cert-file", "tls-private-key-file"),
    *_rules("kubelet", "placement: the node's name and address come from the plan", "hostname-override", "node-ip"),
    DenyRule("kubelet", "anonymous-auth", "anonymous requests to the kubelet API (exec, logs)", must_be=False),
    # The kubelet knows two modes; AlwaysAllow lets anyone who reaches port 10250 exec into pods.
    DenyRule("kubelet", "authorization-mode", "only Webhook makes the kubelet ask the apiserver who may do what",
             only=("Webhook",)),
)
