"""Built-in flags and template parameters of the static pods: etcd (one pod per etcd cluster the
node belongs to) and the control plane. Defaults follow kubeadm's manifests (cmd/kubeadm/app/phases/controlplane/manifests.go,
phases/etcd/local.go);
presets and extraArgs are merged on top in Ctx.flags.
"""
from __future__ import annotations

from collections.abc import Callable

from bke.core.flagrules.gates import gate_open
from bke.core.paths import CONTROLLER_MANAGER_CONF, MANIFESTS_DIR, PKI_DIR, SCHEDULER_CONF
from bke.core.plan import EtcdClusterPlan, NodePlan
from .args import format_flags
from .context import Ctx, loopback_of, url_host
from .errors import MissingInputError
from .layout import PKI, PORTS
from .params import ApiserverPod, ControllerManagerPod, EtcdPod, Params, SchedulerPod

__all__ = [
    "apiserver_defaults",
    "apiserver_pod",
    "controller_manager_defaults",
    "controller_manager_pod",
    "etcd_defaults",
    "etcd_pod",
    "scheduler_defaults",
    "scheduler_pod",
]

Emit = list[tuple[str, object]]


def etcd_defaults(ctx: Ctx, cluster: EtcdClusterPlan, node: NodePlan) -> dict[str, str]:
    m = cluster.member(node.hostname)
    assert m is not None, f"{node.hostname} is not a member of {cluster.name}"
    lo = url_host(loopback_of(node.ip))
    d = cluster.cert_dir
    initial_cluster, state = cluster.initial_cluster, "new"
    join = ctx.inputs.etcd_join(cluster.name, node.hostname)
    if join is not None:  # joins the running cluster (see EtcdJoin)
        if f"{node.hostname}={m.peer_url}" not in join.initial_cluster.split(","):
            raise MissingInputError(f"etcd cluster {cluster.name}: the join of {node.hostname} lists "
                                    f"{join.initial_cluster!r}, without itself ({node.hostname}={m.peer_url})")
        initial_cluster, state = join.initial_cluster, "existing"
    return {
        "advertise-client-urls": m.client_url,
        "cert-file": f"{d}/server.crt",
        "client-cert-auth": "true",
        "data-dir": cluster.data_dir,
        "initial-advertise-peer-urls": m.peer_url,
        "initial-cluster": initial_cluster,
        "initial-cluster-state": state,
        # Distinct per cluster: a member can never join another cluster's raft group by mistake.
        "initial-cluster-token": f"{ctx.plan.cluster}-{cluster.name}",
        "key-file": f"{d}/server.key",
        "listen-client-urls": f"https://{lo}:{cluster.client_port},{m.client_url}",
        "listen-metrics-urls": f"http://{lo}:{cluster.metrics_port}",
        "listen-peer-urls": m.peer_url,
        "name": node.hostname,
        "peer-cert-file": f"{d}/peer.crt",
        "peer-client-cert-auth": "true",
        "peer-key-file": f"{d}/peer.key",
        # Peers are trusted only within one etcd cluster; clients (the API server) by the shared CA.
        "peer-trusted-ca-file": f"{d}/peer-ca.crt",
        "trusted-ca-file": f"{d}/ca.crt",
    }


def etcd_pod(ctx: Ctx, node: NodePlan, cluster_name: str) -> Emit:
    cluster = ctx.plan.etcd_cluster(cluster_name)
    assert cluster is not None
    m = cluster.member(node.hostname)
    assert m is not None
    flags = ctx.flags(cluster_name, node, etcd_defaults(ctx, cluster, node))
    params = EtcdPod(
        name=cluster.manifest.removesuffix(".yaml"),
        image=ctx.image("etcd", f"{ctx.versions.etcd.major}.{ctx.versions.etcd.minor}.{ctx.versions.etcd.patch}-0"),
        flags=format_flags(flags),
        client_port=cluster.client_port,
        peer_port=cluster.peer_port,
        metrics_port=cluster.metrics_port,
        data_dir=cluster.data_dir,
        cert_dir=cluster.cert_dir,
        advertise_client_url=m.client_url,
        probe_host=loopback_of(node.ip),
        livez=gate_open("etcd", "endpoint", "/livez", ctx.versions),
        certificate_names=ctx.certificate_names(node, "etcd", cluster.name),
    )
    return [(f"{MANIFESTS_DIR}/{cluster.manifest}", params)]


# Longer than the rendered haproxy's way to find an apiserver not ready (a check every 2 s, out
# after 2 failed: within about 6 s with a check's own timeout), with margin; a load balancer of the
# user's own with slower checks needs a longer delay (extraArgs).
SHUTDOWN_DELAY_S = 10


