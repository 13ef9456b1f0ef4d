"""A file whose bytes several nodes share is parsed back once per render, and a problem in it is
still reported for every node that has it."""
from __future__ import annotations

import pytest

from bke.core.render import InvalidOutputError
from bke.core.render import render as render_module
from bke.core.spec.synth import synth_spec_text

from tests.unit.core.render.test_render_support import plan_of, render


def test_shared_bytes_are_checked_once_and_a_problem_is_reported_for_each_node(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_of(synth_spec_text(8, name="once"))
    real = render_module.VALIDATORS["systemd-unit"]
    texts: list[str] = []

    def counting(text, expect):  # type: ignore[no-untyped-def]
        texts.append(text)
        return real(text, expect)

    monkeypatch.setitem(render_module.VALIDATORS, "systemd-unit", counting)
    rendered = render(plan)
    units = [f.content.decode() for n in rendered.nodes for f in n.files if f.path.endswith(".service")]
    assert len(units) > len(set(units)) and sorted(texts) == sorted(set(units))  # each distinct text once

    containerd = next(f.content.decode() for f in rendered.nodes[0].files if f.path.endswith("containerd.service"))
    monkeypatch.setitem(render_module.VALIDATORS, "systemd-unit",
                        lambda text, expect: (["broken on purpose"] if text == containerd else [], {}))
    with pytest.raises(InvalidOutputError) as err:
        render(plan)
    hosts = {f.node for f in err.value.findings if "broken on purpose" in f.message}
    assert hosts == {n.hostname for n in plan.nodes}


def test_equal_parameters_are_rendered_once_and_each_node_keeps_its_own_files(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = plan_of(synth_spec_text(8, name="once"))
    real = render_module.TemplateSet.render
    calls: list[str] = []

    def counting(self, name, params):  # type: ignore[no-untyped-def]
        calls.append(name)
        return real(self, name, params)

    monkeypatch.setattr(render_module.TemplateSet, "render", counting)
    rendered = render(plan)
    by_template = {name: calls.count(name) for name in set(calls)}
    # every node's containerd config is the same: rendered once; kubelet.service names its node
    assert by_template["containerd/config.toml.j2"] == 1
    assert by_template["k8s/kubelet.service.j2"] == len(plan.nodes)
    units = {n.hostname: next(f.content for f in n.files if f.path.endswith("kubelet.service")) for n in rendered.nodes}
    assert all(f"--hostname-override={host}".encode() in unit for host, unit in units.items())
