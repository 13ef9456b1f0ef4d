"""docker-compose.yml, without a Docker engine (none runs on the development machines): it passes
the compose-spec schema (check-jsonschema's bundled copy), every service can be scaled, each
service and lab agent is started with the command and the environment names `bke lab install`
uses (read from the real supervisor, which starts the lab's own NATS and Redis here), and the lab
agents match the cluster they stand for."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from bke.adapters.auth.permissions import identity_name, inbox_prefix
from bke.lab import supervisor as supervisor_module
from bke.lab.supervisor import SERVICES, LabSupervisor
from bke.core.plan import plan_spec_text
from bke.adapters.runtime import redis_acl
from bke.core.secrets.key_kinds import SERVICE_KEY_KINDS, key_file_env

from .dockerfile import effective, env_of, read_stages
from .image_sets import SERVICE_DOCKERFILE, image_requirements, imported_distributions, read_pins, service_build_args

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
# Set only in containers: the lab's services listen on loopback at their default ports.
CONTAINER_ONLY = {"BKE_HTTP_HOST", "BKE_HTTP_PORT", "BKE_HTTP_TOKEN_FILE"}
# Set by the lab only when its NATS runs over TLS (`bke lab install --tls`).
LAB_TLS_ONLY = {"BKE_NATS_TLS_CA"}


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_compose_file_passes_the_compose_spec_schema(tmp_path: Path) -> None:
    done = _schema_check(COMPOSE)
    assert done.returncode == 0, done.stdout + done.stderr
    # and the check can fail: a misspelt key is refused
    bad = _compose()
    bad["services"]["planner"]["enviroment"] = {"X": "1"}
    (tmp_path / "compose.yml").write_text(yaml.safe_dump(bad))
    refused = _schema_check(tmp_path / "compose.yml")
    assert refused.returncode != 0 and "enviroment" in refused.stdout + refused.stderr


def test_every_service_runs_from_its_own_image_and_scales() -> None:
    services = _compose()["services"]
    for name in SERVICES:
        spec = services[name]
        assert spec["build"]["dockerfile"] == str(SERVICE_DOCKERFILE.relative_to(ROOT))
        assert spec["build"]["args"] == service_build_args(name), name
        # `docker compose up --scale NAME=N` refuses a fixed container name and a fixed host port
        assert "container_name" not in spec and "ports" not in spec, name
        assert spec["environment"]["BKE_HTTP_HOST"] == "0.0.0.0"


def test_each_service_is_given_the_key_files_of_its_kinds_only() -> None:
    compose = _compose()
    for name in SERVICES:
        spec, kinds = compose["services"][name], SERVICE_KEY_KINDS.get(name, ())
        assert "BKE_SECRET_KEY_FILE" not in spec["environment"], name  # no shared key: one per kind
        assert {k for k in spec["environment"] if k.startswith("BKE_KEY_FILE_")} == {key_file_env(k) for k in kinds}
        assert {s for s in spec["secrets"] if s.startswith("bke-key-")} == {f"bke-key-{k}" for k in kinds}, name
        for kind in kinds:
            assert spec["environment"][key_file_env(kind)] == f"/run/secrets/bke-key-{kind}"
            assert compose["secrets"][f"bke-key-{kind}"] == {"file": f"./deploy/keys/{kind}.key"}


class _Recorder:
    """Stands for the lab's process starts (bke.lab.forkserver.spawn, as the supervisor calls it;
    NATS and Redis start for real): what the supervisor would start, by name, as (argv with the
    program's base name, env)."""

    started: dict[str, tuple[list[str], dict[str, str]]] = {}

    @classmethod
    def spawn(cls, workdir: Path, name: str, argv: list[str], log: Path, env: dict[str, str]) -> int:
        cls.started[name] = ([Path(argv[0]).name, *map(str, argv[1:])], env)
        return 0


@pytest.fixture
def lab_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, tuple[list[str], dict[str, str]]]]:
    """The supervisor's own `ensure_services` and `ensure_agents` for deploy/compose/cluster.yaml,
    with process starts recorded instead of done. The agents' key provisioning, which needs the
    services running, is skipped: it decides no name or variable of the agents' environment."""
    for key in [k for k in os.environ if k.startswith("BKE_")]:
        monkeypatch.delenv(key)
    _Recorder.started = {}
    sup = LabSupervisor(tmp_path / "lab")
    try:
        info = sup.ensure_runtime()
        monkeypatch.setattr(supervisor_module.forkserver, "spawn", _Recorder.spawn)
        monkeypatch.setattr(supervisor_module, "provision_lab_agents", lambda access, cluster, envs: None)
        monkeypatch.setattr(supervisor_module, "ensure_lab_command_key", lambda info, key_file: "bke-command-ed25519 x")
        sup.ensure_services(info)
        plan = plan_spec_text((ROOT / "deploy/compose/cluster.yaml").read_text(), "compose").plan
        assert plan is not None
        sup.ensure_agents(info, plan)
        yield _Recorder.started
    finally:
        sup._save({"services": {}, "agents": {}})  # nothing was started: down() must stop only NATS and Redis
        sup.down()


