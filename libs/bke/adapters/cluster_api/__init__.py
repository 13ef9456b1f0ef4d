"""What BKE does through a cluster's API (or records in the lab): the addons phase's table
applied in order, server-side apply with admin.conf, the workloads it waits for. Used by the
dispatcher (install) and the upgrader (an upgrade's addons step)."""
