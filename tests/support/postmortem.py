"""Why a test run's Ray processes died, printed after a failed run (make test, make test-long).

A test process attached to a Ray cluster is ended by its core worker, with exit code 1 and nothing
on its own output, when its raylet dies or the GCS stops answering; pytest then prints no summary.
The reason is only in Ray's session logs, which CI does not keep: this prints the lines that give
it from the newest SESSIONS sessions started since the run began (the process ended in the last).

    python -m tests.support.postmortem --since <unix time>
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

SIGNS = re.compile(
    r"mistakenly been marked as dead|[Hh]ealth check failed|Exiting because|GCS may have been "
    r"killed|Check failed|SIGSEGV|SIGABRT|out of memory|Raylet is dead|death reason = (?!EXPECTED_TERMINATION)")
LOGS = ("gcs_server.out", "raylet*.out", "python-core-driver-*.log", "raylet*.err", "gcs_server.err")
LIMIT = 60
SESSIONS = 2


def ray_sessions(since: float) -> list[Path]:
    root = Path(os.environ.get("RAY_TMPDIR", tempfile.gettempdir())) / "ray"
    sessions = [p for p in root.glob("session_2*") if p.is_dir() and p.stat().st_mtime >= since]
    return sorted(sessions)[-SESSIONS:]  # named for the time each started


def telling_lines(session: Path) -> list[str]:
    out = []
    for pattern in LOGS:
        for log in sorted((session / "logs").glob(pattern)):
            try:
                text = log.read_text(errors="replace")
            except OSError:
                continue
            out += [f"{session.name}/{log.name}: {line.strip()[:300]}" for line in text.splitlines() if SIGNS.search(line)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--since", type=float, required=True, help="unix time the run began")
    lines = [line for s in ray_sessions(parser.parse_args().since) for line in telling_lines(s)]
    print(f"\n=== Ray's newest sessions' logs: {len(lines)} lines on a process's end (the last {LIMIT}) ===")
    for line in lines[-LIMIT:]:
        print(line)


if __name__ == "__main__":
    main()
