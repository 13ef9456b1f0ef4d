"""The pure half of what BKE stores: the record table (each record's keys and where its version
lives) and the per-node file type. The Redis half, which reads and writes them, is
bke.adapters.state."""
