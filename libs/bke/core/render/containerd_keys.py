"""The keys containerd 2.x accepts in a version-3 config.toml, for the sections BKE renders.

Why a table of our own: containerd decodes each section into a Go struct and ignores any key the
struct lacks, so a misspelt key (`SystemdCgroups`, a 1.7 key left in a 2.x file) would start a
node with the default instead, silently. Debian ships containerd 1.6, which knows no version 3,
so no real program here can check this form. `v3_key_problems` walks a parsed config and names
every key that is not in the table below.

Sources (containerd/containerd, tags v2.0.0, v2.1.0 and v2.2.0; docs/cri/config.md shows the
same sections):
- top level and [grpc]: cmd/containerd/server/config/config.go, `Config` and `GRPCConfig`;
- [plugins."io.containerd.cri.v1.images"]: internal/cri/config/config.go, `ImageConfig` with its
  `Registry`; `pinned_images` is a map of which the CRI reads the key `sandbox`;
- [plugins."io.containerd.cri.v1.runtime"]: the same file, `RuntimeConfig`, `ContainerdConfig`
  and `Runtime`; the runc runtime's `options` decode into `Options` of
  api/types/runc/options/oci.pb.go (the CRI's GenerateRuntimeOptions, go-toml v2).

The table holds the keys all three minors accept (one template serves every 2.x): keys added
later (for example `cgroup_writable` in 2.1, `use_local_image_pull` in 2.1) are left out, and so
is `plugin_dir`, gone in 2.1. go-toml also matches a runc option case-insensitively; we require
upstream's exact spelling. A section we do not describe is an error too: describe it here, from
the source, before a template renders it.
"""
from __future__ import annotations

from typing import Any

__all__ = ["IMAGES", "RUNTIME", "V3_SECTIONS", "v3_key_problems"]

IMAGES = "io.containerd.cri.v1.images"
RUNTIME = "io.containerd.cri.v1.runtime"
ANY = "*"  # a map whose keys are names the user chooses (runtime names)

V3_SECTIONS: dict[tuple[str, ...], frozenset[str]] = {
    (): frozenset({
        "version", "root", "state", "temp", "grpc", "ttrpc", "debug", "metrics", "disabled_plugins",
        "required_plugins", "plugins", "oom_score", "cgroup", "proxy_plugins", "timeouts", "imports",
        "stream_processors",
    }),
    ("grpc",): frozenset({
        "address", "tcp_address", "tcp_tls_ca", "tcp_tls_cert", "tcp_tls_key", "uid", "gid",
        "max_recv_message_size", "max_send_message_size",
    }),
    # Only the CRI plugins we configure; another plugin's section needs its own rows.
    ("plugins",): frozenset({IMAGES, RUNTIME}),
    ("plugins", IMAGES): frozenset({
        "snapshotter", "disable_snapshot_annotations", "discard_unpacked_layers", "pinned_images",
        "runtime_platforms", "registry", "image_decryption", "max_concurrent_downloads",
        "image_pull_progress_timeout", "image_pull_with_sync_fs", "stats_collect_period",
    }),
    ("plugins", IMAGES, "pinned_images"): frozenset({"sandbox"}),
    ("plugins", IMAGES, "registry"): frozenset({"config_path", "mirrors", "configs", "auths", "headers"}),
    ("plugins", RUNTIME): frozenset({
        "containerd", "cni", "enable_selinux", "selinux_category_range", "max_container_log_line_size",
        "disable_apparmor", "restrict_oom_score_adj", "disable_proc_mount", "unset_seccomp_profile",
        "tolerate_missing_hugetlb_controller", "disable_hugetlb_controller",
        "device_ownership_from_security_context", "ignore_image_defined_volumes",
        "netns_mounts_under_state_dir", "enable_unprivileged_ports", "enable_unprivileged_icmp",
        "enable_cdi", "cdi_spec_dirs", "drain_exec_sync_io_timeout", "ignore_deprecation_warnings",
    }),
    ("plugins", RUNTIME, "containerd"): frozenset({
        "default_runtime_name", "runtimes", "ignore_blockio_not_enabled_errors", "ignore_rdt_not_enabled_errors",
    }),
    ("plugins", RUNTIME, "containerd", "runtimes"): frozenset({ANY}),
    ("plugins", RUNTIME, "containerd", "runtimes", ANY): frozenset({
        "runtime_type", "runtime_path", "pod_annotations", "container_annotations", "options",
        "privileged_without_host_devices", "privileged_without_host_devices_all_devices_allowed",
        "base_runtime_spec", "cni_conf_dir", "cni_max_conf_num", "snapshotter", "sandboxer", "io_type",
    }),
    # The runc shim's options (runtime_type io.containerd.runc.v2, the only one we render).
    ("plugins", RUNTIME, "containerd", "runtimes", ANY, "options"): frozenset({
        "NoPivotRoot", "NoNewKeyring", "ShimCgroup", "IoUid", "IoGid", "BinaryName", "Root",
        "SystemdCgroup", "CriuImagePath", "CriuWorkPath", "TaskApiAddress", "TaskApiVersion",
    }),
}


def _section(path: tuple[str, ...]) -> frozenset[str] | None:
    """The row for a concrete path; a runtime's name matches the ANY row."""
    for pattern, keys in V3_SECTIONS.items():
        if len(pattern) == len(path) and all(p in (ANY, q) for p, q in zip(pattern, path, strict=True)):
            return keys
    return None


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(f'"{p}"' if "." in p else p for p in path)


def v3_key_problems(data: dict[str, Any], path: tuple[str, ...] = ()) -> list[str]:
    """Every key of a parsed version-3 config.toml that containerd 2.x would not read."""
    keys = _section(path)
    if keys is None:
        return [f"[{_dotted(path)}] is a section this check does not describe (add its keys, cited, to V3_SECTIONS)"]
    problems = []
    for key, value in data.items():
        here = (*path, key)
        if ANY not in keys and key not in keys:
            problems.append(f"{_dotted(here)}: containerd 2.x has no such key in [{_dotted(path) or 'top level'}]")
        elif isinstance(value, dict):
            problems += v3_key_problems(value, here)
    return problems
