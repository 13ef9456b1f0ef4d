"""Lab-only code: the supervisor behind `bke lab install`/`down`. No service imports it (an
import-linter contract checks that); the binary placeholder the lab agent writes is in
`bke.binary_placeholder`."""
