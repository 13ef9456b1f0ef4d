"""The agent's wheelhouse: the pip commands `bke bundle build` runs (one per Python and arch,
binary wheels for that platform only), and a real install with no package index from a tiny
wheelhouse served by `bke bundle serve`, with the exact pip arguments the bootstrap sends.
Only the test at the end reaches a package index: a real `pip download` of
requirements-agent.txt."""
from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from bke.adapters.bundle import download_commands, ensure_wheelhouse, make_server
from tests.workers import in_host_network
from bke.adapters.bundle.wheelhouse import local_wheel_commands
from bke.core.pythons import AGENT_PYTHONS
from bke.adapters.ssh import BootstrapParams, bootstrap_steps

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _tiny_wheel(folder: Path, name: str = "tiny_dep", version: str = "0.1") -> Path:
    """A valid pure-Python wheel, written by hand (no build backend, no index)."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
                     for p, d in files.items()) + f"{dist}/RECORD,,\n"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
        z.writestr(f"{dist}/RECORD", record)
    return path


def test_download_commands_cover_every_python_and_arch(tmp_path):
    req = ROOT / "requirements-agent.txt"
    cmds = download_commands(req, tmp_path / "w", tmp_path / "local", ["amd64", "arm64"], pip_args=("--index-url=X",))
    assert len(cmds) == 2 * len(AGENT_PYTHONS)
    seen = set()
    for cmd in cmds:
        assert cmd[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in cmd
        py = cmd[cmd.index("--python-version") + 1]
        plats = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
        arch = "x86_64" if plats[0].endswith("x86_64") else "aarch64"
        assert all(p.endswith(arch) for p in plats) and any(p.startswith("manylinux2014") for p in plats)
        assert cmd[cmd.index("-r") + 1] == str(req) and "--index-url=X" in cmd
        seen.add((py, arch))
    assert seen == {(f"{a}.{b}", arch) for a, b in AGENT_PYTHONS for arch in ("x86_64", "aarch64")}
    # nkeys is published as an sdist only: built here once, as a pure wheel
    (local,) = local_wheel_commands(req, tmp_path / "local")
    assert local[1:5] == ["-m", "pip", "wheel", "--no-deps"] and local[-1].startswith("nkeys==")


def test_an_install_with_no_index_from_the_served_wheelhouse(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _tiny_wheel(src)
    req = tmp_path / "requirements.txt"
    req.write_text("tiny-dep==0.1\n")
    bundle = tmp_path / "bundle"
    wheels_dir = bundle / "agent/0.1.0/wheels"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # no index, no find-links from the machine's pip.conf
    run = lambda cmd, timeout: subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)  # noqa: E731
    wheels = ensure_wheelhouse(req, wheels_dir, ["amd64", "arm64"], pythons=((3, 11),),
                               pip_args=("--no-index", "--find-links", str(src)), run=run)
    assert [w.name for w in wheels] == ["tiny_dep-0.1-py3-none-any.whl"]
    assert 'href="tiny_dep-0.1-py3-none-any.whl"' in (wheels_dir / "index.html").read_text()
    server = make_server(bundle, "127.0.0.1:0")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/agent/0.1.0/wheels/index.html"
    try:
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        steps = {s.name: s for s in bootstrap_steps(BootstrapParams(
            "c", "n1", "nats://10.0.0.9:4222", Path("bke-0.1.0-py3-none-any.whl"), req, wheelhouse=url))}
        argv = list(steps["install-requirements"].argv)
        assert argv[argv.index("--find-links") + 1] == url and "--no-index" in argv
        assert argv[argv.index("--trusted-host") + 1] == "127.0.0.1"
        argv[0] = str(venv / "bin/python")  # /opt/bke-agent/bin/python on a node
        argv[-1] = str(req)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
        assert done.returncode == 0, done.stderr[-1500:]
        check = subprocess.run([str(venv / "bin/python"), "-c", "import tiny_dep; print(tiny_dep.VALUE)"],
                               capture_output=True, text=True)
        assert check.stdout.strip() == "42"
    finally:
        server.shutdown()
        server.server_close()


def test_a_missing_wheel_fails_naming_the_command(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("not-there==9.9\n")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    run = lambda cmd, timeout: subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)  # noqa: E731
    from bke.adapters.bundle import WheelhouseError
    with pytest.raises(WheelhouseError, match="pip download .* exit 1"):
        ensure_wheelhouse(req, tmp_path / "w", ["amd64"], pythons=((3, 11),),
                          pip_args=("--no-index", "--find-links", str(tmp_path)), run=run)


def test_real_wheelhouse_of_the_agents_requirements(tmp_path):
    """Needs the package index: every pinned requirement has a wheel for every claimed Python and arch."""
    wheels = in_host_network(lambda: ensure_wheelhouse(ROOT / "requirements-agent.txt", tmp_path / "w", ["amd64", "arm64"]))
    names = {w.name for w in wheels}
    for major, minor in AGENT_PYTHONS:
        for arch in ("x86_64", "aarch64"):
            assert any(n.startswith("pydantic_core-") and f"cp{major}{minor}" in n and arch in n for n in names)


def test_a_wheelhouse_value_that_is_no_location_is_refused():
    for bad in ("", "http://x/\nrm -rf /"):
        with pytest.raises(ValueError, match="wheelhouse"):
            bootstrap_steps(BootstrapParams("c", "n1", "nats://10.0.0.9:4222", Path("bke-0.1.0-py3-none-any.whl"),
                                            Path("r.txt"), wheelhouse=bad))
    steps = {s.name: s for s in bootstrap_steps(BootstrapParams(
        "c", "n1", "nats://10.0.0.9:4222", Path("bke-0.1.0-py3-none-any.whl"), Path("r.txt"),
        wheelhouse="/srv/wheels"))}
    argv = steps["install-agent"].argv
    assert "--no-index" in argv and "--trusted-host" not in argv  # a path on the node: nothing to trust


def test_the_bundle_carries_the_agent(tmp_path, monkeypatch):
    """build_bundle with the agent: the BKE wheel, requirements and wheelhouse under agent/<version>/,
    each with its .sha256, and named in bundle.json."""
    import json
    from datetime import datetime, timezone

    from bke.adapters.bundle import BundleOptions, HttpFetcher, build_bundle
    from bke.core.plan import plan_spec_text

    from ..bundle_helpers import FakeUpstream

    src = tmp_path / "src"
    src.mkdir()
    _tiny_wheel(src)
    bke_wheel = _tiny_wheel(tmp_path, "bke", "0.1.0")
    req = tmp_path / "requirements-agent.txt"
    req.write_text("tiny-dep==0.1\n")
    plan = plan_spec_text(Path("examples/seed-3m1w.yaml").read_bytes()).plan
    up = FakeUpstream(plan.spec.config, arches=("arm64",))
    fetcher = HttpFetcher()
    out = tmp_path / "bundle"
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip must see no index
    try:
        index = build_bundle(plan, out, BundleOptions(
            arches=("arm64",), upstreams=up.table, resolve_images=False, wheel=bke_wheel, requirements=req,
            pip_args=("--no-index", "--find-links", str(src)), pythons=((3, 11), (3, 12))), fetcher,
            datetime(2026, 12, 1, tzinfo=timezone.utc))
    finally:
        fetcher.close()
        up.close()
    agent = out / "agent/0.1.0"
    for rel in ("bke-0.1.0-py3-none-any.whl", "requirements.txt", "wheels/tiny_dep-0.1-py3-none-any.whl",
                "wheels/index.html"):
        data = (agent / rel).read_bytes()
        assert (agent / f"{rel}.sha256").read_text().strip() == hashlib.sha256(data).hexdigest(), rel
    on_disk = json.loads((out / "bundle.json").read_text())
    assert on_disk["agent"] == {"dir": "agent/0.1.0", "pythons": ["3.11", "3.12"]} == index["agent"]
    assert "agent/0.1.0/wheels/tiny_dep-0.1-py3-none-any.whl" in {f["path"] for f in on_disk["files"]}
    assert not (out / "kubernetes/1.33.2/linux/amd64").exists() and (out / "kubernetes/1.33.2/linux/arm64/kubelet").is_file()
