"""Bench-only: profile a lab service process (bench/upgrade.py --profile DIR [--gc-only]), or
time the upgrader's drains (bench/real_upgrade.py; the end of this file).

Why a sitecustomize: the services are started by the lab supervisor as their own console
scripts; putting this directory on PYTHONPATH with BKE_BENCH_PROFILE_DIR set profiles the
processes named in BKE_BENCH_PROFILE (e.g. "bke-upgrader") without any code in the services.
SIGUSR2 starts afresh (the bench sends it when the upgrade is asked for), SIGUSR1 writes
<dir>/<script>.pstats (cProfile, main thread: the event loop; its timer is wall-clock, so on a
loaded machine descheduled time lands on whatever ran) and <dir>/<script>.gc (the garbage
collector's CPU seconds by generation, from gc.callbacks). BKE_BENCH_PROFILE_MODE=gc: only the
collector's account, no cProfile (its overhead would distort the figure).
"""
import os
import sys

_dir = os.environ.get("BKE_BENCH_PROFILE_DIR")
_names = os.environ.get("BKE_BENCH_PROFILE", "").split(",")
_me = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
if _dir and _me and _me in _names:
    import cProfile
    import gc
    import signal
    import time

    _cprofile = os.environ.get("BKE_BENCH_PROFILE_MODE", "cprofile") == "cprofile"
    _prof = [cProfile.Profile() if _cprofile else None]
    _gc: dict = {"t0": 0.0, "by_gen": {}}

    def _gc_timer(phase, info):
        if phase == "start":
            _gc["t0"] = time.process_time()
        else:
            n, s = _gc["by_gen"].get(info["generation"], (0, 0.0))
            _gc["by_gen"][info["generation"]] = (n + 1, s + time.process_time() - _gc["t0"])

    gc.callbacks.append(_gc_timer)

    def _restart(signum, frame):  # noqa: ARG001
        _gc["by_gen"] = {}
        _gc["cpu0"] = time.process_time()
        if _prof[0] is not None:
            _prof[0].disable()
            _prof[0] = cProfile.Profile()
            _prof[0].enable()

    def _dump(signum, frame):  # noqa: ARG001
        if _prof[0] is not None:
            _prof[0].disable()
            _prof[0].dump_stats(os.path.join(_dir, f"{_me}.pstats"))
        cpu = time.process_time() - _gc.get("cpu0", 0.0)
        gens = ", ".join(f"gen{g}: {n} in {s:.2f} s" for g, (n, s) in sorted(_gc["by_gen"].items()))
        total = sum(s for _, s in _gc["by_gen"].values())
        with open(os.path.join(_dir, f"{_me}.gc"), "w") as f:
            f.write(f"GC CPU {total:.2f} s of {cpu:.2f} s CPU ({gens}); objects tracked now {len(gc.get_objects())}\n")

    signal.signal(signal.SIGUSR2, _restart)
    signal.signal(signal.SIGUSR1, _dump)

# Bench-only: bench/real_upgrade.py's drain times. With BKE_BENCH_DRAIN_LOG=PATH, the upgrader
# (bke-upgrader) appends a line to PATH per call of its drainer through the cluster's API
# (bke.adapters.drain.KubernetesDrainer: a batch cordoned and drained, or uncordoned): what it
# did, how many nodes, the first of them, and the seconds the call took. No code in the service.
_drain_log = os.environ.get("BKE_BENCH_DRAIN_LOG")
if _drain_log and _me == "bke-upgrader":
    import functools
    import json
    import time as _time

    from bke.adapters.drain import KubernetesDrainer

    def _timed(what, fn):
        @functools.wraps(fn)
        async def wrapper(self, plan, hosts, *args, **kw):
            t0 = _time.monotonic()
            try:
                return await fn(self, plan, hosts, *args, **kw)
            finally:
                line = {"what": what, "nodes": len(hosts), "first": hosts[0] if hosts else "",
                        "s": round(_time.monotonic() - t0, 3), "at": _time.time()}
                with open(_drain_log, "a") as f:
                    f.write(json.dumps(line) + "\n")
        return wrapper

    KubernetesDrainer.cordon_and_drain = _timed("drain", KubernetesDrainer.cordon_and_drain)
    KubernetesDrainer.uncordon = _timed("uncordon", KubernetesDrainer.uncordon)
