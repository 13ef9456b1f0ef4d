"""The flag table: which flags each component accepts, by version, with the upstream source of
every row. Read through catalog.py (flag_verdict, known_flags).

Kubernetes components (1.31 .. 1.37). Each component has a base list, the flags present in every
supported minor, and rows for what changed. The base lists cover every flag BKE renders, the
flags the denylist names and those users commonly set (kubeadm, Kubespray and kOps manifests);
they are not every upstream flag: an unlisted one is refused with allowUnsafeFlags as the way
through. Sources: the generated command-line references (kubernetes/website content/en/docs/
reference/command-line-tools-reference/<component>.md, generated from the component's source),
and for each change the upstream pull request or CHANGELOG entry named in its row.

etcd (3.5.0 .. 3.6.x): generated from etcd's own source at every release tag of the two
branches (etcd-io/etcd server/etcdmain/config.go and server/embed/config.go: the names passed to
the flag set, and the `deprecatedFlags` map of 3.6), names only.
"""
from __future__ import annotations

from .catalog import Flag

__all__ = ["FLAGS", "FLAG_INDEX"]

_REF = "kubernetes/website command-line-tools-reference/{c}.md (generated from the source), present 1.31-1.37"
_CONFIG_FILE = "<1.31"  # 'DEPRECATED: This parameter should be set via the config file specified by the Kubelet's --config flag'

# component-base logging flags of every Kubernetes component (k8s.io/component-base/logs/api/v1).
_LOGS = "v vmodule log-flush-frequency logging-format log-json-info-buffer-size log-json-split-stream log-text-info-buffer-size log-text-split-stream"
# klog's own flags, removed from every Kubernetes component in 1.26 (KEP-2845 "Deprecate klog
# specific flags in Kubernetes components", kubernetes PR 112120).
_KLOG_REMOVED = "add-dir-header alsologtostderr log-dir log-file log-file-max-size logtostderr one-output skip-headers skip-log-headers stderrthreshold"
_KLOG_SRC = "KEP-2845, kubernetes PR 112120: klog flags removed in 1.26"
# Secure serving, delegated authn/z and leader election shared by the controller-manager and the
# scheduler (k8s.io/apiserver options and k8s.io/component-base config options).
_SERVING = """bind-address cert-dir http2-max-streams-per-connection permit-address-sharing permit-port-sharing secure-port
tls-cert-file tls-cipher-suites tls-min-version tls-private-key-file tls-sni-cert-key"""
_DELEGATED = """authentication-kubeconfig authentication-skip-lookup authentication-token-webhook-cache-ttl
authentication-tolerate-lookup-failure authorization-always-allow-paths authorization-kubeconfig
authorization-webhook-cache-authorized-ttl authorization-webhook-cache-unauthorized-ttl client-ca-file
requestheader-allowed-names requestheader-client-ca-file requestheader-extra-headers-prefix
requestheader-group-headers requestheader-username-headers"""
_LEADER = """leader-elect leader-elect-lease-duration leader-elect-renew-deadline leader-elect-resource-lock
leader-elect-resource-name leader-elect-resource-namespace leader-elect-retry-period"""
_COMMON = "contention-profiling disabled-metrics feature-gates help kubeconfig master profiling show-hidden-metrics-for-version version allow-metric-labels"

