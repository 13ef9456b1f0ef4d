"""Where `bke bundle build` downloads each project from, as one data table of URL templates.

Why a table: an air-gapped site points one row at its mirror (`--upstream containerd=URL` or a
config file) and everything else stays as upstream publishes it. Each row names the file
upstream publishes (a binary, an archive or a manifest), where its checksum is published and in
what form, and which archive member is which file of the httpRepo tree.

Template fields: `{version}` (no leading "v"), `{arch}` (amd64 | arm64, or the row's own name for
it, `arch_names`), `{file}` (the tree's file name, e.g. kubelet), `{build}` (what follows "+" in
the version: python-build-standalone's release tag); a checksum template may also use `{url}` (the download's own URL) and
`{dir}` (that URL without its last path segment).

Each row's layout, read from upstream (cited beside the row):
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Mapping

from bke.core.pythons import STANDALONE

__all__ = ["UPSTREAMS", "Upstream", "UpstreamError", "apply_overrides", "parse_override"]


class UpstreamError(ValueError):
    """A malformed `--upstream` override or config entry."""


@dataclass(frozen=True)
class Upstream:
    project: str
    url: str  # the published file (binary, archive or manifest)
    # the published checksum (sha256sum output or a bare digest); None: upstream publishes none
    sums: str | None
    # the archive member that is the tree's `{file}`; None: the download is the file itself
    member: str | None = None
    per_file: bool = False  # one download per tree file (dl.k8s.io), not one per (version, arch)
    arch_names: tuple[tuple[str, str], ...] = ()  # BKE arch -> upstream's name, when it differs

    def fields(self, version: str, arch: str | None, file: str) -> dict[str, str]:
        return {"version": version, "arch": dict(self.arch_names).get(arch or "", arch or ""), "file": file,
                "build": version.partition("+")[2]}

    def download_url(self, version: str, arch: str | None, file: str) -> str:
        return self.url.format(**self.fields(version, arch, file))

    def sums_url(self, version: str, arch: str | None, file: str) -> str | None:
        if self.sums is None:
            return None
        url = self.download_url(version, arch, file)
        return self.sums.format(url=url, dir=url.rsplit("/", 1)[0], **self.fields(version, arch, file))

    def member_name(self, file: str) -> str | None:
        return None if self.member is None else self.member.format(file=file)


UPSTREAMS: dict[str, Upstream] = {u.project: u for u in (
    # dl.k8s.io serves each binary and a `.sha256` beside it holding the bare digest
    # (kubernetes/website content/en/docs/tasks/tools/install-kubectl-linux.md: "curl -LO
    # https://dl.k8s.io/release/vX.Y.Z/bin/linux/amd64/kubectl" and "kubectl.sha256").
    Upstream("kubernetes", "https://dl.k8s.io/release/v{version}/bin/linux/{arch}/{file}", "{url}.sha256",
             per_file=True),
    # containerd's release workflow: `tar czf containerd-<v>-linux-<arch>.tar.gz bin/` and
    # `sha256sum $TARFILE > $TARFILE.sha256sum` (containerd/containerd .github/workflows/release.yml;
    # docs/getting-started.md "Step 1": containerd-<VERSION>-<OS>-<ARCH>.tar.gz, extract under
    # /usr/local). The runc shim containerd-shim-runc-v2 is bin/ in the same tarball.
    Upstream("containerd",
             "https://github.com/containerd/containerd/releases/download/v{version}/containerd-{version}-linux-{arch}.tar.gz",
             "{url}.sha256sum", member="bin/{file}"),
    # runc publishes bare binaries runc.<arch> and one runc.sha256sum for all of them
    # (opencontainers/runc script/release_build.sh: `sha256sum runc.<arch>... > runc.sha256sum`).
    Upstream("runc", "https://github.com/opencontainers/runc/releases/download/v{version}/runc.{arch}",
             "{dir}/runc.sha256sum"),
    # cni-plugins-linux-<arch>-v<v>.tgz of the plugins at the archive's root (`tar -C bin -caf ... .`,
    # so members are ./bridge etc.) and `sha256sum $f > $f.sha256` beside it
    # (containernetworking/plugins scripts/release.sh).
    Upstream("cni-plugins",
             "https://github.com/containernetworking/plugins/releases/download/v{version}/cni-plugins-linux-{arch}-v{version}.tgz",
             "{url}.sha256", member="./{file}"),
    # crictl-v<v>-linux-<arch>.tar.gz holds the one binary `crictl` (kubernetes-sigs/cri-tools
    # hack/release.sh: `tar zcvf .../crictl-$VERSION-$os-$arch.tar.gz -C ... crictl`); releases
    # carry a `.sha256` asset beside each tarball (bare digest; read from the release assets,
    # not from a script in the repository: checked on paper only).
    Upstream("crictl",
             "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{version}/crictl-v{version}-linux-{arch}.tar.gz",
             "{url}.sha256", member="{file}"),
    # calico's manifest as tagged in its repository (projectcalico/calico manifests/calico.yaml at
    # the release tag). No checksum is published for it: the bundle pins it by a digest the user
    # gives (`pins` in the config, --pin) or, failing that, records the digest it saw in
    # bundle.json and says so (trust on first download).
    Upstream("calico", "https://raw.githubusercontent.com/projectcalico/calico/v{version}/manifests/{file}", None),
    # python-build-standalone's relocatable CPython (bke.core.pythons.STANDALONE), kept as the archive.
    # Asset `cpython-{python}+{tag}-{triple}-install_only_stripped.tar.gz` ({arch} here is the
    # target triple, {build} the release tag), and one `SHA256SUMS` per release
    # in sha256sum's form (`<hex>  <asset name>` per line) that the release tool writes from the
    # digests of what it uploads (astral-sh/python-build-standalone src/github.rs,
    # command_upload_release_distributions). The SHA256SUMS asset name is read from that tool, not
    # from a downloaded release: checked on paper only.
    Upstream("python",
             "https://github.com/astral-sh/python-build-standalone/releases/download/{build}/"
             "cpython-{version}-{arch}-install_only_stripped.tar.gz",
             "{dir}/SHA256SUMS", arch_names=STANDALONE.triples),
)}

_OVERRIDE = re.compile(r"^(?P<project>[a-z0-9-]+)(?:\.(?P<field>url|sums))?=(?P<value>.+)$")


def parse_override(text: str) -> tuple[str, str, str]:
    """`project=URL-template` (the download) or `project.sums=URL-template` (its checksum)."""
    m = _OVERRIDE.match(text.strip())
    if not m:
        raise UpstreamError(f"--upstream {text!r}: expected PROJECT=URL-TEMPLATE or PROJECT.sums=URL-TEMPLATE")
    return m["project"], m["field"] or "url", m["value"]


def apply_overrides(table: Mapping[str, Upstream], overrides: Mapping[str, Mapping[str, str]]) -> dict[str, Upstream]:
    """The table with `{project: {"url": ..., "sums": ...}}` applied; unknown projects and templates
    with unknown fields are refused (a typo would otherwise download from upstream silently)."""
    out = dict(table)
    for project, fields in overrides.items():
        if project not in out:
            raise UpstreamError(f"upstreams.{project}: unknown project; known: {', '.join(sorted(out))}")
        for field, value in fields.items():
            if field not in ("url", "sums"):
                raise UpstreamError(f"upstreams.{project}.{field}: unknown field; use url or sums")
            _check_template(f"upstreams.{project}.{field}", value, field)
        row = out[project]
        out[project] = replace(row, url=fields.get("url", row.url), sums=fields.get("sums", row.sums))
    return out


def _check_template(where: str, value: str, field: str) -> None:
    allowed = {"version", "arch", "file", "build"} | ({"url", "dir"} if field == "sums" else set())
    names = set(re.findall(r"{([^{}]*)}", value))
    if unknown := names - allowed:
        raise UpstreamError(f"{where}: unknown template field(s) {', '.join(sorted(unknown))}; allowed: "
                            f"{', '.join(sorted(allowed))}")
    if not value.startswith(("http://", "https://")):
        raise UpstreamError(f"{where}: {value!r} is not an http:// or https:// URL template")
