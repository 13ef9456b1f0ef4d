"""Hostile specs: every file of corpus/specs/ names, in `# expect: PATH :: MESSAGE` header lines,
the errors it must produce (PATH exact, or `spec.yaml:*` for a line:column in the file). Each is
loaded and validated as `bke plan` and the planner do: a clear error naming the place, never a
crash, and nothing read past the size limit."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from bke.core.plan import plan_spec_text
from bke.core.spec import MAX_SPEC_BYTES, SpecTooLarge, read_capped
from bke.core.spec.limits import MAX_SCALAR_BYTES

CORPUS = Path(__file__).parent / "corpus" / "specs"
SEED = Path("examples/seed-3m1w.yaml").read_text()


def expectations(raw: bytes) -> list[tuple[str, str]]:
    text = raw.decode("utf-16") if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else raw.decode("latin-1")
    out = []
    for line in text.splitlines():
        if not line.startswith("# expect: "):
            break
        path, _, message = line.removeprefix("# expect: ").partition(" :: ")
        out.append((path, message))
    return out


def matches(path: str, want: str) -> bool:
    return path.startswith("spec.yaml:") if want == "spec.yaml:*" else path == want


def errors_for(raw: bytes) -> list[tuple[str, str]]:
    outcome = plan_spec_text(raw, "spec.yaml")
    return [(e.path, e.message) for e in outcome.errors]


@pytest.mark.parametrize("case", sorted(p.name for p in CORPUS.glob("*.yaml")))
def test_corpus_spec_is_refused_with_its_field(case):
    raw = (CORPUS / case).read_bytes()
    want = expectations(raw)
    got = errors_for(raw)
    if not want:  # a hostile-looking but valid shape (anchors, merge keys): it plans
        assert got == [], got
        return
    for path, message in want:
        assert any(matches(p, path) and message in m for p, m in got), f"{case}: want {path}: {message}; got {got}"
    for p, m in got:  # every message stays readable: no huge value is echoed back
        assert len(m) < 600, (p, m[:200])


def test_duplicate_key_names_both_places():
    got = errors_for((CORPUS / "duplicate-key-block.yaml").read_bytes())
    # the second etcdVersion is where to edit; the first is named by line and column
    assert got == [("spec.yaml:12:7", "duplicate key 'etcdVersion' (first at line 11, column 7); YAML would keep only the later value")]


def test_duplicate_node_name_names_both():
    got = dict(errors_for((CORPUS / "duplicate-node-name.yaml").read_bytes()))
    assert got["nodes[3].metadata.name"] == "duplicate of nodes[1] (line 25): both are named 'seed-master2'"


def test_huge_scalar_is_refused_by_position_without_echoing_it():
    raw = SEED.replace("hostname: node1", "hostname: " + "n" * (MAX_SCALAR_BYTES + 1)).encode()
    (path, message), = errors_for(raw)
    assert path.startswith("spec.yaml:") and f"the limit is {MAX_SCALAR_BYTES}" in message and len(message) < 200


def test_spec_over_the_size_limit_is_refused_before_parsing():
    raw = b"# " + b"x" * MAX_SPEC_BYTES
    (path, message), = errors_for(raw)
    assert path == "spec.yaml" and "the limit is 8388608 (8 MiB)" in message


class Endless(io.RawIOBase):
    """/dev/zero in a test: counts what was read."""

    def __init__(self) -> None:
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        b[:] = b"\0" * len(b)
        self.given += len(b)
        return len(b)


def test_read_capped_stops_at_the_limit_plus_one_byte():
    src = Endless()
    with pytest.raises(SpecTooLarge, match="the limit is 1000"):
        read_capped(src, limit=1000, chunk=64)  # type: ignore[arg-type]
    assert src.given == 1001
    assert read_capped(io.BytesIO(b"x" * 1000), limit=1000) == b"x" * 1000


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_bke_plan_dev_zero_exits_2_with_the_limit():
    bke = Path(sys.executable).parent / "bke"
    r = subprocess.run([str(bke), "plan", "/dev/zero"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"/dev/zero: spec is larger than the limit; the limit is {MAX_SPEC_BYTES}" in r.stdout + r.stderr


def test_the_pure_python_yaml_loader_refuses_the_same_corpus():
    """Without libyaml (PyYAML built without it) the same limits hold: its parser has no nesting
    limit of its own and its composer recurses, so the events pass is what stops a deep document."""
    script = (
        "import yaml, sys\n"
        "del yaml.CSafeLoader\n"
        "from pathlib import Path\n"
        "from bke.core.plan import plan_spec_text\n"
        "from bke.core.spec import yaml_read\n"
        "assert yaml_read._Base is yaml.SafeLoader\n"
        "for name in sys.argv[1:]:\n"
        "    errs = plan_spec_text(Path(name).read_bytes(), 'spec.yaml').errors\n"
        "    print(name.rsplit('/', 1)[-1], '|', errs[0].path, '|', errs[0].message)\n"
    )
    cases = ["deep-flow-nesting-huge.yaml", "billion-laughs.yaml", "duplicate-key-block.yaml", "non-utf8.yaml"]
    r = subprocess.run([sys.executable, "-c", script, *(str(CORPUS / c) for c in cases)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = {line.split(" | ")[0]: line.split(" | ", 2)[1:] for line in r.stdout.splitlines()}
    assert "nesting deeper than 64 levels" in got["deep-flow-nesting-huge.yaml"][1]
    assert "aliases expand to more than" in got["billion-laughs.yaml"][1]
    assert got["duplicate-key-block.yaml"] == ["spec.yaml:12:7", "duplicate key 'etcdVersion' (first at line 11, column 7); YAML would keep only the later value"]
    assert "not UTF-8" in got["non-utf8.yaml"][1]
