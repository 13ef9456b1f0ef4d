"""Getting ``bke-agent`` onto real nodes: over SSH with a verified host key, or by a one-line installer.

* :mod:`.plan` - the bootstrap as a data table of steps (argv + uploads), shared by every path;
* :mod:`.files` - the systemd unit (template) and the agent's environment file;
* :mod:`.hostkeys` - host-key policy (known_hosts or pinned SHA256 fingerprint) and the decision;
* :mod:`.client` - the asyncssh adapter: public-key auth only, host key verified before auth;
* :mod:`.bootstrap` - runs the table on nodes with bounded concurrency; dry-run text;
* :mod:`.installer` - the same table as one shell line for nodes the operator prepares;
* :mod:`.wheel` - builds the project's wheel that the node installs.

Nothing here prints; the CLI (``bke agent bootstrap``) does.
"""
from .bootstrap import (
    NodeOutcome,
    RemoteSession,
    bootstrap_node,
    bootstrap_nodes,
    describe_steps,
    steps_markdown,
)
from .client import (
    RunResult,
    SshOptions,
    SshSession,
    SshTarget,
    expectation_for,
    load_identity,
    open_session,
    policy_problems,
)
from .errors import (
    HostKeyRefused,
    SshAuthRefused,
    SshUnreachable,
    StepFailed,
    UploadFailed,
)
from .files import (
    AGENT_RUN_ARGS,
    AgentFiles,
    UnitParams,
    render_env,
    render_unit,
    validate_name,
    validate_nats_url,
)
from .hostkeys import (
    Expectation,
    HostKeyDecision,
    HostKeyPolicy,
    KnownHostsPolicy,
    PinnedPolicy,
    SeenKey,
    decide_host_key,
    normalize_fingerprint,
    policy_from_options,
)
from .installer import installer_files, installer_line
from .layout import (
    AGENT_BIN,
    LAUNCHER_BIN,
    AGENT_PREFIX,
    CONFIG_DIR,
    ENV_PATH,
    PYTHON_PREFIX,
    STAGING_DIR,
    UNIT_NAME,
    UNIT_PATH,
)
from .plan import (
    SUDO,
    BootstrapParams,
    Inline,
    LocalFile,
    Step,
    Upload,
    bootstrap_steps,
    remote_command,
)
from .standalone import PYTHON_BIN, PYTHON_MODES, StandaloneSource, standalone_source
from .wheel import WheelBuildError, build_wheel, expected_wheel_name, project_root

__all__ = [
    "AGENT_BIN",
    "LAUNCHER_BIN",
    "AGENT_PREFIX",
    "AGENT_RUN_ARGS",
    "CONFIG_DIR",
    "ENV_PATH",
    "PYTHON_BIN",
    "PYTHON_MODES",
    "PYTHON_PREFIX",
    "STAGING_DIR",
    "SUDO",
    "UNIT_NAME",
    "UNIT_PATH",
    "AgentFiles",
    "BootstrapParams",
    "Expectation",
    "HostKeyDecision",
    "HostKeyPolicy",
    "HostKeyRefused",
    "Inline",
    "KnownHostsPolicy",
    "LocalFile",
    "NodeOutcome",
    "PinnedPolicy",
    "RemoteSession",
    "RunResult",
    "SeenKey",
    "SshAuthRefused",
    "SshOptions",
    "SshSession",
    "SshTarget",
    "SshUnreachable",
    "StandaloneSource",
    "Step",
    "StepFailed",
    "UnitParams",
    "Upload",
    "UploadFailed",
    "WheelBuildError",
    "bootstrap_node",
    "bootstrap_nodes",
    "bootstrap_steps",
    "build_wheel",
    "decide_host_key",
    "describe_steps",
    "expectation_for",
    "expected_wheel_name",
    "installer_files",
    "installer_line",
    "load_identity",
    "normalize_fingerprint",
    "open_session",
    "policy_from_options",
    "policy_problems",
    "project_root",
    "remote_command",
    "render_env",
    "render_unit",
    "standalone_source",
    "steps_markdown",
    "validate_name",
    "validate_nats_url",
]
