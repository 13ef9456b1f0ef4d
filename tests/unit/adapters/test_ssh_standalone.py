"""The bundled CPython: its pin and upstream row, the bundle artefact, and the bootstrap's steps for
--python auto, system and bundled (run for real over SSH in tests/integration/test_ssh_bundled_python.py)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from bke.core.artefacts import agent_artefacts
from bke.adapters.bundle import UPSTREAMS, apply_overrides, bundle_artefacts, published_sha256, spec_for_versions
from bke.core.pythons import STANDALONE
from bke.core.spec.loader import load_spec
from bke.adapters.ssh import (
    PYTHON_BIN,
    BootstrapParams,
    LocalFile,
    StandaloneSource,
    bootstrap_steps,
    installer_files,
    installer_line,
    standalone_source,
)

NATS = "nats://10.0.0.9:4222"
DIGEST = "ab" * 32
URL_SOURCE = StandaloneSource(DIGEST, url="http://10.0.0.5:8080/python/3.11.14+20251031/linux/amd64/python.tar.gz")


def params(**kw) -> BootstrapParams:  # type: ignore[no-untyped-def]
    return BootstrapParams("prod", "n1", NATS, Path("bke-0.1.0-py3-none-any.whl"), Path("requirements.txt"), **kw)


def names(p: BootstrapParams) -> list[str]:
    return [s.name for s in bootstrap_steps(p)]


def test_the_pin_and_its_upstream_asset_names():
    up = UPSTREAMS["python"]
    base = "https://github.com/astral-sh/python-build-standalone/releases/download/20251031/"
    assert STANDALONE.version == "3.11.14+20251031" and STANDALONE.minor == "3.11" and STANDALONE.glibc == "2.17"
    assert up.download_url(STANDALONE.version, "amd64", "python.tar.gz") == \
        base + "cpython-3.11.14+20251031-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz"
    assert up.download_url(STANDALONE.version, "arm64", "python.tar.gz") == \
        base + "cpython-3.11.14+20251031-aarch64-unknown-linux-gnu-install_only_stripped.tar.gz"
    assert up.sums_url(STANDALONE.version, "arm64", "python.tar.gz") == base + "SHA256SUMS"
    # SHA256SUMS: one `<hex>  <asset>` line per asset of the release; the right line is picked
    sums = "".join(f"{c * 64}  cpython-3.11.14+20251031-{t}-install_only_stripped.tar.gz\n"
                   for c, t in (("1", "aarch64-unknown-linux-gnu"), ("2", "x86_64-unknown-linux-gnu")))
    assert published_sha256(sums, "cpython-3.11.14+20251031-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz", "S") == "2" * 64
    # a mirror may use {build} (the release tag) and keeps upstream's arch names
    table = apply_overrides(UPSTREAMS, {"python": {"url": "https://m/pbs/{build}/{version}/{arch}.tgz"}})
    assert table["python"].download_url(STANDALONE.version, "arm64", "x") == \
        "https://m/pbs/20251031/3.11.14+20251031/aarch64-unknown-linux-gnu.tgz"


def test_the_bundle_holds_one_archive_per_arch():
    spec = load_spec(spec_for_versions("1.33.2", "3.5.21", "2.1.3")).spec
    assert spec is not None
    paths = {a.path for a in bundle_artefacts(spec.config, ("amd64", "arm64"))}
    assert {f"python/{STANDALONE.version}/linux/{a}/python.tar.gz" for a in ("amd64", "arm64")} <= paths
    assert agent_artefacts("arm64")[0].dest is None  # kept as the archive, unpacked by the bootstrap


def test_system_and_auto_without_a_source_keep_the_nodes_python():
    old = ["stage", "check-python", "venv", "install-requirements"]
    assert names(params(python_mode="system", standalone=URL_SOURCE))[:4] == old
    assert names(params())[:4] == old  # auto with nothing else to use
    steps = {s.name: s for s in bootstrap_steps(params(python="python3.11", python_mode="system"))}
    assert steps["venv"].argv == ("python3.11", "-m", "venv", "/opt/bke-agent")


def test_auto_and_bundled_choose_on_the_node_then_fetch_verify_unpack():
    for mode in ("auto", "bundled"):
        steps = {s.name: s for s in bootstrap_steps(params(python_mode=mode, standalone=URL_SOURCE, username="ubuntu"))}
        assert list(steps)[:6] == ["stage", "choose-python", "fetch-python", "verify-python", "install-python", "venv"]
        choose = steps["choose-python"].argv
        assert choose[:2] == ("sh", "-c") and choose[4:7] == (mode, "python3", PYTHON_BIN)
        assert URL_SOURCE.url in steps["fetch-python"].argv
        assert DIGEST in steps["verify-python"].argv and "sha256sum -c" in steps["verify-python"].argv[2]
        assert "/opt/bke-python" in steps["install-python"].argv
        # the staging directory is the SSH user's: fetch and check as them, unpack and venv as root
        assert [steps[n].argv[:3] == ("sudo", "-n", "--") for n in
                ("choose-python", "fetch-python", "verify-python", "install-python", "venv")] == [
            False, False, False, True, True]
        assert not any(u.name == "python.tar.gz" for u in steps["stage"].uploads)  # fetched, not uploaded


def test_a_local_archive_is_uploaded_and_nothing_is_fetched(tmp_path):
    src = StandaloneSource(DIGEST, path=tmp_path / "python.tar.gz")
    steps = bootstrap_steps(params(standalone=src))
    assert "fetch-python" not in [s.name for s in steps]
    [up] = [u for u in steps[0].uploads if u.name == "python.tar.gz"]
    assert up.source == LocalFile(tmp_path / "python.tar.gz") and up.mode == 0o600
    assert "python.tar.gz" in installer_files(params(standalone=src))
    line = installer_line(params(standalone=src))
    assert "install -m 0600 -- python.tar.gz .bke-bootstrap/python.tar.gz" in line and "sha256sum -c" in line
    # --python system never ships it
    assert not any(u.name == "python.tar.gz" for u in bootstrap_steps(params(python_mode="system", standalone=src))[0].uploads)


def test_refusals_name_what_is_wrong():
    with pytest.raises(ValueError, match="--python bundled needs the bundled CPython: give --python-from"):
        bootstrap_steps(params(python_mode="bundled"))
    with pytest.raises(ValueError, match="expected one of auto, system, bundled"):
        bootstrap_steps(params(python_mode="newest"))
    with pytest.raises(ValueError, match="exactly one of"):
        StandaloneSource(DIGEST)
    with pytest.raises(ValueError, match="not a sha256"):
        StandaloneSource("abc", url="http://r/x")
    with pytest.raises(ValueError, match="not an http"):
        StandaloneSource(DIGEST, url="file:///etc/passwd")


def _bundle(tmp_path: Path, data: bytes, digest: str | None = None) -> Path:
    art = agent_artefacts("arm64")[0]
    (tmp_path / art.path).parent.mkdir(parents=True)
    (tmp_path / art.path).write_bytes(data)
    (tmp_path / f"{art.path}.sha256").write_text((digest or hashlib.sha256(data).hexdigest()) + "\n")
    return tmp_path / art.path


def test_standalone_source_from_a_bundle_dir_or_an_httprepo(tmp_path):
    path = _bundle(tmp_path, b"archive")
    src = standalone_source(str(tmp_path), "arm64", lambda url: pytest.fail("no URL"))
    assert src == StandaloneSource(hashlib.sha256(b"archive").hexdigest(), path=path)
    seen = []
    src = standalone_source("http://repo:8080/", "arm64", lambda url: seen.append(url) or f"{DIGEST}\n")
    assert src.url == f"http://repo:8080/python/{STANDALONE.version}/linux/arm64/python.tar.gz"
    assert seen == [f"{src.url}.sha256"] and src.sha256 == DIGEST
    with pytest.raises(ValueError, match=r"\.sha256: not a sha256 digest"):
        standalone_source("http://repo", "arm64", lambda url: "<html>not found</html>")


def test_standalone_source_refuses_a_damaged_or_missing_archive(tmp_path):
    with pytest.raises(ValueError, match="no python/.* with its .sha256"):
        standalone_source(str(tmp_path), "amd64", lambda url: "")
    _bundle(tmp_path, b"archive", digest="0" * 64)
    with pytest.raises(ValueError, match="rebuild the bundle"):
        standalone_source(str(tmp_path), "arm64", lambda url: "")


def test_docs_bundled_table_is_generated_from_the_steps():
    from bke.adapters.ssh import steps_markdown
    doc = (Path(__file__).resolve().parents[3] / "docs" / "agent-bootstrap.md").read_text()
    start, end = "<!-- generated: bke.adapters.ssh.steps_markdown, bundled python -->\n", "<!-- end generated, bundled python -->"
    table = doc[doc.index(start) + len(start):doc.index(end)]
    src = StandaloneSource("0" * 64, url=f"http://10.0.0.5:40080/python/{STANDALONE.version}/linux/amd64/python.tar.gz")
    steps = [s for s in bootstrap_steps(params(standalone=src))
             if s.name in ("choose-python", "fetch-python", "verify-python", "install-python", "venv")]
    assert table.strip() == steps_markdown(steps).strip(), "regenerate the bundled-python table in docs/agent-bootstrap.md"


def test_without_a_bundle_the_refusal_says_how_to_use_one():
    import subprocess
    import sys
    [check] = [s for s in bootstrap_steps(params()) if s.name == "check-python"]
    code = f"import sys; sys.version_info = (3, 9, 18, 'final', 0); exec({check.argv[2]!r})"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert "this node has Python 3.9; --python-from BUNDLE lets bke agent bootstrap use the bundle's CPython" in run.stderr
    [check] = [s for s in bootstrap_steps(params(python_mode="system")) if s.name == "check-python"]
    assert "--python-from" not in check.argv[2]