def apiserver_defaults(ctx: Ctx, node: NodePlan) -> dict[str, str]:
    net = ctx.config.networking
    out = {
        "advertise-address": node.ip,
        "allow-privileged": "true",
        "authorization-mode": "Node,RBAC",
        "client-ca-file": PKI["ca.crt"],
        "enable-admission-plugins": "NodeRestriction",
        # no bootstrap-token authenticator: BKE issues every kubelet its certificate and creates
        # no token (bke.core.rbac); a spec that wants one sets it in extraArgs
        "etcd-cafile": f"{PKI_DIR}/etcd/ca.crt",
        "etcd-certfile": PKI["apiserver-etcd-client.crt"],
        "etcd-keyfile": PKI["apiserver-etcd-client.key"],
        "etcd-servers": ctx.plan.apiserver.etcd_servers,
        "kubelet-client-certificate": PKI["apiserver-kubelet-client.crt"],
        "kubelet-client-key": PKI["apiserver-kubelet-client.key"],
        "kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
        "profiling": "false",
        "proxy-client-cert-file": PKI["front-proxy-client.crt"],
        "proxy-client-key-file": PKI["front-proxy-client.key"],
        "requestheader-allowed-names": "front-proxy-client",
        "requestheader-client-ca-file": PKI["front-proxy-ca.crt"],
        "requestheader-extra-headers-prefix": "X-Remote-Extra-",
        "requestheader-group-headers": "X-Remote-Group",
        "requestheader-username-headers": "X-Remote-User",
        "secure-port": str(PORTS["kube-apiserver"]),
        "service-account-issuer": f"https://kubernetes.default.svc.{net.dns_domain}",
        "service-account-key-file": PKI["sa.pub"],
        "service-account-signing-key-file": PKI["sa.key"],
        "service-cluster-ip-range": net.service_subnet,
        "tls-cert-file": PKI["apiserver.crt"],
        "tls-private-key-file": PKI["apiserver.key"],
    }
    if ctx.plan.apiserver.etcd_servers_overrides:
        out["etcd-servers-overrides"] = ctx.plan.apiserver.etcd_servers_overrides
    if len(ctx.plan.nodes_running("kube-apiserver")) > 1:
        # Behind a load balancer, an apiserver told to stop (an upgrade, a restart) keeps serving
        # this long while its /readyz fails, so the balancer takes it out before it stops
        # listening: no client is sent to a closed port (upstream's graceful termination).
        out["shutdown-delay-duration"] = f"{SHUTDOWN_DELAY_S}s"
    return out


def _control_plane_pod(ctx: Ctx, node: NodePlan, component: str, model: Callable[..., Params], defaults: dict[str, str],
                       **own: str) -> Emit:
    """The static pod of a control-plane component: its flags (defaults, presets, extraArgs), the
    image of the cluster's release, its port and certificate names, and what is `own` to it."""
    params = model(
        image=ctx.image(component, f"v{ctx.versions.kubernetes}"),
        flags=format_flags(ctx.flags(component, node, defaults)),
        port=PORTS[component],
        certificate_names=ctx.certificate_names(node, component),
        **own,
    )
    return [(f"{MANIFESTS_DIR}/{component}.yaml", params)]


def apiserver_pod(ctx: Ctx, node: NodePlan) -> Emit:
    return _control_plane_pod(ctx, node, "kube-apiserver", ApiserverPod, apiserver_defaults(ctx, node),
                              advertise_address=node.ip, pki_dir=PKI_DIR)


def controller_manager_defaults(ctx: Ctx) -> dict[str, str]:
    net = ctx.config.networking
    return {
        "allocate-node-cidrs": "true",
        "authentication-kubeconfig": CONTROLLER_MANAGER_CONF,
        "authorization-kubeconfig": CONTROLLER_MANAGER_CONF,
        "bind-address": "127.0.0.1",
        "client-ca-file": PKI["ca.crt"],
        "cluster-cidr": net.pod_subnet,
        "cluster-name": ctx.plan.cluster,
        "cluster-signing-cert-file": PKI["ca.crt"],
        "cluster-signing-key-file": PKI["ca.key"],
        "controllers": "*,bootstrapsigner,tokencleaner",
        "kubeconfig": CONTROLLER_MANAGER_CONF,
        "leader-elect": "true",
        "profiling": "false",
        "requestheader-client-ca-file": PKI["front-proxy-ca.crt"],
        "root-ca-file": PKI["ca.crt"],
        "secure-port": str(PORTS["kube-controller-manager"]),
        "service-account-private-key-file": PKI["sa.key"],
        "service-cluster-ip-range": net.service_subnet,
        "use-service-account-credentials": "true",
    }


def controller_manager_pod(ctx: Ctx, node: NodePlan) -> Emit:
    return _control_plane_pod(ctx, node, "kube-controller-manager", ControllerManagerPod,
                              controller_manager_defaults(ctx), pki_dir=PKI_DIR, kubeconfig=CONTROLLER_MANAGER_CONF)


def scheduler_defaults(ctx: Ctx) -> dict[str, str]:
    return {
        "authentication-kubeconfig": SCHEDULER_CONF,
        "authorization-kubeconfig": SCHEDULER_CONF,
        "bind-address": "127.0.0.1",
        "kubeconfig": SCHEDULER_CONF,
        "leader-elect": "true",
        "profiling": "false",
        "secure-port": str(PORTS["kube-scheduler"]),
    }


def scheduler_pod(ctx: Ctx, node: NodePlan) -> Emit:
    return _control_plane_pod(ctx, node, "kube-scheduler", SchedulerPod, scheduler_defaults(ctx),
                              kubeconfig=SCHEDULER_CONF)
