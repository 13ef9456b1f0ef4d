"""The pure domain: the spec, the plan, rendering, the PKI, upgrade and lifecycle decisions, the
flag rules and the data tables. No network, no Redis, no NATS, no Kubernetes client: the
import-linter contract "core imports no I/O library" holds that, and the layers contract keeps
core below the adapters and above the contracts."""
