"""`bke-certs`: run the certs service until SIGTERM."""
from __future__ import annotations

import asyncio
import sys

from bke.logs import setup_logging

from .app import create_service

__all__ = ["main"]


def main() -> int:
    setup_logging("certs")
    svc = create_service()
    asyncio.run(svc.app.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
