"""What a service or an agent in lab mode uses in place of the outside world: the lab has no
httpRepo and no apiserver.

* `binary_placeholder`  the bytes a lab agent writes instead of downloading a binary
* `calico_placeholder`  a calico-shaped stand-in for upstream's calico.yaml
* `checksums`           the placeholders' checksums, in place of the httpRepo's `.sha256` files
* `manifests`           the calico stand-in, in place of a fetched manifest
* `addons`              an applier that validates every object and applies nothing
* `node_labels`         a Node marker that records the marks
* `drain`               a drainer that records cordon, drain, uncordon and delete per node

A service's wiring picks these when it runs in lab mode, and nothing else of the lab (the
import-linter contracts "no service imports the lab" and "the lab's stand-ins import nothing
else of the lab"). Import the submodules; this package re-exports nothing, so that the agent
loads only the placeholder it writes.
"""
