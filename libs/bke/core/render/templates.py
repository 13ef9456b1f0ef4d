"""Template sets per version range, loaded once per version set.

One template set for every version cannot follow flags and file layouts that change between
releases. Here each family (Kubernetes, etcd, containerd) has one folder per version range, and
TEMPLATE_RANGES (data) says which folder serves which versions; `common/` holds what does not
depend on a version (the shared pod macros, haproxy, keepalived, registry hosts files).

Environments are built lazily (never at import time) and cached per (kubernetes, etcd,
containerd) folder triple, with StrictUndefined: a template that reads a parameter the model
does not have fails loudly instead of rendering an empty string.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import jinja2

from bke.core.flagrules.gates import VersionSet

__all__ = ["TEMPLATE_RANGES", "TEMPLATE_DIR", "TemplateRange", "TemplateSet", "template_set"]

TEMPLATE_DIR = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class TemplateRange:
    family: str  # kubernetes | etcd | containerd
    since: tuple[int, int]
    until: tuple[int, int] | None  # exclusive
    folder: str  # under templates/
    why: str

    def covers(self, major: int, minor: int) -> bool:
        return self.since <= (major, minor) and (self.until is None or (major, minor) < self.until)


TEMPLATE_RANGES: tuple[TemplateRange, ...] = (
    TemplateRange("kubernetes", (1, 31), None, "kubernetes/1.31", "kubeadm v1beta4-era manifests; kubelet v1beta1 and kube-proxy v1alpha1 configs"),
    TemplateRange("etcd", (3, 5), (3, 6), "etcd/3.5", "probes branch on /livez,/readyz (3.5.11+)"),
    TemplateRange("etcd", (3, 6), None, "etcd/3.6", "always /livez,/readyz; renamed flags come from the gates"),
    TemplateRange("containerd", (1, 7), (2, 0), "containerd/1.7", "config.toml schema version 2"),
    TemplateRange("containerd", (2, 0), None, "containerd/2.0", "config.toml schema version 3"),
)


def _folder(family: str, major: int, minor: int) -> str:
    for r in TEMPLATE_RANGES:
        if r.family == family and r.covers(major, minor):
            return r.folder
    raise LookupError(f"no template set for {family} {major}.{minor}")  # versions.py and this table disagree


def _q(value: object) -> str:
    """A YAML/TOML-safe double-quoted scalar (JSON strings are valid in both)."""
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class TemplateSet:
    folders: tuple[str, str, str]
    env: jinja2.Environment

    def render(self, name: str, params: object) -> str:
        return self.env.get_template(name).render(p=params)


@functools.lru_cache(maxsize=32)
def _load(k8s: str, etcd: str, containerd: str) -> TemplateSet:
    loader = jinja2.PrefixLoader(
        {
            "k8s": jinja2.FileSystemLoader(TEMPLATE_DIR / k8s),
            "etcd": jinja2.FileSystemLoader(TEMPLATE_DIR / etcd),
            "containerd": jinja2.FileSystemLoader(TEMPLATE_DIR / containerd),
            "common": jinja2.FileSystemLoader(TEMPLATE_DIR / "common"),
        }
    )
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        auto_reload=False,  # loaded once: no stat() per render
    )
    env.filters["q"] = _q
    for name in env.list_templates():  # compile everything now, so a syntax error shows at load
        if not name.rsplit("/", 1)[-1].startswith("_"):
            env.get_template(name)
    return TemplateSet((k8s, etcd, containerd), env)


def template_set(versions: VersionSet) -> TemplateSet:
    k, e, c = versions.kubernetes, versions.etcd, versions.containerd
    return _load(_folder("kubernetes", k.major, k.minor), _folder("etcd", e.major, e.minor),
                 _folder("containerd", c.major, c.minor))
