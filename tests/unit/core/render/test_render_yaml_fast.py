"""bke.core.render.yaml_fast gives exactly what yaml.load_all(CSafeLoader) gives."""
from __future__ import annotations

import pytest
import yaml

from bke.core.render.yaml_fast import load_all
from bke.core.versions import KUBERNETES

from tests.unit.core.render.test_render_support import golden_spec, plan_of, render


def _pyyaml(text: str) -> list:
    return [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d is not None]


@pytest.mark.parametrize("minor", list(KUBERNETES))
def test_identical_on_every_rendered_yaml_file(minor: str) -> None:
    rendered = render(plan_of(golden_spec(minor)))
    texts = [f.content.decode() for n in rendered.nodes for f in n.files if f.path.endswith(".yaml")]
    texts += [f.content.decode() for f in rendered.addons]
    texts += [d["data"]["config.conf"] for f in rendered.addons for d in _pyyaml(f.content.decode())
              if d["kind"] == "ConfigMap" and "config.conf" in d.get("data", {})]
    assert len(texts) > 20
    for text in texts:
        assert load_all(text) == _pyyaml(text)


@pytest.mark.parametrize("text", [
    "a: 0755\nb: 0x1f\nc: 1:20\nd: .inf\ne: 2001-12-14\nf: ~\ng: 'x'\nh: yes\ni: '7'\nj: 7.5\nk: -3\nl: null\n",
    "a: &x {b: 1}\nc: *x\n",            # anchors and aliases: PyYAML decides
    "base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n",  # merge keys
    "--- 1\n--- [a, {b: c}]\n---\n",     # several documents, an empty one dropped
    "a: !!str 5\n",                      # explicit tags
    "? [1, 2]\n: x\n",                   # a complex key: PyYAML's own error
])
def test_identical_on_the_odd_corners(text: str) -> None:
    try:
        expected = _pyyaml(text)
    except yaml.YAMLError as exc:
        with pytest.raises(type(exc)):
            load_all(text)
        return
    assert load_all(text) == expected
