"""Lab-only code: the supervisor behind `bke lab install`/`down` and what it starts, and
`standins`, what a service or agent in lab mode uses in place of the outside world. No service
imports the lab except, in its wiring, those stand-ins (import-linter contracts check both)."""
