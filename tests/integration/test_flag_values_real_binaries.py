"""Flags and values at plan time against the real binaries of every built Kubernetes release:
what the plan refuses, the component refuses too, and what the plan accepts, it takes. The
binaries parse their flags before `--version` answers, so `<binary> --flag=value --version` is
the component's own verdict on the value, without starting it.

The type table itself is generated from these binaries' `--help` (bke.lab.flag_types): a drift
test here fails when it differs."""
from __future__ import annotations

import subprocess

import pytest

from bke.core.flagrules.value_check import value_problem
from bke.lab import flag_types
from bke.lab.kube_binaries import BUILDS, locate
from bke.core.versions import parse_version

from ..e2e.real_cp_helpers import need_binaries

pytestmark = pytest.mark.integration
RELEASES = [b.version for b in BUILDS if b.name == "kubernetes"]
# (component, flag, a value the component refuses, one it takes)
CASES = [
    ("kubelet", "max-pods", "110 --anonymous-auth=true", "110"),
    ("kubelet", "eviction-hard", "memory.available", "memory.available<100Mi,nodefs.available<10%"),
    ("kubelet", "node-status-update-frequency", "10", "10s"),
    ("kubelet", "system-reserved", "cpu", "cpu=500m,memory=1Gi"),
    ("kube-apiserver", "request-timeout", "5 minutes", "5m"),
    ("kube-apiserver", "anonymous-auth", "yes", "false"),
    ("kube-apiserver", "max-requests-inflight", "800;", "800"),
    ("kube-apiserver", "goaway-chance", "one in a thousand", "0.001"),
    ("kube-apiserver", "advertise-address", "10.0.0.300", "10.0.0.3"),
    ("kube-controller-manager", "kube-api-qps", "20x", "20"),
    ("kube-controller-manager", "node-monitor-grace-period", "40", "40s"),
    ("kube-scheduler", "kube-api-burst", "1e3x", "100"),
]


def _takes(release: str, component: str, flag: str, value: str) -> tuple[bool, str]:
    binary = locate(component, release)
    assert binary is not None
    proc = subprocess.run([str(binary), f"--{flag}={value}", "--version"], capture_output=True, text=True, timeout=60)
    return proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("component,flag,bad,good", CASES)
def test_the_plan_refuses_a_value_exactly_when_the_binary_does(release, component, flag, bad, good):
    need_binaries(release)
    version = parse_version(release)
    problem = value_problem(component, flag, bad, version)
    assert problem is not None and f"--{flag} of {component}" in problem
    took, said = _takes(release, component, flag, bad)
    assert not took and "invalid argument" in said, said
    assert value_problem(component, flag, good, version) is None
    took, said = _takes(release, component, flag, good)
    assert took, said


def test_the_type_table_is_what_the_built_binaries_say():
    for release in RELEASES:
        need_binaries(release)
        if any(locate(c, release) is None for c in flag_types.COMPONENTS):
            pytest.fail(f"{release}: not every component is built (python3 dev.py kube)")
    assert flag_types.render_table(flag_types.generate()) == flag_types.TABLE.read_text(), \
        "python -m bke.lab.flag_types"
