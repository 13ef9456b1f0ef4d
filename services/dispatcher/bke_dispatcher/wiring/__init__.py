"""The dispatcher's wiring, one module per part it wires (app.py lists them in order): its basics
(service, store, clock), the cluster's API or the lab's stand-ins, the reconcile loops, what it
hears, what it answers, and the loops' life. No logic here: each module builds and registers."""
