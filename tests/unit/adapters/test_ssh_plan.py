"""The bootstrap step table, the rendered files, and quoting: no value can break out of its argument."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bke.adapters import ssh
from bke.adapters.ssh import (
    SUDO,
    AgentFiles,
    BootstrapParams,
    Inline,
    LocalFile,
    UnitParams,
    bootstrap_steps,
    describe_steps,
    remote_command,
    render_env,
    render_unit,
    steps_markdown,
)

WHEEL = Path("/build/dist/bke-0.1.0-py3-none-any.whl")
NATS = "nats://agent:s3cret@10.0.0.9:4222"
HOSTILE = [
    "; touch PWNED",
    "$(touch PWNED)",
    "`touch PWNED`",
    "a'b\"c",
    "line1\nline2 && touch PWNED",
    "--help",
    "* ?",
    "",
    "\\",
    "x > PWNED",
]


def params(**kw) -> BootstrapParams:
    base = {"cluster": "prod", "node": "n1.example", "nats_url": NATS, "wheel": WHEEL,
            "requirements": Path("/src/requirements.txt")}
    return BootstrapParams(**{**base, **kw})


def test_public_surface_is_all_listed():
    assert sorted(ssh.__all__) == sorted(set(ssh.__all__))
    assert all(hasattr(ssh, name) for name in ssh.__all__)


def test_steps_in_order():
    names = [s.name for s in bootstrap_steps(params())]
    assert names == [
        "stage", "check-python", "venv", "install-requirements", "install-agent", "config-dir", "write-env",
        "write-unit", "daemon-reload", "enable", "init", "restart", "cleanup",
    ]


def test_files_are_staged_private_then_installed_with_their_modes():
    steps = {s.name: s for s in bootstrap_steps(params())}
    uploads = steps["stage"].uploads
    assert [u.remote_path for u in uploads] == [
        ".bke-bootstrap/bke-0.1.0-py3-none-any.whl", ".bke-bootstrap/requirements.txt",
        ".bke-bootstrap/bke-agent.service", ".bke-bootstrap/env",
    ]
    assert {u.mode for u in uploads} == {0o600}
    assert steps["stage"].argv == ("mkdir", "-m", "0700", "-p", "--", ".bke-bootstrap")
    assert steps["config-dir"].argv == ("install", "-d", "-m", "0700", "/etc/bke-agent")
    assert steps["write-env"].argv == ("install", "-m", "0600", ".bke-bootstrap/env", "/etc/bke-agent/env")
    assert steps["write-unit"].argv[-1] == "/etc/systemd/system/bke-agent.service"
    assert steps["write-unit"].argv[2] == "0644"
    env = uploads[3].source
    assert isinstance(env, Inline) and env.secret and NATS in env.text
    assert isinstance(uploads[0].source, LocalFile) and uploads[0].source.path == WHEEL


def test_only_the_init_step_reports_the_public_key():
    assert [s.name for s in bootstrap_steps(params()) if s.reports_public_key] == ["init"]
    init = next(s for s in bootstrap_steps(params()) if s.name == "init")
    assert init.argv == ("env", "BKE_AGENT_BACKEND=host", "BKE_AGENT_CLUSTER=prod", "BKE_AGENT_NODE=n1.example",
                         "/opt/bke-agent/bin/bke-agent", "init")
    assert NATS not in remote_command(init.argv)


def test_root_needs_no_sudo_other_users_get_sudo_n_on_privileged_steps_only():
    assert not any(s.argv[:3] == SUDO for s in bootstrap_steps(params()))
    for step in bootstrap_steps(params(username="deploy")):
        assert (step.argv[:3] == SUDO) == step.privileged, step.name
    unprivileged = [s.name for s in bootstrap_steps(params(username="deploy")) if not s.privileged]
    assert unprivileged == ["stage", "check-python", "cleanup"]


def test_same_params_same_table():
    assert bootstrap_steps(params()) == bootstrap_steps(params())


@pytest.mark.parametrize("bad", ["n1; rm -rf /", "n1\nBKE_AGENT_BACKEND=lab", "N1", "../etc", "", "a b", "n1'"])
def test_hostile_node_or_cluster_names_are_refused(bad):
    with pytest.raises(ValueError, match="DNS-1123"):
        bootstrap_steps(params(node=bad))
    with pytest.raises(ValueError, match="DNS-1123"):
        bootstrap_steps(params(cluster=bad))


@pytest.mark.parametrize("bad", [
    "nats://h:4222\nBKE_AGENT_BACKEND=lab", "nats://h:4222 x", "nats://a'b@h", 'nats://a"b@h', "nats://$HOME@h",
    "nats://a\\b@h", "http://h:4222", "h:4222", "",
])
def test_hostile_nats_urls_are_refused_without_echoing_them(bad):
    with pytest.raises(ValueError) as info:
        bootstrap_steps(params(nats_url=bad))
    if bad:
        assert bad not in str(info.value)


@pytest.mark.parametrize("bad", ["bke.tar.gz", "x; rm -rf ~.whl", "a b.whl", "$(x).whl"])
def test_wheel_file_names_must_be_wheel_names(bad):
    with pytest.raises(ValueError, match="wheel"):
        bootstrap_steps(params(wheel=Path("/tmp") / bad))


def _through_sh(argv: tuple[str, ...], cwd: Path) -> list[str]:
    """What a real POSIX shell makes of remote_command(argv): each word printed NUL-terminated."""
    line = "printf '%s\\0' " + remote_command(argv)
    out = subprocess.run(["sh", "-c", line], cwd=cwd, capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_every_command_reaches_the_shell_as_its_argv(hostile, tmp_path):
    # The interpreter path is free text from the operator: quoted like everything else.
    steps = bootstrap_steps(params(python=f"/opt/py{hostile}/python3", username="deploy"))
    for step in steps:
        assert _through_sh(step.argv, tmp_path) == list(step.argv), step.name
    assert not (tmp_path / "PWNED").exists()


def test_remote_command_refuses_an_empty_argv():
    with pytest.raises(ValueError):
        remote_command(())


GOLDEN_UNIT = """\
# Written by `bke agent bootstrap`; a second bootstrap overwrites it.
[Unit]
Description=BKE node agent
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
EnvironmentFile=/etc/bke-agent/env
ExecStart=/opt/bke-agent/bin/bke-agent-launch
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
"""


def test_unit_golden():
    assert AgentFiles.for_node("prod", "n1", NATS).unit == GOLDEN_UNIT


def test_unit_is_parsed_back_and_checked():
    with pytest.raises(ValueError, match="ExecStart"):
        render_unit(UnitParams(env_path="/etc/bke-agent/env", agent_bin="relative/bke-agent"))


def test_env_file():
    assert render_env("prod", "n1", NATS) == (
        "# Written by `bke agent bootstrap`. Keep 0600: the NATS URL may carry credentials.\n"
        f"BKE_NATS_URL={NATS}\nBKE_AGENT_CLUSTER=prod\nBKE_AGENT_NODE=n1\nBKE_AGENT_BACKEND=host\n"
    )


def test_dry_run_text_shows_every_command_exactly_and_never_the_env_file():
    steps = bootstrap_steps(params())
    text = "\n".join(describe_steps(steps))
    for step in steps:
        assert f"[{step.name}] {remote_command(step.argv)}" in text
    assert NATS not in text and "s3cret" not in text
    assert "ExecStart=/opt/bke-agent/bin/bke-agent-launch" in text  # the unit holds no secret: shown


def test_docs_table_is_generated_from_the_steps():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "agent-bootstrap.md").read_text()
    start, end = "<!-- generated: bke.adapters.ssh.steps_markdown -->\n", "<!-- end generated -->"
    table = doc[doc.index(start) + len(start):doc.index(end)]
    steps = bootstrap_steps(BootstrapParams("prod", "n1", "nats://10.0.0.9:4222", Path("bke-0.1.0-py3-none-any.whl"),
                                            Path("requirements.txt")))
    assert table.strip() == steps_markdown(steps).strip(), "regenerate the table in docs/agent-bootstrap.md with bke.adapters.ssh.steps_markdown"
