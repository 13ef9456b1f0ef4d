"""A crashed component's own last error line(s), cut from the end of its log: bounded, and with
nothing in it that could be key material.

Why a line of its own and not the log's tail: an upgrade that stops on a rolled-back node shows
one reason, which the operator reads first. The apiserver's `E... run.go:72] "command failed"
err="..."`, cobra's `Error: unknown flag: --x` (printed after a page of usage by some
components) or etcd's `{"level":"fatal",...}` says what broke; the usage text or the goroutine
dump around it does not.

Which lines, best first (the last ones of the best kind found):
1. lines the component marked as errors: klog's `E`/`F` severity (k8s.io/klog/v2 klog.go,
   `formatHeader`: the severity letter, then `mmdd hh:mm:ss.uuuuuu`), cobra's `Error:`
   (spf13/cobra command.go, `ExecuteC`), Go's `panic:` / `fatal error:`, and zap JSON lines of
   level error, fatal or panic (etcd), shown as their `msg` and `error` fields;
2. lines saying they are errors in words (`flag provided but not defined`, Go's flag package),
   unless they call themselves a warning or less (grpc's `WARNING: ...`);
3. else the last lines it wrote.
Repeated lines (the same error on every restart) count once.

What never comes out: a line of a PEM block or naming a private key, the value of a
`password`/`token`/`secret`/`key-data` field, and any long run of base64-like text (upper and
lower case letters and digits together: a key, a certificate, a token). Every line is cut to
`MAX_CHARS`.
"""
from __future__ import annotations

import json
import re

__all__ = ["MAX_CHARS", "MAX_LINES", "error_lines", "scrub"]

MAX_LINES = 2
MAX_CHARS = 240
_KLOG = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]]*\] ?")
_MARKED = re.compile(r"^(Error:|error:|panic:|fatal error:)")
_WORDED = re.compile(r"\b(error|failed|fatal|invalid|refused|cannot|unknown flag|not defined)\b", re.I)
_MILD = re.compile(r"^\[?(WARNING|WARN|INFO|DEBUG)\b", re.I)
_PEM = re.compile(r"-----(BEGIN|END) [A-Z0-9 ]+-----|PRIVATE KEY")
_FIELD = re.compile(r"((?:password|passwd|token|secret|key-data|keydata|private[-_]?key)[\"']?\s*[:=]\s*)"
                    r"(\"[^\"]*\"|'[^']*'|\S+)", re.I)
_BLOB = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
REDACTED = "[redacted]"


def _blob(m: re.Match[str]) -> str:
    text = m[0]
    mixed = any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() for c in text)
    return REDACTED if mixed else text  # a path or a hex digest is one case only: kept


def scrub(line: str) -> str:
    """The line without secret field values and base64-like blobs."""
    line = _FIELD.sub(lambda m: m[1] + REDACTED, line)
    return _BLOB.sub(_blob, line)


def _zap(line: str) -> tuple[int, str] | None:
    """(rank, text) of a zap JSON line (etcd's logs), None if it is none."""
    if not line.startswith("{"):
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    level = str(doc.get("level", ""))
    text = " ".join(str(doc[k]) for k in ("msg", "error") if doc.get(k))
    return (1 if level in ("error", "fatal", "panic", "dpanic") else 3), f"{level}: {text}"


def _ranked(line: str) -> tuple[int, str]:
    """(rank, text): 1 marked an error by the component, 2 worded as one, 3 anything else."""
    zap = _zap(line)
    if zap is not None:
        return zap
    m = _KLOG.match(line)
    if m:
        return (1 if m[1] in "EF" else 3), line
    if _MARKED.match(line):
        return 1, line
    return (2 if _WORDED.search(line) and not _MILD.match(line) else 3), line


def _key(text: str) -> str:
    """What makes two lines the same error: a klog line without its time and thread."""
    m = _KLOG.match(text)
    return text[m.end():] if m else text


def error_lines(log: str, max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS) -> list[str]:
    """The component's last error lines in `log` (its tail), best kind first, oldest first."""
    lines, in_pem = [], False
    for raw in log.splitlines():
        line = raw.strip()
        if _PEM.search(line):
            in_pem = "BEGIN" in line and "END" not in line
            continue
        if in_pem or not line:
            continue
        lines.append(line)
    ranked = [_ranked(line) for line in lines]
    for rank in (1, 2, 3):
        chosen: list[str] = []
        seen: set[str] = set()
        for r, text in reversed(ranked):
            if r != rank or _key(text) in seen:
                continue
            seen.add(_key(text))
            cut = scrub(text)
            chosen.append(cut if len(cut) <= max_chars else cut[:max_chars - 1] + "…")
            if len(chosen) == max_lines:
                break
        if chosen:
            return chosen[::-1]
    return []
