"""Host-key policy: parsing the options, reading known_hosts, and every accept/refuse decision."""
from __future__ import annotations

import base64
import hashlib
import hmac

import asyncssh
import pytest
from bke.adapters.ssh import (
    Expectation,
    KnownHostsPolicy,
    PinnedPolicy,
    SeenKey,
    SshTarget,
    decide_host_key,
    expectation_for,
    normalize_fingerprint,
    policy_from_options,
    policy_problems,
)

FP_A = "SHA256:" + "A" * 43
FP_B = "SHA256:" + "B" * 42 + "A"
TARGET = "n1 (10.0.0.1:22)"


@pytest.fixture(scope="module")
def keys() -> dict[str, asyncssh.SSHKey]:
    return {alg: asyncssh.generate_private_key(alg) for alg in ("ssh-ed25519", "ecdsa-sha2-nistp256")}


def test_fingerprints_are_openssh_sha256():
    assert normalize_fingerprint(FP_A) == FP_A
    assert normalize_fingerprint(FP_A + "=") == FP_A  # padded form accepted, stored unpadded
    for bad, why in [("A" * 43, "SHA256:"), ("MD5:" + "ab:" * 15 + "ab", "SHA256:"),
                     ("SHA256:!!!", "base64"), ("SHA256:AAAA", "SHA-256")]:
        with pytest.raises(ValueError, match=why):
            normalize_fingerprint(bad)


def test_policy_needs_exactly_one_source_of_trust(tmp_path):
    with pytest.raises(ValueError, match="refusing to connect without verifying"):
        policy_from_options(None, [])
    with pytest.raises(ValueError, match="not both"):
        policy_from_options(tmp_path / "kh", [FP_A])
    assert policy_from_options(tmp_path / "kh", []) == KnownHostsPolicy(tmp_path / "kh")


def test_pins_for_every_node_and_per_node():
    p = policy_from_options(None, [FP_A, f"n2={FP_B}"])
    assert isinstance(p, PinnedPolicy)
    assert (p.for_node("n1"), p.for_node("n2")) == (FP_A, FP_B)
    with pytest.raises(ValueError, match="more than one"):
        policy_from_options(None, [FP_A, FP_B])
    with pytest.raises(ValueError, match="NODE=SHA256"):
        policy_from_options(None, ["n1 = x y"])
    assert policy_problems(policy_from_options(None, [f"n2={FP_B}"]), ["n1", "n2"]) == [
        "no --host-key-fingerprint for node n1"]


def test_known_key_is_accepted():
    d = decide_host_key(TARGET, SeenKey("ssh-ed25519", FP_A), Expectation("the pinned fingerprint", frozenset({FP_A})))
    assert d.accepted and d.fingerprint == FP_A


def test_unknown_host_is_refused_naming_host_and_fingerprint_seen():
    d = decide_host_key(TARGET, SeenKey("ssh-ed25519", FP_A), Expectation("known_hosts /x/kh"))
    assert not d.accepted
    assert TARGET in d.message and "ssh-ed25519 " + FP_A in d.message and "unknown" in d.message
    assert "known_hosts /x/kh" in d.message


def test_mismatched_key_is_refused_naming_both_fingerprints():
    d = decide_host_key(TARGET, SeenKey("ssh-ed25519", FP_B), Expectation("the pinned fingerprint", frozenset({FP_A})))
    assert not d.accepted and "does not match" in d.message
    assert FP_B in d.message and FP_A in d.message and TARGET in d.message and "nothing was sent" in d.message


def test_revoked_wins_over_trusted():
    exp = Expectation("known_hosts kh", frozenset({FP_A}), frozenset({FP_A}))
    d = decide_host_key(TARGET, SeenKey("ssh-ed25519", FP_A), exp)
    assert not d.accepted and "revoked" in d.message


def fp(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


def _hashed(host: str) -> str:
    salt = bytes(range(20))
    digest = hmac.new(salt, host.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _line(pattern: str, key: asyncssh.SSHKey, marker: str = "") -> str:
    pub = key.export_public_key("openssh").decode().strip()
    return f"{marker + ' ' if marker else ''}{pattern} {pub}\n"


def test_known_hosts_entries_by_address_port_name_and_hash(tmp_path, keys):
    ed, ec = keys["ssh-ed25519"], keys["ecdsa-sha2-nistp256"]
    kh = tmp_path / "known_hosts"
    kh.write_text(_line("10.0.0.1", ed) + _line("[10.0.0.2]:2222", ec) + _line("n3", ed) + _line(_hashed("10.0.0.5"), ec))
    policy = KnownHostsPolicy(kh)

    exp, algs = expectation_for(policy, SshTarget("n1", "10.0.0.1"))
    assert exp.trusted == {fp(ed)} and algs == ("ssh-ed25519",) and str(kh) in exp.source
    exp, algs = expectation_for(policy, SshTarget("n2", "10.0.0.2", 2222))
    assert exp.trusted == {fp(ec)} and algs == ("ecdsa-sha2-nistp256",)
    exp, _ = expectation_for(policy, SshTarget("n3", "10.0.0.3"))  # by node name
    assert exp.trusted == {fp(ed)}
    exp, _ = expectation_for(policy, SshTarget("n5", "10.0.0.5"))  # hashed (HashKnownHosts yes)
    assert exp.trusted == {fp(ec)}
    exp, algs = expectation_for(policy, SshTarget("n4", "10.0.0.4"))  # unknown: offer every plain algorithm
    assert exp.trusted == frozenset() and algs[0] == "ssh-ed25519" and not any("cert" in a for a in algs)


def test_known_hosts_revoked_marker(tmp_path, keys):
    ed = keys["ssh-ed25519"]
    kh = tmp_path / "known_hosts"
    kh.write_text(_line("10.0.0.1", ed) + _line("*", ed, "@revoked"))
    exp, _ = expectation_for(KnownHostsPolicy(kh), SshTarget("n1", "10.0.0.1"))
    assert ed.get_fingerprint("sha256") in exp.revoked


def test_known_hosts_problems_are_reported_before_connecting(tmp_path):
    assert policy_problems(KnownHostsPolicy(tmp_path / "absent"), ["n1"])[0].startswith(str(tmp_path / "absent"))
    bad = tmp_path / "bad"
    bad.write_text("garbage\n")
    assert "not a known_hosts file" in policy_problems(KnownHostsPolicy(bad), ["n1"])[0]
