"""Running external commands with bounded time and clear errors (internal helper)."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence

from infra.errors import CommandError

log = logging.getLogger("jbodlab.infra")


def run(argv: Sequence[str], *, timeout_s: float = 120.0, check: bool = True,
        input_text: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (no shell), capture text output; raise CommandError on rc != 0 if ``check``."""
    argv = [str(a) for a in argv]
    log.debug("run: %s", " ".join(argv))
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              input=input_text, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise CommandError(argv, -1, f"timed out after {timeout_s:.0f} s") from exc
    except FileNotFoundError as exc:
        raise CommandError(argv, 127, f"{argv[0]}: not installed") from exc
    if check and proc.returncode != 0:
        raise CommandError(argv, proc.returncode, proc.stderr or proc.stdout)
    return proc


def ok(argv: Sequence[str], *, timeout_s: float = 60.0) -> bool:
    """True when the command exits 0 (output discarded, never raises)."""
    try:
        return run(argv, timeout_s=timeout_s, check=False).returncode == 0
    except CommandError:
        return False