_APISERVER = """admission-control-config-file advertise-address allow-metric-labels-manifest allow-privileged
anonymous-auth api-audiences apiserver-count audit-log-batch-buffer-size audit-log-batch-max-size
audit-log-batch-max-wait audit-log-batch-throttle-burst audit-log-batch-throttle-enable audit-log-batch-throttle-qps
audit-log-compress audit-log-format audit-log-maxage audit-log-maxbackup audit-log-maxsize audit-log-mode
audit-log-path audit-log-truncate-enabled audit-log-truncate-max-batch-size audit-log-truncate-max-event-size
audit-log-version audit-policy-file audit-webhook-batch-buffer-size audit-webhook-batch-max-size
audit-webhook-batch-max-wait audit-webhook-batch-throttle-burst audit-webhook-batch-throttle-enable
audit-webhook-batch-throttle-qps audit-webhook-config-file audit-webhook-initial-backoff audit-webhook-mode
audit-webhook-truncate-enabled audit-webhook-truncate-max-batch-size audit-webhook-truncate-max-event-size
audit-webhook-version authentication-config authentication-token-webhook-cache-ttl
authentication-token-webhook-config-file authentication-token-webhook-version authorization-config
authorization-mode authorization-policy-file authorization-webhook-cache-authorized-ttl
authorization-webhook-cache-unauthorized-ttl authorization-webhook-config-file authorization-webhook-version
bind-address cert-dir client-ca-file contention-profiling cors-allowed-origins debug-socket-path
default-not-ready-toleration-seconds default-unreachable-toleration-seconds default-watch-cache-size
delete-collection-workers disable-admission-plugins disable-http2-serving disabled-metrics
egress-selector-config-file emulated-version enable-admission-plugins enable-aggregator-routing
enable-bootstrap-token-auth enable-garbage-collector enable-priority-and-fairness encryption-provider-config
encryption-provider-config-automatic-reload endpoint-reconciler-type etcd-cafile etcd-certfile
etcd-compaction-interval etcd-count-metric-poll-period etcd-db-metric-poll-interval etcd-healthcheck-timeout
etcd-keyfile etcd-prefix etcd-readycheck-timeout etcd-servers etcd-servers-overrides event-ttl external-hostname
feature-gates goaway-chance help http2-max-streams-per-connection kubelet-certificate-authority
kubelet-client-certificate kubelet-client-key kubelet-preferred-address-types kubelet-timeout
kubernetes-service-node-port lease-reuse-duration-seconds livez-grace-period max-connection-bytes-per-sec
max-mutating-requests-inflight max-requests-inflight min-request-timeout oidc-ca-file oidc-client-id
oidc-groups-claim oidc-groups-prefix oidc-issuer-url oidc-required-claim oidc-signing-algs oidc-username-claim
oidc-username-prefix peer-advertise-ip peer-advertise-port peer-ca-file permit-address-sharing
permit-port-sharing profiling proxy-client-cert-file proxy-client-key-file request-timeout
requestheader-allowed-names requestheader-client-ca-file requestheader-extra-headers-prefix
requestheader-group-headers requestheader-username-headers runtime-config secure-port
service-account-extend-token-expiration service-account-issuer service-account-jwks-uri
service-account-key-file service-account-lookup service-account-max-token-expiration
service-account-signing-key-file service-cluster-ip-range service-node-port-range
show-hidden-metrics-for-version shutdown-delay-duration shutdown-send-retry-after
shutdown-watch-termination-grace-period storage-backend storage-media-type
strict-transport-security-directives tls-cert-file tls-cipher-suites tls-min-version tls-private-key-file
tls-sni-cert-key token-auth-file tracing-config-file version watch-cache watch-cache-sizes allow-metric-labels"""

