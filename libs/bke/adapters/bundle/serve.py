"""`bke bundle serve DIR`: the bundle over plain HTTP, read-only, at the spec's default httpRepo.

Why the standard library's server with a narrower handler: nodes and the dispatcher only GET
files (and pip reads wheels/index.html), so GET and HEAD of regular files under the root are all
it answers. No directory listings; a path that leaves the root (`..`, an absolute path, a
symlink pointing out) is 404, as is anything that is not a regular file. Threads: a thousand
nodes fetch at once during node-env.
"""
from __future__ import annotations

import logging
import os
import posixpath
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["DEFAULT_LISTEN", "make_server", "parse_listen"]

DEFAULT_LISTEN = "127.0.0.1:40080"  # the spec's default httpRepo (bke.core.spec.models.Cluster.http_repo)
log = logging.getLogger("bke.adapters.bundle.serve")


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]") or "0.0.0.0", int(port)


class _ReadOnly(SimpleHTTPRequestHandler):
    server_version = "bke-bundle"
    sys_version = ""

    def __init__(self, *args: Any, root: Path, **kwargs: Any) -> None:
        self.root = root
        super().__init__(*args, directory=str(root), **kwargs)

    def _local(self) -> Path | None:
        raw = unquote(urlsplit(self.path).path)
        parts = [p for p in posixpath.normpath(raw).split("/") if p not in ("", ".")]
        if ".." in parts or "\0" in raw:
            return None
        local = Path(os.path.realpath(self.root.joinpath(*parts)))
        if local != self.root and not local.is_relative_to(self.root):
            return None  # a symlink out of the bundle
        return local if local.is_file() else None

    def send_head(self):  # type: ignore[no-untyped-def]  # the base class's signature
        if self._local() is None:
            self.send_error(404, "not in the bundle")
            return None
        return super().send_head()

    def list_directory(self, path):  # type: ignore[no-untyped-def]
        self.send_error(404, "not in the bundle")
        return None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.info("%s %s", self.address_string(), format % args)


def make_server(root: Path, listen: str = DEFAULT_LISTEN) -> ThreadingHTTPServer:
    """A server bound to `listen` (port 0: any free port) serving `root`; call serve_forever()."""
    host, port = parse_listen(listen)
    root = Path(os.path.realpath(root))
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    server = ThreadingHTTPServer((host, port), partial(_ReadOnly, root=root))
    server.daemon_threads = True
    return server
