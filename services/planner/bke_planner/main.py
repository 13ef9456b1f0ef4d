"""`bke-planner`: run the planner service until SIGTERM."""
from __future__ import annotations

import asyncio
import sys

from bke.logs import setup_logging

from .app import create_service

__all__ = ["main"]


def main() -> int:
    setup_logging("planner")
    svc = create_service()
    asyncio.run(svc.app.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