_CONTROLLER_MANAGER = """allocate-node-cidrs attach-detach-reconcile-sync-period cidr-allocator-type cloud-config
cloud-provider cluster-cidr cluster-name cluster-signing-cert-file cluster-signing-duration cluster-signing-key-file
cluster-signing-kube-apiserver-client-cert-file cluster-signing-kube-apiserver-client-key-file
cluster-signing-kubelet-client-cert-file cluster-signing-kubelet-client-key-file
cluster-signing-kubelet-serving-cert-file cluster-signing-kubelet-serving-key-file
cluster-signing-legacy-unknown-cert-file cluster-signing-legacy-unknown-key-file concurrent-cron-job-syncs
concurrent-daemonset-syncs concurrent-deployment-syncs concurrent-endpoint-syncs concurrent-gc-syncs
concurrent-horizontal-pod-autoscaler-syncs concurrent-job-syncs concurrent-namespace-syncs concurrent-rc-syncs
concurrent-replicaset-syncs concurrent-resource-quota-syncs concurrent-service-endpoint-syncs
concurrent-service-syncs concurrent-serviceaccount-token-syncs concurrent-statefulset-syncs
concurrent-ttl-after-finished-syncs configure-cloud-routes controller-start-interval controllers
disable-attach-detach-reconcile-sync enable-dynamic-provisioning enable-garbage-collector
enable-hostpath-provisioner enable-leader-migration endpoint-updates-batch-period
endpointslice-updates-batch-period external-cloud-volume-plugin flex-volume-plugin-dir
horizontal-pod-autoscaler-cpu-initialization-period horizontal-pod-autoscaler-downscale-stabilization
horizontal-pod-autoscaler-initial-readiness-delay horizontal-pod-autoscaler-sync-period
horizontal-pod-autoscaler-tolerance kube-api-burst kube-api-content-type kube-api-qps
large-cluster-size-threshold leader-migration-config legacy-service-account-token-clean-up-period
max-endpoints-per-slice min-resync-period mirroring-concurrent-service-endpoint-syncs
mirroring-endpointslice-updates-batch-period mirroring-max-endpoints-per-subset namespace-sync-period
node-cidr-mask-size node-cidr-mask-size-ipv4 node-cidr-mask-size-ipv6 node-eviction-rate
node-monitor-grace-period node-monitor-period node-startup-grace-period pvclaimbinder-sync-period
resource-quota-sync-period root-ca-file route-reconciliation-period secondary-node-eviction-rate
service-account-private-key-file service-cluster-ip-range terminated-pod-gc-threshold unhealthy-zone-threshold
use-service-account-credentials"""

_SCHEDULER = "config write-config-to pod-max-in-unschedulable-pods-duration"
# Marked "DEPRECATED: ... This parameter is ignored if a config file is specified in --config"
# (kubernetes cmd/kube-scheduler/app/options/deprecated.go). BKE renders the scheduler without
# --config, so they still take effect; kubeadm renders --kubeconfig the same way.
_SCHEDULER_DEPRECATED = "contention-profiling kube-api-burst kube-api-content-type kube-api-qps kubeconfig lock-object-name lock-object-namespace profiling"

_KUBELET = """bootstrap-kubeconfig cert-dir config config-dir exit-on-lock-contention fail-cgroupv1 hostname-override
image-credential-provider-bin-dir image-credential-provider-config kubeconfig lock-file node-ip node-labels
root-dir feature-gates help version"""
# Flags whose value belongs in the KubeletConfiguration file: each is marked "DEPRECATED: This
# parameter should be set via the config file specified by the Kubelet's --config flag".
_KUBELET_CONFIG_FLAGS = """address anonymous-auth authentication-token-webhook authentication-token-webhook-cache-ttl
authorization-mode authorization-webhook-cache-authorized-ttl authorization-webhook-cache-unauthorized-ttl
cgroup-driver cgroup-root cgroups-per-qos client-ca-file cluster-dns cluster-domain container-log-max-files
container-log-max-size container-runtime-endpoint cpu-cfs-quota cpu-cfs-quota-period cpu-manager-policy
cpu-manager-reconcile-period enforce-node-allocatable event-burst event-qps eviction-hard
eviction-max-pod-grace-period eviction-minimum-reclaim eviction-pressure-transition-period eviction-soft
eviction-soft-grace-period fail-swap-on file-check-frequency hairpin-mode healthz-bind-address healthz-port
http-check-frequency image-gc-high-threshold image-gc-low-threshold image-service-endpoint kube-api-burst
kube-api-content-type kube-api-qps kube-reserved kube-reserved-cgroup kubelet-cgroups
make-iptables-util-chains max-open-files max-pods memory-manager-policy node-status-max-images
node-status-update-frequency oom-score-adj pod-cidr pod-manifest-path pod-max-pids pods-per-core port
protect-kernel-defaults provider-id read-only-port register-node register-with-taints registry-burst
registry-qps reserved-cpus reserved-memory resolv-conf rotate-certificates rotate-server-certificates
runtime-request-timeout seccomp-default serialize-image-pulls streaming-connection-idle-timeout
sync-frequency system-reserved system-reserved-cgroup tls-cert-file tls-cipher-suites tls-min-version
tls-private-key-file topology-manager-policy topology-manager-scope volume-plugin-dir volume-stats-agg-period"""
_KUBELET_OTHER_DEPRECATED = "cloud-provider minimum-container-ttl-duration maximum-dead-containers maximum-dead-containers-per-container runtime-cgroups"

