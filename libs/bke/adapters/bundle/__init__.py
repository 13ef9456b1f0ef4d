"""Offline packages: `bke bundle build` and `bke bundle serve` (see README, "Offline packages").

* :mod:`.upstreams` - where each project is downloaded from (URL templates, overridable);
* :mod:`.sums` - reading upstream's published checksums;
* :mod:`.fetch` - streamed, hashed downloads;
* :mod:`.build` - verify, unpack and lay out the httpRepo tree (`bke.core.artefacts` paths);
* :mod:`.images` - the images a cluster pulls, with digests from the source registry;
* :mod:`.wheelhouse` - the agent's wheels for every supported Python and arch;
* :mod:`.assemble` - one bundle start to end, `bundle.json` last;
* :mod:`.serve` - the read-only HTTP server.
"""
from .assemble import INDEX, BundleOptions, build_bundle, spec_for_versions
from .build import BundleError, BundleFile, bundle_artefacts, downloads, ensure_files
from .fetch import FetchError, HttpFetcher
from .images import DEFAULT_REGISTRIES, Image, ImageError, resolve_digests
from .serve import make_server
from .sums import ChecksumError, ChecksumMismatch, published_sha256
from .upstreams import UPSTREAMS, Upstream, UpstreamError, apply_overrides, parse_override
from .wheelhouse import WheelhouseError, download_commands, ensure_wheelhouse

__all__ = [
    "DEFAULT_REGISTRIES", "INDEX", "UPSTREAMS", "BundleError", "BundleFile", "BundleOptions", "ChecksumError",
    "ChecksumMismatch", "FetchError", "HttpFetcher", "Image", "ImageError", "Upstream", "UpstreamError",
    "WheelhouseError", "apply_overrides", "build_bundle", "bundle_artefacts", "download_commands", "downloads",
    "ensure_files", "ensure_wheelhouse", "make_server", "parse_override", "published_sha256", "resolve_digests",
    "spec_for_versions",
]
