"""The version-3 key table (containerd 2.x): what we render passes it, a misspelt key does not.

containerd 2.x ignores a key it does not know, and Debian's containerd (1.6) knows no version 3,
so this table (cited from containerd's source in bke.core.render.containerd_keys) is the only check of
the keys themselves.
"""
from __future__ import annotations

import tomllib

import pytest

from bke.core.render.containerd_keys import IMAGES, RUNTIME, v3_key_problems
from bke.core.render.validate import VALIDATORS

from tests.unit.core.render.test_render_support import golden_spec, plan_of, render
from tests.unit.core.render.test_render_validation import EXPECT

CONFIG = "/etc/containerd/config.toml"


@pytest.mark.parametrize("minor", ["1.33", "1.37"])  # containerd 2.x in the upstream pairing
def test_every_rendered_2x_config_uses_only_keys_containerd_reads(minor: str) -> None:
    rendered = render(plan_of(golden_spec(minor)))
    texts = {rendered.node(n.hostname).file(CONFIG).content.decode() for n in rendered.nodes}
    for text in texts:
        assert text.startswith("# containerd 2.x") and v3_key_problems(tomllib.loads(text)) == []


def _config() -> str:
    return render(plan_of(golden_spec("1.33"))).node("m1").file(CONFIG).content.decode()


@pytest.mark.parametrize(("old", "new", "fragment"), [
    ("SystemdCgroup = true", "SystemdCgroups = true", "SystemdCgroups: containerd 2.x has no such key"),
    ("    sandbox = ", "    sandbox_image = ", "pinned_images.sandbox_image: containerd 2.x has no such key"),
    # containerd 1.7's key in the 2.x images section: read by nobody in 2.x.
    (f'[plugins."{IMAGES}"]\n', f'[plugins."{IMAGES}"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n', "sandbox_image: containerd 2.x has no such key"),
    (f'[plugins."{RUNTIME}"]\n', '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "x"\n\n' + f'[plugins."{RUNTIME}"]\n', '"io.containerd.grpc.v1.cri": containerd 2.x has no such key'),
    (f'[plugins."{RUNTIME}"]\n', f'[plugins."{RUNTIME}"]\n\n  [plugins."{RUNTIME}".cni]\n    bin_dir = "/opt/cni/bin"\n', "a section this check does not describe"),
])
def test_a_key_containerd_would_ignore_is_named(old: str, new: str, fragment: str) -> None:
    text = _config()
    assert old in text
    broken = text.replace(old, new, 1)
    problems = v3_key_problems(tomllib.loads(broken))
    assert any(fragment in p for p in problems), problems
    # ... and the renderer's own validator of the file refuses it too.
    assert VALIDATORS["containerd-v3"](broken, EXPECT)[0]
