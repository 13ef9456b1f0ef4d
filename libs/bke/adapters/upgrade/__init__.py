"""What the upgrade's pure cores (bke.core.upgrade) need from the outside: `quorum` samples a
live etcd cluster's health for `quorum.verdict`."""
