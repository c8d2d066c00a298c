"""raylog's operational events as an operator reads them: the ``event=...`` lines of raylog.log in
the Ray session's log directory (raylog/logs.py writes them there from every actor)."""

from __future__ import annotations

import re
from pathlib import Path

import ray

from raylog.logs import LOG_FILE_NAME

_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def log_file() -> Path:
    """raylog.log of the Ray session this driver is attached to."""
    return Path(ray._private.worker.global_worker.node.get_logs_dir_path()) / LOG_FILE_NAME


def events(path: Path | None = None) -> list[tuple[str, dict]]:
    """(level, fields) of every event line in the file ([] while there is none)."""
    path = path or log_file()
    if not path.exists():
        return []
    found = []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split(" ", 5)
        if len(parts) == 6 and " event=" in f" {parts[5]}":
            body = parts[5][parts[5].index("event="):]
            found.append((parts[2], {k: v.strip('"') for k, v in _FIELD.findall(body)}))
    return found


def logged(event: str, **fields: str) -> list[dict]:
    """The fields of every ``event`` line whose fields include these."""
    return [f for _, f in events() if f.get("event") == event and fields.items() <= f.items()]
