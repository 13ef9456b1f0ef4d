"""The dispatcher's dashboard: every cluster, one cluster's phases, nodes and latest
events updating live, one node's step output; read only, through the dispatcher's own read
model (`bke_dispatcher.status`, its own records), never another service's keys.

    events.py   the latest transitions this dispatcher published (bounded, in memory)
    view.py     the pure core: filter and page nodes, the phase timeline, the views
    read.py     the reads (StatusReader, DispatcherState) behind one class
    pages.py    the HTML (bke.adapters.http.page pieces: everything escaped)
    routes.py   the GET routes and their JSON twins under /api
"""
from __future__ import annotations

from .events import RecentEvents
from .read import DashboardReader
from .routes import dashboard_routes

__all__ = ["DashboardReader", "RecentEvents", "dashboard_routes"]
