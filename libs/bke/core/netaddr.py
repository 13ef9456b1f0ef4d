"""Address helpers shared by spec validation and the renderer's config checks."""
from __future__ import annotations

import ipaddress

__all__ = ["is_ip"]


def is_ip(text: str) -> bool:
    """True for an IPv4 or IPv6 address (no CIDR, no brackets)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
