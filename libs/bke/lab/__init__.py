"""Lab-only helpers shared by the lab command, the lab agent backend and the dispatcher."""
