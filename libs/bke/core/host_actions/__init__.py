"""What a signed command may do to a node, beyond being signed: limits by kind of command.

* :mod:`.table` - HOST_ACTIONS: which command kinds may write units, binaries, static pod
  manifests, scripts, kernel settings and configuration (and where), remove which files, run
  which programs, drive which units, replace the agent, carry which other step types;
* :mod:`.origins` - the kind agrees with the operation the command's id names;
* :mod:`.programs` - the arguments of programs whose options run other programs (modprobe, sysctl);
* :mod:`.endpoints` - the URLs a health probe asks, the TLS files it reads, the CA it verifies with;
* :mod:`.kubeconfigs` - kubeconfigs carry credentials, never an exec plugin or auth provider;
* :mod:`.check` - `command_refusal`, what the agent checks on every command before it runs.

Shared by the agent (which enforces it), the renderer and certs (which check what they make)
and the tests that hold the table against what the dispatcher and the upgrader send.
"""
from .check import command_refusal, step_refusal
from .endpoints import HEALTH_ENDPOINTS, health_url_refusal, serving_ca, tls_refusal
from .kubeconfigs import is_kubeconfig_path, kubeconfig_problems, kubeconfig_refusal
from .origins import ORIGINS, origin_refusal
from .programs import PROGRAM_ARGS, program_args_refusal
from .table import FILE_CLASSES, HOST_ACTIONS, HostAction, allowed, command_kind, file_class, kinds_allowed

__all__ = [
    "FILE_CLASSES",
    "HEALTH_ENDPOINTS",
    "HOST_ACTIONS",
    "HostAction",
    "ORIGINS",
    "PROGRAM_ARGS",
    "allowed",
    "command_kind",
    "command_refusal",
    "file_class",
    "health_url_refusal",
    "is_kubeconfig_path",
    "kinds_allowed",
    "kubeconfig_problems",
    "kubeconfig_refusal",
    "origin_refusal",
    "program_args_refusal",
    "serving_ca",
    "step_refusal",
    "tls_refusal",
]
