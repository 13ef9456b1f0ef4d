"""`bke bundle build` and `bke bundle serve`: offline packages for air-gapped sites.

Thin over :mod:`bke.adapters.bundle`: options are read and checked here (bad input exits 2 naming the
option or the config file's field), the library does the work. Exit codes: 0 built / served,
1 a download failed or was refused (checksum), 2 bad input.
"""
from __future__ import annotations

import tempfile
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import typer
import yaml
from bke.core.artefacts import ARCHES
from bke.adapters.bundle import (
    BundleError,
    BundleOptions,
    ChecksumError,
    ChecksumMismatch,
    FetchError,
    HttpFetcher,
    ImageError,
    UPSTREAMS,
    UpstreamError,
    WheelhouseError,
    apply_overrides,
    build_bundle,
    make_server,
    parse_override,
    spec_for_versions,
)
from bke.core.plan import Plan, plan_spec_text
from bke.adapters.ssh.wheel import WheelBuildError, build_wheel, project_root

from .output import EXIT_FAILURE, EXIT_INVALID, die, error_lines, warn_lines
from .spec_input import plan_or_exit

__all__ = ["bundle_app", "register"]

bundle_app = typer.Typer(no_args_is_help=True, add_completion=False,
                         help="Offline packages: an httpRepo tree, the image list and the agent's wheels.")


def register(app: typer.Typer) -> None:
    app.add_typer(bundle_app, name="bundle")


def _pairs(values: list[str], option: str) -> dict[str, str]:
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key.strip() or not value.strip():
            die(f"{option} {v!r}: expected KEY=VALUE", EXIT_INVALID)
        out[key.strip()] = value.strip()
    return out


def _config(path: Path | None) -> dict[str, Any]:
    """The --config file: {upstreams: {project: {url, sums}}, pins: {name: sha256}, registries: {host: url}}."""
    if path is None:
        return {}
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        die(f"--config {path}: {exc}", EXIT_INVALID)
    if not isinstance(doc, dict):
        die(f"--config {path}: expected a mapping with upstreams, pins, registries", EXIT_INVALID)
    for key, value in doc.items():
        if key not in ("upstreams", "pins", "registries"):
            die(f"--config {path}: {key}: unknown key (use upstreams, pins, registries)", EXIT_INVALID)
        if not isinstance(value, dict) or (key == "upstreams" and not all(isinstance(v, dict) for v in value.values())):
            die(f"--config {path}: {key}: expected a mapping", EXIT_INVALID)
    return doc


def _plan(spec: Path | None, kubernetes: str | None, etcd: str | None, containerd: str | None,
          image_repo: str, cni: str) -> Plan:
    by_versions = [kubernetes, etcd, containerd]
    if spec is not None:
        if any(by_versions):
            die("--spec and --kubernetes/--etcd/--containerd exclude each other", EXIT_INVALID)
        return plan_or_exit(spec)
    if not all(by_versions):
        die("give --spec SPEC, or all of --kubernetes, --etcd and --containerd", EXIT_INVALID)
    outcome = plan_spec_text(spec_for_versions(kubernetes or "", etcd or "", containerd or "", image_repo, cni),
                             "<versions>")
    if not outcome.ok:
        error_lines(_as_option(str(e)) for e in outcome.errors)
        raise SystemExit(EXIT_INVALID)
    assert outcome.plan is not None
    return outcome.plan


# The stand-in spec's fields that come from an option: an error on one names the option.
_OPTION_OF = {f"cluster.spec.clusterConfig.cluster.{f}Version": f"--{f}" for f in ("kubernetes", "etcd", "containerd")}


def _as_option(error: str) -> str:
    for path, option in _OPTION_OF.items():
        if error.startswith(path + ":"):
            return option + error[len(path):]
    return error


