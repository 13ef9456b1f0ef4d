"""Query parameters of the read-only pages: `offset` and `limit` for a paged table, checked, so
that a bad value gets a 400 naming the parameter instead of a server error."""
from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from .page import Markup, link

__all__ = ["BadQuery", "bad_query", "page_args", "pager"]


class BadQuery(ValueError):
    """A query parameter is not what the page takes (the message names it)."""


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadQuery(f"{name}: {raw[:40]!r} is not an integer") from None
    if not low <= value <= high:
        raise BadQuery(f"{name}: {value} is outside {low}..{high}")
    return value


def page_args(request: Request, default_limit: int = 100, max_limit: int = 1000) -> tuple[int, int]:
    """(offset, limit) from the query; BadQuery for a value that is not a bounded integer."""
    return _int(request, "offset", 0, 0, 10**9), _int(request, "limit", default_limit, 1, max_limit)


def bad_query(exc: BadQuery) -> PlainTextResponse:
    return PlainTextResponse(f"bad query: {exc}\n", status_code=400)


def pager(path: str, offset: int, limit: int, total: int, **extra: Any) -> Markup:
    """"rows a-b of n" with previous/next links (`extra` query parameters kept)."""
    from urllib.parse import urlencode

    def href(o: int) -> str:
        return f"{path}?{urlencode({**extra, 'offset': o, 'limit': limit})}"

    end = min(total, offset + limit)
    parts = [f"rows {offset + 1 if total else 0}-{end} of {total}"]
    if offset > 0:
        parts.append(link(href(max(0, offset - limit)), "previous"))
    if end < total:
        parts.append(link(href(end), "next"))
    return Markup("<p>" + " ".join(parts) + "</p>")  # numbers and Markup links only
