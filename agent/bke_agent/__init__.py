"""`bke-agent`: runs the dispatcher's commands on one node, exactly once in effect.

Public surface (see each module's docstring for the why):
    AgentSettings                    settings (BKE_AGENT_*, BKE_NATS_URL)
    AgentIdentity                    the X25519 key pair; agent_id = its fingerprint
    DiskJournal, MemoryJournal       stored results + executions log; read_executions()
    DiskServed, MemoryServed         the newest cluster incarnation taken (command binding)
    Executor                         timeouts, retries, truncation, stop at first failure
    AgentLoop, Fleet                 one agent's consumer loop; many on one connection
    HostBackend, LabBackend, NullBackend, make_backend
    KubeletStandIn, LabLayout        the lab's kubelet and its files
"""
from .backends import Backend, HostBackend, LabBackend, NullBackend, StepOutcome, make_backend
from .binding import DiskServed, MemoryServed
from .errors import PathRefused, PermanentStepError, StepError
from .executor import Executor, clip
from .fleet import Fleet
from .identity import AgentIdentity
from .journal import DiskJournal, ExecutionRecord, Journal, MemoryJournal, execution_counts, read_executions
from .kubelet import KubeletStandIn
from .lablayout import LabLayout
from .loop import AgentConflict, AgentLoop, consumer_config, consumer_name
from .settings import AgentSettings

__all__ = [
    "AgentConflict",
    "AgentIdentity",
    "AgentLoop",
    "AgentSettings",
    "Backend",
    "DiskJournal",
    "DiskServed",
    "ExecutionRecord",
    "Executor",
    "Fleet",
    "HostBackend",
    "Journal",
    "KubeletStandIn",
    "LabBackend",
    "LabLayout",
    "MemoryJournal",
    "MemoryServed",
    "NullBackend",
    "PathRefused",
    "PermanentStepError",
    "StepError",
    "StepOutcome",
    "clip",
    "consumer_config",
    "consumer_name",
    "execution_counts",
    "make_backend",
    "read_executions",
]