def _bke_names(env: dict[str, Any]) -> set[str]:
    return {k for k in env if k.startswith("BKE_")}


@pytest.mark.integration
def test_compose_starts_each_service_and_agent_as_the_lab_does(
        lab_starts: dict[str, tuple[list[str], dict[str, str]]], tmp_path: Path) -> None:
    compose = _compose()["services"]
    assert sorted(lab_starts) == sorted([*SERVICES, "renewer", *(s for s in compose if s.startswith("agent-"))])
    redis_acl.write_deployment_files(tmp_path / "redis")
    for name in SERVICES:
        argv, lab_env = lab_starts[name]
        spec = compose[name]
        # compose gives no command: the image's ENTRYPOINT starts bke-<name> (tests/deploy/test_images.py)
        assert "command" not in spec and argv == [f"bke-{name}"], (name, argv)
        from_files = set()
        for env_file in spec.get("env_file", []):
            assert env_file == f"deploy/redis/{name}.env", env_file
            text = (tmp_path / "redis" / f"{name}.env").read_text()
            from_files |= {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}
        compose_names = _bke_names(spec["environment"]) | from_files
        lab_names = _bke_names(lab_env) - LAB_TLS_ONLY
        assert lab_names - compose_names == set(), f"{name}: the lab sets these, compose does not"
        assert compose_names - lab_names <= CONTAINER_ONLY, f"{name}: compose sets these, the lab does not"
        for key in ("BKE_NATS_INBOX_PREFIX", "BKE_DISPATCHER_MODE", "BKE_UPGRADER_MODE"):
            assert spec["environment"][key] == lab_env[key], (name, key)
    # the renewer: the same module, and the same names but the lab's own (unbuffered output aside)
    argv, lab_env = lab_starts["renewer"]
    spec = compose["renewer"]
    assert argv[1:] == spec["entrypoint"][1:] and "command" not in spec
    text = (tmp_path / "redis" / "renewer.env").read_text()
    assert spec["env_file"] == ["deploy/redis/renewer.env"] and text.startswith("BKE_REDIS_URL=redis://bke-renewer:")
    assert _bke_names(lab_env) - LAB_TLS_ONLY == _bke_names(spec["environment"]) | {"BKE_REDIS_URL"}
    image_env = env_of(effective(read_stages(ROOT / "deploy/images/agent/Dockerfile"), "lab-agent"))
    for name in [s for s in compose if s.startswith("agent-")]:
        argv, lab_env = lab_starts[name]
        spec = compose[name]
        assert argv == [*spec.get("entrypoint", ["bke-agent"]), *spec["command"]], (name, argv)
        # the image sets the backend and the node's root; deploy/agent.env the command key
        compose_names = _bke_names(spec["environment"]) | _bke_names(image_env) | {"BKE_AGENT_COMMAND_KEY"}
        # the lab's agents get the services' environment too (lab_env), which they ignore
        agent_names = {k for k in _bke_names(lab_env) if k.startswith(("BKE_AGENT_", "BKE_NATS_"))} - LAB_TLS_ONLY
        assert agent_names - compose_names == set(), f"{name}: the lab sets these, compose does not"
        assert compose_names - agent_names <= {"BKE_AGENT_STATE_DIR"}, name  # the image's fixed volume path
        for key in ("BKE_AGENT_CLUSTER", "BKE_AGENT_NODE", "BKE_AGENT_IP", "BKE_AGENT_BACKEND", "BKE_NATS_INBOX_PREFIX"):
            assert {**image_env, **spec["environment"]}[key] == lab_env[key], (name, key)


