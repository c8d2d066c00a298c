"""raylog's one logger tree (``raylog.*``), its structured event lines, and where actors log.

Every package logs under ``raylog.``: ``get_logger(__name__)`` gives ``raylog.actors.replica``,
``raylog.spark_bridge.read`` and so on (``raylog.*`` modules keep their own name), so one
``logging.getLogger("raylog")`` setting covers all of raylog.

Operational events (elections, ISR changes, node loss, reassignment, recovery, rebalances,
fencing) are logged at INFO as one line of ``key=value`` fields, ``event=`` first, so they can
be grepped and parsed the same way whatever wrote them (``event_line``)::

    event=election topic=orders partition=0 leader=2 leader_epoch=5 previous_leader=0 reason=replica_died

Nothing is logged per record or per request.

Inside raylog's actors (``configure_actor_logging``), INFO and above go to ``raylog.log`` in
Ray's log directory of the node (``/tmp/ray/session_latest/logs/raylog.log`` on a local Ray),
which every raylog process on that node appends to; WARNING and above also go to the
process's stderr, which Ray shows on the driver (``log_to_driver``). Ray forwards only its
``worker-*`` files, so INFO lines stay in the file and the user's console shows warnings only.
"""

from __future__ import annotations

import logging
import os
import sys

ROOT = "raylog"
LOG_FILE_NAME = "raylog.log"
"""The file, in Ray's log directory of each node, that raylog's actors on that node append to."""
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s pid=%(process)d %(message)s"

_configured = False


def get_logger(name: str) -> logging.Logger:
    """The logger for module ``name`` inside raylog's tree (``raylog.`` + name unless it is in it)."""
    return logging.getLogger(name if name == ROOT or name.startswith(ROOT + ".") else f"{ROOT}.{name}")


def event_line(event: str, **fields) -> str:
    """``event=<event> k=v ...`` in the order given; values with spaces or quotes are quoted."""
    parts = [f"event={event}"]
    for key, value in fields.items():
        text = ",".join(map(str, value)) if isinstance(value, (list, tuple, set, frozenset)) else str(value)
        if not text or any(c in text for c in ' "=\n'):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        parts.append(f"{key}={text}")
    return " ".join(parts)


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, **fields) -> None:
    """Log one structured event line (see the module doc)."""
    if logger.isEnabledFor(level):
        logger.log(level, event_line(event, **fields))


def configure_actor_logging() -> None:
    """In a raylog actor's process (once): ``raylog.*`` at INFO to ``raylog.log`` in Ray's log
    directory of this node, WARNING and above to stderr. A no-op outside Ray's workers."""
    global _configured
    if _configured:
        return
    _configured = True
    root = logging.getLogger(ROOT)
    root.setLevel(logging.INFO)
    root.propagate = False
    formatter = logging.Formatter(LINE_FORMAT)
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setLevel(logging.WARNING)
    to_stderr.setFormatter(formatter)
    root.addHandler(to_stderr)
    directory = _ray_logs_dir()
    if directory is None:
        return
    try:
        to_file = logging.FileHandler(os.path.join(directory, LOG_FILE_NAME), mode="a", encoding="utf-8")
    except OSError as exc:  # a read-only log directory: warnings still reach stderr
        root.warning("cannot write %s in %s (%s); raylog logs warnings only", LOG_FILE_NAME, directory, exc)
        return
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(formatter)
    root.addHandler(to_file)


def _ray_logs_dir() -> str | None:
    try:
        import ray

        node = ray._private.worker.global_worker.node
        return node.get_logs_dir_path() if node is not None else None
    except Exception:  # noqa: BLE001 - not in a Ray worker
        return None
