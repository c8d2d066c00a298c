"""A node's data directory: its identity (meta.properties), its lock, and the partitions under it.

    <data dir>/
      meta.properties                      this node's identity (node_meta.py)
      .lock                                held by the process speaking for the node (dir_lock.py)
      controller/__cluster_metadata-0/     the controller's metadata log (the head node only)
      <topic id[:8]>/<topic>-<partition>/  one partition replica's log (files.py lists its files)

The controller's metadata names a replica's directory relative to its node's data directory, so a
node's disk can be mounted somewhere else, or moved to another machine, and still be found; a
relative path that would leave the data directory is refused before anything touches the disk.

Owned by one process (the node agent, or the controller on the head node); not thread-safe.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from raylog.errors import InvalidRequestError, LogDirError
from raylog.storage import files, node_meta
from raylog.storage.dir_lock import DirectoryLock
from raylog.storage.node_meta import NodeMeta

CONTROLLER_DIR = "controller"
METADATA_LOG_DIR = "__cluster_metadata-0"


class NodeDirectory:
    def __init__(self, path: str | Path):
        self.path = Path(os.path.expanduser(str(path))).absolute()
        self.lock = DirectoryLock(self.path, "each Ray node needs its own data directory (set the raylog.io/data-dir "
                                             "node label, or RAYLOG_DATA_DIR in the node's environment)")

    @property
    def metadata_log_path(self) -> Path:
        return self.path / CONTROLLER_DIR / METADATA_LOG_DIR

    def identity(self) -> NodeMeta | None:
        """The identity written in the directory, None for a directory that has none yet."""
        return node_meta.read(self.path)

    def format(self, meta: NodeMeta) -> None:
        """Give the directory its identity (once; the same again is a no-op, another is refused)."""
        node_meta.write(self.path, meta)

    def resolve(self, relative: str) -> Path:
        """The absolute path of a partition directory named relative to this data directory.
        InvalidRequestError for a name that is absolute or would leave it (a request never makes
        the node touch a path outside its data directory)."""
        if not isinstance(relative, str) or not relative or os.path.isabs(relative) or "\0" in relative:
            raise InvalidRequestError(f"a partition directory is named relative to the node's data directory, "
                                      f"got {relative!r}")
        path = (self.path / relative).resolve()
        if path == self.path.resolve() or self.path.resolve() not in path.parents:
            raise InvalidRequestError(f"partition directory {relative!r} is outside the data directory {self.path}")
        return path

    def remove_partition(self, relative: str, topic_id: str) -> bool:
        """Delete a partition directory if it still belongs to the topic incarnation ``topic_id``
        (or to none), then its topic's directory once that is empty. True if it is gone."""
        path = self.resolve(relative)
        owner = files.read_text_value(path / files.PARTITION_METADATA_FILE)
        if owner not in (None, topic_id):
            return False
        shutil.rmtree(path, ignore_errors=True)
        try:
            path.parent.rmdir()
        except OSError:
            pass  # other partitions of the topic are still there
        return not path.exists()

    def check_writable(self) -> None:
        """LogDirError unless the directory exists (created if missing) and this process may write it."""
        try:
            files.make_directory(self.path)
        except OSError as exc:
            raise LogDirError(f"cannot create the data directory {self.path}: {exc}") from None
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise LogDirError(f"the data directory {self.path} is not writable by this process")
