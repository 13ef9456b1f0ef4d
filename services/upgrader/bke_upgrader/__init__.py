"""The upgrader service: rolling upgrades of installed clusters (bke.upgrade holds the decisions)."""
