"""The upgrader service: rolling upgrades of installed clusters (bke.core.upgrade holds the decisions)."""