_DOCKERSHIM = "network-plugin cni-bin-dir cni-conf-dir cni-cache-dir docker-endpoint image-pull-progress-deadline network-plugin-mtu"


def _names(text: str) -> list[str]:
    return text.split()


def _base(component: str, *lists: str, deprecated: str | None = None, source: str = "") -> list[Flag]:
    src = source or _REF.format(c=component)
    return [Flag(component, n, src, deprecated=deprecated) for text in lists for n in _names(text)]


def _gone(component: str, names: str, removed: str, source: str, *, deprecated: str | None = None, instead: str = "") -> list[Flag]:
    return [Flag(component, n, source, removed=removed, deprecated=deprecated, instead=instead) for n in _names(names)]


_K8S = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")

_KUBERNETES: list[Flag] = [
    *_base("kube-apiserver", _APISERVER, _LOGS),
    *_base("kube-controller-manager", _CONTROLLER_MANAGER, _SERVING, _DELEGATED, _LEADER, _COMMON, _LOGS),
    *_base("kube-scheduler", _SCHEDULER, _SERVING, _DELEGATED, _LEADER, _LOGS,
           "disabled-metrics feature-gates help master show-hidden-metrics-for-version version allow-metric-labels"),
    *_base("kube-scheduler", _SCHEDULER_DEPRECATED, deprecated="<1.31",
           source="kubernetes cmd/kube-scheduler/app/options/deprecated.go (help text: DEPRECATED, ignored with --config)"),
    *_base("kubelet", _KUBELET, _LOGS),
    *_base("kubelet", _KUBELET_CONFIG_FLAGS, deprecated=_CONFIG_FILE,
           source="kubernetes/website command-line-tools-reference/kubelet.md: 'should be set via the config file'"),
    *_base("kubelet", _KUBELET_OTHER_DEPRECATED, deprecated="<1.31", source=_REF.format(c="kubelet") + " (marked DEPRECATED)"),
    # Changes inside and just before the supported range, each with its upstream record.
    *_gone("kube-apiserver", "cloud-provider cloud-config", "1.33",
           "kubernetes PR 130162 (removed in 1.33, CHANGELOG-1.33); deprecated in 1.29 by PR 120903", deprecated="1.29"),
    *_gone("kube-apiserver", "insecure-port insecure-bind-address port address", "1.24",
           "kubernetes PR 95856 (1.20: insecure serving gone, flags 'will be removed in v1.24'); removed in 1.24", instead="--secure-port"),
    *_gone("kube-apiserver", "kubelet-https", "1.22", "kubernetes PR 101178 (removed in 1.22; deprecated in 1.19 by PR 91630)"),
    *_gone("kube-controller-manager", "horizontal-pod-autoscaler-upscale-delay horizontal-pod-autoscaler-downscale-delay", "1.31",
           "kubernetes PR 124948 (release-1.31 notes: removed, non-functional since 1.12)",
           instead="--horizontal-pod-autoscaler-downscale-stabilization"),
    *_gone("kube-controller-manager", "address port", "1.24", "insecure serving removed in 1.24 (kubernetes/kubeadm#2207)", instead="--bind-address, --secure-port"),
    *_gone("kube-scheduler", "address port", "1.24", "cmd/kube-scheduler/app/options/deprecated.go: 'will be removed in v1.24'", instead="--bind-address, --secure-port"),
    *_gone("kube-scheduler", "hard-pod-affinity-symmetric-weight scheduler-name", "1.22", "kubernetes PR 102805 (removed in 1.22)", instead="--config"),
    *_gone("kube-scheduler", "policy-config-file policy-configmap policy-configmap-namespace use-legacy-policy-config", "1.23",
           "scheduler Policy API removed in 1.23 (CHANGELOG-1.23)", instead="--config"),
    *_gone("kubelet", "pod-infra-container-image", "1.35",
           "kubernetes PR 133779 (removed in 1.35, CHANGELOG-1.35 'no, really, you must read this'); deprecated by PR 108045",
           deprecated="<1.31", instead="the runtime's sandbox image (containerRuntime.sandboxImage)"),
    *_gone("kubelet", "keep-terminated-pod-volumes", "1.31", "kubernetes PR 122082 (removed in 1.31)"),
    *_gone("kubelet", "container-runtime", "1.27", "kubernetes PR 114017 (removed in 1.27; deprecated by PR 107094)", instead="--container-runtime-endpoint"),
    *_gone("kubelet", _DOCKERSHIM, "1.24", "dockershim and its flags removed in 1.24 (KEP-2221)"),
    *_gone("kubelet", "azure-container-registry-config", "1.30", "deprecated by kubernetes PR 118596 (1.28); gone in 1.30 (kubelet 1.30: 'unknown flag', Azure/karpenter-provider-azure PR 338)",
           instead="--image-credential-provider-config"),
    *(f for c in _K8S for f in _gone(c, _KLOG_REMOVED, "1.26", _KLOG_SRC)),
]