def test_lab_agents_match_their_cluster_and_identities() -> None:
    compose = _compose()
    docs = list(yaml.safe_load_all((ROOT / "deploy/compose/cluster.yaml").read_text()))
    cluster = docs[0]["metadata"]["name"]
    nodes = {d["spec"]["hostname"]: d["spec"]["ip"] for d in docs if d["kind"] == "BKENode"}
    agents = {k: v for k, v in compose["services"].items() if k.startswith("agent-")}
    assert sorted(agents) == sorted(f"agent-{h}" for h in nodes)
    for host, ip in nodes.items():
        spec = agents[f"agent-{host}"]
        env = spec["environment"]
        # started through the launcher (bke-agent-launch runs `bke-agent run` from its venv)
        assert spec["build"]["target"] == "lab-agent" and (spec["entrypoint"], spec["command"]) == (["bke-agent-launch"], [])
        assert spec["hostname"] == env["BKE_AGENT_NODE"] == host and env["BKE_AGENT_CLUSTER"] == cluster
        assert env["BKE_AGENT_IP"] == ip == spec["networks"]["bke"]["ipv4_address"]
        assert env["BKE_NATS_INBOX_PREFIX"] == inbox_prefix(identity_name("agent", cluster, host))
        secret = f"agent-{host}-creds"
        assert env["BKE_NATS_CREDS"] == f"/run/secrets/{secret}" and spec["secrets"] == [secret]
        assert "deploy/agent.env" in spec["env_file"]  # BKE_AGENT_COMMAND_KEY, known once the dispatcher runs


def test_state_init_runs_once_before_the_services_and_alone_holds_the_admin_user() -> None:
    compose = _compose()
    services = compose["services"]
    step = services["state-init"]
    assert step["entrypoint"] == ["python", "-m", "bke.adapters.state.deploy_init"]
    assert importlib.util.find_spec("bke.adapters.state.deploy_init") is not None
    assert step["restart"] == "no" and step["read_only"] is True
    # the image it runs holds what it imports to make both kinds (bke.core.secrets.key_kinds): the
    # upgrader's, though the upgrader itself is given no signing key (the dispatcher signs)
    assert step["image"] == services["upgrader"]["image"]
    assert imported_distributions("bke.adapters.state.deploy_init") <= set(read_pins(image_requirements("upgrader")))
    # no NATS identity, no token; the keys of what it makes: the snapshot, command-signing and the
    # plan and render writers' signing keys
    assert sorted(step["secrets"]) == ["bke-key-plan", "bke-key-render", "bke-key-signing", "bke-key-snapshot"]
    assert step["environment"] == {"BKE_KEY_FILE_SNAPSHOT": "/run/secrets/bke-key-snapshot",
                                   "BKE_KEY_FILE_SIGNING": "/run/secrets/bke-key-signing",
                                   "BKE_KEY_FILE_PLAN": "/run/secrets/bke-key-plan",
                                   "BKE_KEY_FILE_RENDER": "/run/secrets/bke-key-render"}
    admin = "deploy/redis/admin.env"
    assert step["env_file"] == [admin]
    assert [name for name, spec in services.items() if admin in spec.get("env_file", [])] == ["state-init"]
    for name in SERVICES:  # each service starts after the step has exited 0, as after `streams`
        needs = services[name]["depends_on"]
        assert needs["state-init"] == {"condition": "service_completed_successfully"}, name
        assert needs["streams"] == {"condition": "service_completed_successfully"}, name
    needs = step["depends_on"]
    assert (needs if isinstance(needs, list) else list(needs)) == ["redis"]


def test_the_renewer_alone_holds_the_authority_key_its_identity_and_its_redis_user() -> None:
    compose = _compose()
    services = compose["services"]
    spec = services["renewer"]
    assert spec["entrypoint"] == ["python", "-m", "bke.adapters.auth.serve_renewals"]
    assert importlib.util.find_spec("bke.adapters.auth.serve_renewals") is not None
    assert spec["read_only"] is True and "ports" not in spec  # no HTTP side
    assert sorted(spec["secrets"]) == ["bke-key-authority", "renewer-creds"]  # no token, no other key
    env = spec["environment"]
    assert {k for k in env if k.startswith("BKE_KEY_FILE_")} == {key_file_env("authority")}
    assert env[key_file_env("authority")] == "/run/secrets/bke-key-authority"
    assert compose["secrets"]["bke-key-authority"] == {"file": "./deploy/keys/authority.key"}
    assert env["BKE_NATS_CREDS"] == "/run/secrets/renewer-creds"
    assert compose["secrets"]["renewer-creds"] == {"file": "./deploy/nats/creds/renewer.creds"}
    assert env["BKE_NATS_INBOX_PREFIX"] == inbox_prefix("renewer")
    assert spec["env_file"] == ["deploy/redis/renewer.env"]
    # its Redis user reads the stored authority and writes the identity registry, nothing else
    user = next(u for u in redis_acl.USERS if u.name == redis_acl.PROCESS_USER["renewer"])
    assert (user.writes, user.reads) == (("bke:auth:identities",), ("bke:auth:authority",))
    for name, other in services.items():
        if name == "renewer":
            continue
        assert not {"bke-key-authority", "renewer-creds"} & set(other.get("secrets", [])), name
        assert "deploy/redis/renewer.env" not in other.get("env_file", []), name
        assert key_file_env("authority") not in (other.get("environment") or {}), name
