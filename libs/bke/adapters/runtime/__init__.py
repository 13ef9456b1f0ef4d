"""Local server runtime: real NATS, Redis and etcd from venv binaries, managed by PID.

Used by integration tests (fixtures in tests/conftest.py) and by the lab (``bke lab``), so that
both run against the same real servers without Docker.

Error tree (what a caller should do):

    FileNotFoundError
     └─ MissingBinaryError      pip package missing: fix the venv, never retry
    RuntimeError
     ├─ ProcessExitedError      server died while starting: read the log tail in the message
     └─ EtcdRequestError        etcd KV call failed: URL and cause in the message
    TimeoutError
     └─ ReadinessTimeout        server not ready at the deadline: last probe failure in the message
         └─ EtcdUnhealthyError
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from bke.core.lazy_exports import load_export

if TYPE_CHECKING:
    from .binaries import MissingBinaryError, etcd_bin, etcdctl_bin, etcdutl_bin, nats_server_bin, redis_server_bin
    from .embedded import EmbeddedRuntime, RuntimeInfo
    from .etcd import (
        EtcdRequestError,
        EtcdUnhealthyError,
        etcd_put_get,
        mtls_context,
        start_etcd,
        wait_etcd_healthy,
    )
    from .processes import (
        ManagedProcess,
        ProcessExitedError,
        ReadinessTimeout,
        free_port,
        pid_alive,
        pid_cwd,
        poll_until,
        port_is_free,
        retry_start,
        reuse_if_answering,
        stop_pid,
        wait_tcp,
    )

# Lazy (see `bke.core.lazy_exports`): the node agent imports `bke.adapters.runtime.processes` and must not load
# redis, which `bke.adapters.runtime.embedded` needs.
_EXPORTS = {
    **dict.fromkeys(("MissingBinaryError", "etcd_bin", "etcdctl_bin", "etcdutl_bin", "nats_server_bin", "redis_server_bin"), "binaries"),
    **dict.fromkeys(("EmbeddedRuntime", "RuntimeInfo"), "embedded"),
    **dict.fromkeys(("EtcdRequestError", "EtcdUnhealthyError", "etcd_put_get", "mtls_context", "start_etcd",
                     "wait_etcd_healthy"), "etcd"),
    **dict.fromkeys(("ManagedProcess", "ProcessExitedError", "ReadinessTimeout", "free_port", "pid_alive", "pid_cwd",
                     "poll_until", "port_is_free", "retry_start", "reuse_if_answering", "stop_pid", "wait_tcp"),
                    "processes"),
}

__all__ = [
    "EmbeddedRuntime",
    "EtcdRequestError",
    "EtcdUnhealthyError",
    "ManagedProcess",
    "MissingBinaryError",
    "ProcessExitedError",
    "ReadinessTimeout",
    "RuntimeInfo",
    "etcd_bin",
    "etcd_put_get",
    "etcdctl_bin",
    "etcdutl_bin",
    "free_port",
    "mtls_context",
    "nats_server_bin",
    "pid_alive",
    "pid_cwd",
    "poll_until",
    "port_is_free",
    "redis_server_bin",
    "retry_start",
    "reuse_if_answering",
    "start_etcd",
    "stop_pid",
    "wait_etcd_healthy",
    "wait_tcp",
]


def __getattr__(name: str) -> object:
    return load_export(__name__, _EXPORTS, name)
