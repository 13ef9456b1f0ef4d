"""`bke-renderer`: run the renderer service until SIGTERM."""
from __future__ import annotations

import sys

from bke.adapters.bus.service import run_main

from .app import create_service

__all__ = ["main"]


def main() -> int:
    return run_main("renderer", create_service)


if __name__ == "__main__":
    sys.exit(main())
