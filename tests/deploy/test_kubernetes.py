"""deploy/kubernetes/: every file passes `kubernetes-validate --strict`, and the manifests agree
with the images and the services: one Deployment, PodDisruptionBudget and Service per service,
probes on the service's own port, non-root, resources, secrets referenced and never committed.
No cluster runs here; nothing is applied."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bke.adapters.auth.permissions import inbox_prefix
from bke.adapters.http.ports import DEFAULT_HTTP_PORTS
from bke.lab.supervisor import SERVICES
from bke.core.secrets.key_kinds import SERVICE_KEY_KINDS, key_file_env

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
VALIDATE = Path(sys.executable).parent / "kubernetes-validate"


def _yaml_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*") if p.suffix in {".yaml", ".yml"})


def _objects() -> list[dict[str, Any]]:
    return [doc for p in _yaml_files() for doc in yaml.safe_load_all(p.read_text()) if doc]


def _find(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in _objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _validate(paths: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VALIDATE), "--strict", "--quiet", *map(str, paths)],
                          capture_output=True, text=True, timeout=300)


def test_every_file_passes_kubernetes_validate_strict(tmp_path: Path) -> None:
    files = _yaml_files()
    assert {p.stem for p in files} >= {"namespace", "config", *SERVICES}
    done = _validate(files)
    assert done.returncode == 0, done.stdout + done.stderr
    # the check can fail: a field Kubernetes does not know is refused under --strict
    deployment = _find("Deployment", "bke-planner")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(deployment))
    refused = _validate([bad])
    assert refused.returncode != 0 and "livenesProbe" in refused.stdout + refused.stderr


def test_no_secret_is_committed() -> None:
    assert [o["metadata"]["name"] for o in _objects() if o["kind"] == "Secret"] == []


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_deployment(service: str) -> None:
    port = DEFAULT_HTTP_PORTS[service]
    dep = _find("Deployment", f"bke-{service}")
    assert dep["metadata"]["namespace"] == "bke" and dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["image"].split(":")[0] == f"bke-{service}"  # deploy/images/service/Dockerfile, SERVICE=<service>
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    env = {e["name"]: e for e in container["env"]}
    assert env["BKE_HTTP_PORT"]["value"] == str(port)
    assert container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert env["BKE_NATS_INBOX_PREFIX"]["value"] == inbox_prefix(service)
    assert env["BKE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": f"bke-{service}-redis", "key": "BKE_REDIS_URL"}
    # the at-rest keys of the kinds it uses and no other, never the one shared file
    kinds = SERVICE_KEY_KINDS.get(service, ())
    assert {k for k in env if k.startswith("BKE_KEY_FILE_")} == {key_file_env(k) for k in kinds}
    assert "BKE_SECRET_KEY_FILE" not in env
    # every file the env names is mounted from a volume of the pod
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "BKE_HTTP_TOKEN_FILE" in env  # BKE_HTTP_HOST 0.0.0.0 below: the dashboard asks for a token
    for key in ("BKE_NATS_CREDS", "BKE_HTTP_TOKEN_FILE", *(key_file_env(k) for k in kinds)):
        path = Path(env[key]["value"])
        volume = volumes[mounts[str(path.parent)]]
        assert "secret" in volume or all("secret" in s for s in volume["projected"]["sources"]), key
    for kind in kinds:  # each key file from that kind's own Secret, mounted whole (a rotation reaches the pod)
        volume = volumes[mounts[str(Path(env[key_file_env(kind)]["value"]).parent)]]
        assert {"secret": {"name": f"bke-key-{kind}"}} in volume["projected"]["sources"], kind
        assert Path(env[key_file_env(kind)]["value"]).name == f"{kind}.key"
    assert not any("subPath" in m for m in container["volumeMounts"])
    # the shared configuration comes from the ConfigMap in config.yaml
    (source,) = container["envFrom"]
    config = _find("ConfigMap", source["configMapRef"]["name"])
    assert config["data"]["BKE_HTTP_HOST"] == "0.0.0.0" and not set(config["data"]) & set(env)


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_has_a_disruption_budget_and_a_service(service: str) -> None:
    labels = _find("Deployment", f"bke-{service}")["spec"]["template"]["metadata"]["labels"]
    pdb = _find("PodDisruptionBudget", f"bke-{service}")
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    svc = _find("Service", f"bke-{service}")
    assert svc["spec"]["selector"].items() <= labels.items()
    assert svc["spec"]["ports"] == [{"name": "http", "port": DEFAULT_HTTP_PORTS[service], "targetPort": "http",
                                     "protocol": "TCP"}]


def test_reference_values_for_a_nats_cluster_and_redis_sentinel() -> None:
    """The Helm values are reference only (no Helm here): they at least say what the README says."""
    nats = yaml.safe_load((ROOT / "deploy/helm/nats-values.yaml").read_text())
    assert nats["config"]["cluster"] == {"enabled": True, "replicas": 3}
    assert nats["config"]["jetstream"]["enabled"] is True
    assert nats["config"]["merge"]["$include"].endswith("auth.conf")
    redis = yaml.safe_load((ROOT / "deploy/helm/redis-values.yaml").read_text())
    assert redis["architecture"] == "replication" and redis["replica"]["replicaCount"] == 3
    assert redis["sentinel"]["enabled"] is True and redis["sentinel"]["quorum"] == 2
    assert "aclfile" in redis["commonConfiguration"]
    readme = (K8S / "README.md").read_text()
    for needle in ("nats-values.yaml", "redis-values.yaml", "bke identities init", "bke.adapters.runtime.redis_acl"):
        assert needle in readme


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_has_a_network_policy_narrower_than_the_default_deny(service: str) -> None:
    deny = _find("NetworkPolicy", "default-deny")
    assert deny["spec"]["podSelector"] == {} and sorted(deny["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    pol = _find("NetworkPolicy", f"bke-{service}")
    assert pol["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": f"bke-{service}"}
    (ingress,) = pol["spec"]["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": DEFAULT_HTTP_PORTS[service]}]
    egress_ports = {p["port"] for rule in pol["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 4222, 6379, 26379} | ({6443} if service in ("dispatcher", "upgrader") else set())


def _secret_names(pod: dict[str, Any]) -> set[str]:
    """Every Secret a pod template names, in its env and in its volumes."""
    names = set()
    for container in pod["containers"]:
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            names.add(volume["secret"]["secretName"])
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                names.add(source["secret"]["name"])
    return names


def test_state_init_job_alone_holds_the_redis_admin_user() -> None:
    job = _find("Job", "bke-state-init")
    assert job["metadata"]["namespace"] == "bke"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure" and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "bke.adapters.state.deploy_init"]
    assert container["image"].split(":")[0] == "bke-upgrader"  # holds what it imports (test_compose.py)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e for e in container["env"]}
    assert env["BKE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "bke-state-init-redis", "key": "BKE_REDIS_URL"}
    assert {k for k in env if k.startswith("BKE_KEY_FILE_")} == {key_file_env(k) for k in ("snapshot", "signing", "plan", "render")}
    assert not {k for k in env if k.startswith("BKE_NATS_")}  # no NATS identity
    assert _secret_names(pod) == {"bke-state-init-redis", "bke-key-snapshot", "bke-key-signing", "bke-key-plan",
                                  "bke-key-render"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    for kind in ("snapshot", "signing"):
        path = Path(env[key_file_env(kind)]["value"])
        assert path.name == f"{kind}.key" and mounts[str(path.parent)] == "at-rest-keys"
    # no other workload is given the admin user's Secret
    for obj in _objects():
        if obj["kind"] in ("Deployment", "Job") and obj["metadata"]["name"] != "bke-state-init":
            assert "bke-state-init-redis" not in _secret_names(obj["spec"]["template"]["spec"]), obj["metadata"]["name"]
    readme = (K8S / "README.md").read_text()
    assert "bke-state-init-redis" in readme and "state-init.yaml" in readme


def test_state_init_job_reaches_redis_and_dns_only() -> None:
    pol = _find("NetworkPolicy", "bke-state-init")
    assert pol["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "bke-state-init"}
    assert pol["spec"]["policyTypes"] == ["Egress"] and "ingress" not in pol["spec"]
    ports = {p["port"] for rule in pol["spec"]["egress"] for p in rule["ports"]}
    assert ports == {53, 6379, 26379}


def test_the_renewer_alone_holds_the_authority_key_with_its_own_identity_and_redis_user() -> None:
    dep = _find("Deployment", "bke-renewer")
    assert dep["metadata"]["namespace"] == "bke" and dep["spec"]["replicas"] == 1  # its answer is idempotent
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "bke.adapters.auth.serve_renewals"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "ports" not in container  # no HTTP side
    env = {e["name"]: e for e in container["env"]}
    assert {k for k in env if k.startswith("BKE_KEY_FILE_")} == {key_file_env("authority")}
    assert env["BKE_NATS_INBOX_PREFIX"]["value"] == inbox_prefix("renewer")
    assert env["BKE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "bke-renewer-redis", "key": "BKE_REDIS_URL"}
    assert _secret_names(pod) == {"bke-renewer-nats", "bke-renewer-redis", "bke-key-authority"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    key = Path(env[key_file_env("authority")]["value"])
    assert key.name == "authority.key"
    assert volumes[mounts[str(key.parent)]]["projected"]["sources"] == [{"secret": {"name": "bke-key-authority"}}]
    creds = Path(env["BKE_NATS_CREDS"]["value"])
    assert volumes[mounts[str(creds.parent)]]["secret"]["secretName"] == "bke-renewer-nats"
    # no other workload is given the authority key, the renewer's Redis user or its identity
    for obj in _objects():
        if obj["kind"] in ("Deployment", "Job") and obj["metadata"]["name"] != "bke-renewer":
            other = obj["spec"]["template"]["spec"]
            assert not _secret_names(other) & _secret_names(pod), obj["metadata"]["name"]
            names = {e["name"] for c in other["containers"] for e in c.get("env", [])}
            assert key_file_env("authority") not in names, obj["metadata"]["name"]
    readme = (K8S / "README.md").read_text()
    for needle in ("renewer.yaml", "bke-renewer-redis", "renewer.env", "authority"):
        assert needle in readme, needle


def test_the_renewer_reaches_dns_nats_and_redis_and_is_reached_by_nothing() -> None:
    pol = _find("NetworkPolicy", "bke-renewer")
    assert pol["spec"]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "bke-renewer"}
    assert sorted(pol["spec"]["policyTypes"]) == ["Egress", "Ingress"] and "ingress" not in pol["spec"]
    assert {p["port"] for rule in pol["spec"]["egress"] for p in rule["ports"]} == {53, 4222, 6379, 26379}
