"""Reading a spec file for a command: one place for missing files and plan errors."""
from __future__ import annotations

from pathlib import Path

from bke.core.plan import Plan, PlanOutcome, plan_spec_text
from bke.core.spec import SpecTooLarge, read_capped

from .output import EXIT_INVALID, die, error_lines, warn_lines

__all__ = ["read_spec_text", "plan_or_exit", "outcome_for"]


def read_spec_text(path: Path) -> bytes:
    """The file's bytes, refused at the size limit before it is read whole (`/dev/zero`, a FIFO)."""
    try:
        with path.open("rb") as f:
            return read_capped(f)  # type: ignore[arg-type]  # BufferedReader is a BinaryIO
    except SpecTooLarge as exc:
        die(f"{path}: {exc}", EXIT_INVALID)
    except IsADirectoryError:
        die(f"{path}: is a directory, not a spec file", EXIT_INVALID)
    except FileNotFoundError:
        die(f"{path}: no such file", EXIT_INVALID)
    except OSError as exc:
        die(f"{path}: {exc.strerror}", EXIT_INVALID)


def outcome_for(path: Path) -> PlanOutcome:
    return plan_spec_text(read_spec_text(path), str(path))


def plan_or_exit(path: Path) -> Plan:
    """Plan the spec, or print every error (`ERROR <path>: <message>`) and exit 2."""
    outcome = outcome_for(path)
    warn_lines(outcome.warnings)
    if not outcome.ok:
        error_lines(str(e) for e in outcome.errors)
        raise SystemExit(EXIT_INVALID)
    assert outcome.plan is not None
    return outcome.plan