@bundle_app.command("build")
def build(
    out: Path = typer.Option(..., "--out", help="the bundle's directory (the httpRepo root)"),
    spec: Path | None = typer.Option(None, "--spec", help="a cluster spec: its versions, CNI and imageRepo"),
    kubernetes: str | None = typer.Option(None, "--kubernetes", help="instead of --spec: Kubernetes version"),
    etcd: str | None = typer.Option(None, "--etcd", help="instead of --spec: etcd version"),
    containerd: str | None = typer.Option(None, "--containerd", help="instead of --spec: containerd version"),
    image_repo: str = typer.Option("registry.k8s.io", "--image-repo", help="with versions: the imageRepo"),
    cni: str = typer.Option("calico", "--cni", help="with versions: calico or none"),
    arch: list[str] = typer.Option([], "--arch", help="amd64 and/or arm64 (default: both); repeatable"),
    upstream: list[str] = typer.Option([], "--upstream", help="PROJECT=URL-TEMPLATE or PROJECT.sums=URL-TEMPLATE; "
                                       f"projects: {', '.join(UPSTREAMS)}; repeatable"),
    config: Path | None = typer.Option(None, "--config", help="YAML: upstreams, pins, registries"),
    pin: list[str] = typer.Option([], "--pin", help="FILE=SHA256: the digest you vouch for (e.g. calico.yaml); repeatable"),
    registry: list[str] = typer.Option([], "--registry", help="HOST=URL: a source registry's API (a mirror); repeatable"),
    no_image_digests: bool = typer.Option(False, "--no-image-digests", help="list images without asking registries"),
    no_agent: bool = typer.Option(False, "--no-agent", help="leave out the agent's wheel and wheelhouse"),
    wheel: Path | None = typer.Option(None, "--wheel", help="the BKE wheel to ship (default: built from this checkout)"),
    requirements: Path | None = typer.Option(None, "--requirements", help="default: the checkout's requirements-agent.txt"),
    pip_arg: list[str] = typer.Option([], "--pip-arg", help="passed to every pip call (e.g. --index-url=URL); repeatable"),
) -> None:
    """Download, verify and lay out everything a cluster's nodes fetch, for installing without internet."""
    unknown = [a for a in arch if a not in ARCHES]
    if unknown:
        die(f"--arch {', '.join(unknown)}: supported arches are {', '.join(ARCHES)}", EXIT_INVALID)
    plan = _plan(spec, kubernetes, etcd, containerd, image_repo, cni)
    conf = _config(config)
    overrides: dict[str, dict[str, str]] = {k: dict(v) for k, v in conf.get("upstreams", {}).items()}
    try:
        for text in upstream:
            project, field, value = parse_override(text)
            overrides.setdefault(project, {})[field] = value
        table = apply_overrides(UPSTREAMS, overrides)
    except UpstreamError as exc:
        die(str(exc), EXIT_INVALID)
    pins = {**{str(k): str(v) for k, v in conf.get("pins", {}).items()}, **_pairs(pin, "--pin")}
    registries = {**{str(k): str(v) for k, v in conf.get("registries", {}).items()}, **_pairs(registry, "--registry")}
    opts = BundleOptions(arches=tuple(dict.fromkeys(arch)) or ARCHES, upstreams=table, pins=pins,
                         registries=registries, resolve_images=not no_image_digests, agent=not no_agent,
                         requirements=_requirements(requirements) if not no_agent else None,
                         pip_args=tuple(pip_arg))

    def say(path: str, what: str) -> None:
        print(f"{path}: {what}")

    fetcher = HttpFetcher()
    try:
        with tempfile.TemporaryDirectory(prefix="bke-wheel-") as tmp:
            if not no_agent:
                opts = _with_wheel(opts, wheel, Path(tmp))
            index = build_bundle(plan, out, opts, fetcher, datetime.now(timezone.utc), say)
    except (ChecksumMismatch, ChecksumError, FetchError, BundleError, ImageError, WheelhouseError) as exc:
        die(f"bundle {out}: {exc}", EXIT_FAILURE)
    finally:
        fetcher.close()
    files = cast(list[dict[str, Any]], index["files"])
    warn_lines(f"{f['path']}: upstream publishes no checksum; its sha256 is recorded in bundle.json (pin it with "
               "--pin)" for f in files if f["verified"] == "recorded")
    print(f"bundle {out}: {len(files)} files, index {out / 'bundle.json'}")


def _requirements(path: Path | None) -> Path:
    if path is None:
        root = project_root()
        if root is None:
            die("not running from a source checkout: pass --requirements FILE and --wheel FILE", EXIT_INVALID)
        path = root / "requirements-agent.txt"
    if not path.is_file():
        die(f"--requirements {path}: no such file", EXIT_INVALID)
    return path


def _with_wheel(opts: BundleOptions, wheel: Path | None, work: Path) -> BundleOptions:
    if wheel is not None:
        if not wheel.is_file() or not wheel.name.endswith(".whl"):
            die(f"--wheel {wheel}: not a wheel file", EXIT_INVALID)
        return replace(opts, wheel=wheel)
    root = project_root()
    if root is None:
        die("not running from a source checkout: pass --wheel FILE", EXIT_INVALID)
    try:
        return replace(opts, wheel=build_wheel(root, work))
    except WheelBuildError as exc:
        die(str(exc), EXIT_FAILURE)


@bundle_app.command("serve")
def serve(
    directory: Path = typer.Argument(..., help="a bundle made by `bke bundle build`"),
    listen: str = typer.Option("127.0.0.1:40080", "--listen", help="HOST:PORT (the spec's default httpRepo)"),
) -> None:
    """Serve the bundle read-only over HTTP until interrupted."""
    if not (directory / "bundle.json").is_file():
        die(f"{directory}: no bundle.json; build it with `bke bundle build --out {directory}`", EXIT_INVALID)
    try:
        server = make_server(directory, listen)
    except ValueError as exc:
        die(str(exc), EXIT_INVALID)
    except OSError as exc:
        die(f"--listen {listen}: {exc.strerror or exc}", EXIT_FAILURE)
    host, port = server.server_address[:2]
    print(f"serving {directory} at http://{host}:{port}/ (read-only)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
