"""`bke-renderer`: run the renderer service until SIGTERM."""
from __future__ import annotations

import asyncio
import sys

from bke.logs import setup_logging

from .app import create_service

__all__ = ["main"]


def main() -> int:
    setup_logging("renderer")
    svc = create_service()
    asyncio.run(svc.app.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
