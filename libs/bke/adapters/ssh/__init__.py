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
# The package's surface is its modules' own: each names what it offers in its `__all__` once,
# and every module but two is re-exported whole (layout and standalone keep helpers of their own).
from . import bootstrap, client, errors, files, hostkeys, installer, plan, wheel
from .bootstrap import *  # noqa: F403
from .client import *  # noqa: F403
from .errors import *  # noqa: F403
from .files import *  # noqa: F403
from .hostkeys import *  # noqa: F403
from .installer import *  # noqa: F403
from .layout import AGENT_BIN, AGENT_PREFIX, CONFIG_DIR, ENV_PATH, LAUNCHER_BIN, PYTHON_PREFIX, STAGING_DIR, UNIT_NAME, UNIT_PATH
from .plan import *  # noqa: F403
from .standalone import PYTHON_BIN, PYTHON_MODES, StandaloneSource, standalone_source
from .wheel import *  # noqa: F403

__all__ = [
    "AGENT_BIN", "AGENT_PREFIX", "CONFIG_DIR", "ENV_PATH", "LAUNCHER_BIN", "PYTHON_PREFIX", "STAGING_DIR", "UNIT_NAME",
    "UNIT_PATH", "PYTHON_BIN", "PYTHON_MODES", "StandaloneSource", "standalone_source",
]
__all__ += bootstrap.__all__
__all__ += client.__all__
__all__ += errors.__all__
__all__ += files.__all__
__all__ += hostkeys.__all__
__all__ += installer.__all__
__all__ += plan.__all__
__all__ += wheel.__all__