_ETCD_SRC = "etcd-io/etcd server/etcdmain/config.go, server/embed/config.go at every v3.5.x and v3.6.x tag"


def _e(name: str, *, since: str | None = None, removed: str | None = None, deprecated: str | None = None) -> Flag:
    return Flag("etcd", name, _ETCD_SRC, since=since, removed=removed, deprecated=deprecated)


# Every flag present from 3.5.0 through the newest 3.6 release. (snapshot-count was in 3.6's
# deprecatedFlags map for 3.6.0-3.6.7 and left it in 3.6.8: not marked deprecated here.)

_ETCD_ALL = """
advertise-client-urls auth-token auth-token-ttl auto-compaction-mode auto-compaction-retention
auto-tls backend-batch-interval backend-batch-limit backend-bbolt-freelist-type bcrypt-cost
cert-file cipher-suites client-cert-allowed-hostname client-cert-auth client-cert-file
client-crl-file client-key-file config-file cors data-dir discovery discovery-fallback
discovery-proxy discovery-srv discovery-srv-name election-timeout enable-grpc-gateway
enable-log-rotation enable-pprof experimental-enable-lease-checkpoint
experimental-initial-corrupt-check experimental-peer-skip-client-san-verification force-new-cluster
grpc-keepalive-interval grpc-keepalive-min-time grpc-keepalive-timeout heartbeat-interval
host-whitelist initial-advertise-peer-urls initial-cluster initial-cluster-state
initial-cluster-token initial-election-tick-advance key-file listen-client-urls listen-metrics-urls
listen-peer-urls log-level log-outputs log-rotation-config-json logger max-request-bytes
max-txn-ops max-wals metrics name peer-auto-tls peer-cert-allowed-cn peer-cert-allowed-hostname
peer-cert-file peer-client-cert-auth peer-client-cert-file peer-client-key-file peer-crl-file
peer-key-file peer-trusted-ca-file pre-vote quota-backend-bytes raft-read-timeout
raft-write-timeout self-signed-cert-validity socket-reuse-address socket-reuse-port
strict-reconfig-check trusted-ca-file unsafe-no-fsync version wal-dir
"""
# What changed between 3.5.0 and the newest 3.6 release, by what changed: most of 3.6's changes
# came in 3.6.0 itself (new names for the experimental-* flags, the v2 API and the proxy gone).
_ETCD_SINCE_36 = """
bootstrap-defrag-threshold-megabytes compact-hash-check-time compaction-batch-limit
compaction-sleep-interval corrupt-check-time discovery-cacert discovery-cert discovery-dial-timeout
discovery-endpoints discovery-insecure-skip-tls-verify discovery-insecure-transport
discovery-keepalive-time discovery-keepalive-timeout discovery-key discovery-password
discovery-request-timeout discovery-token discovery-user distributed-tracing-address
distributed-tracing-instance-id distributed-tracing-sampling-rate distributed-tracing-service-name
downgrade-check-time enable-distributed-tracing experimental-warning-unary-request-duration
feature-gates log-format max-learners memory-mlock peer-skip-client-san-verification
snapshot-catchup-entries warning-apply-duration warning-unary-request-duration
watch-progress-notify-interval
"""
_ETCD_DEPRECATED_36 = """
experimental-bootstrap-defrag-threshold-megabytes experimental-compaction-batch-limit
experimental-corrupt-check-time experimental-distributed-tracing-address
experimental-distributed-tracing-instance-id experimental-distributed-tracing-service-name
experimental-downgrade-check-time experimental-enable-distributed-tracing experimental-memory-mlock
experimental-txn-mode-write-with-shared-buffer experimental-warning-apply-duration
experimental-watch-progress-notify-interval max-snapshots v2-deprecation
"""
_ETCD_REMOVED_36 = """
enable-v2 experimental-enable-v2v3 proxy proxy-dial-timeout proxy-failure-wait proxy-read-timeout
proxy-refresh-interval proxy-write-timeout
"""
# the flags added during 3.5 (and some deprecated in 3.6.0 again), one by one
_ETCD_OTHER_CHANGES = (
    _e('experimental-compact-hash-check-enabled', since='3.5.5', deprecated='3.6.0'),
    _e('experimental-compact-hash-check-time', since='3.5.5', deprecated='3.6.0'),
    _e('experimental-compaction-sleep-interval', since='3.5.16', deprecated='3.6.0'),
    _e('experimental-distributed-tracing-sampling-rate', since='3.5.11', deprecated='3.6.0'),
    _e('experimental-enable-lease-checkpoint-persist', since='3.5.2'),
    _e('experimental-snapshot-catchup-entries', since='3.5.14', deprecated='3.6.0'),
    _e('experimental-stop-grpc-service-on-defrag', since='3.5.14'),
    _e('listen-client-http-urls', since='3.5.8'),
    _e('max-concurrent-streams', since='3.5.5'),
    _e('snapshot-count'),
    _e('tls-max-version', since='3.5.8'),
    _e('tls-min-version', since='3.5.8'),
)
_ETCD_CHANGES = tuple(sorted((
    *(_e(n, since='3.6.0') for n in _names(_ETCD_SINCE_36)),
    *(_e(n, deprecated='3.6.0') for n in _names(_ETCD_DEPRECATED_36)),
    *(_e(n, removed='3.6.0') for n in _names(_ETCD_REMOVED_36)),
    *_ETCD_OTHER_CHANGES,
), key=lambda f: f.name))

FLAGS: tuple[Flag, ...] = (*_KUBERNETES, *(_e(n) for n in _names(_ETCD_ALL)), *_ETCD_CHANGES)

FLAG_INDEX: dict[tuple[str, str], tuple[Flag, ...]] = {}
for _f in FLAGS:
    FLAG_INDEX[(_f.component, _f.name)] = FLAG_INDEX.get((_f.component, _f.name), ()) + (_f,)
