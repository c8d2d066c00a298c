"""A node's identity on its disk: ``meta.properties`` at the root of the node's data directory.

Kafka's answer to "is this the same broker?" (MetaProperties in Kafka's metadata module): one small
immutable record per log directory, written once when the directory first joins a cluster, read
and checked every time a process opens the directory. A raylog node that starts on the same
directory is the same node, whatever Ray calls it this session (Ray node ids change on every
start), so its replicas recover in place. The file is Java-properties text, as Kafka's:

    # raylog node identity: written when this directory joined its cluster; do not edit
    version=1
    cluster.id=Vd2p0yCZRhyYfQLbXw7LfA
    node.id=2

- ``version`` is the data directory's format version (FORMAT_VERSION below): the layout of
  everything under the directory, the controller's metadata log included. A directory of a newer
  version than this code knows is refused; older ones are opened by every later version
  (tests/integration/test_data_format.py opens a committed version-1 directory).
- ``cluster.id`` names the cluster the directory belongs to: a directory of another cluster is
  refused (InconsistentClusterIdError naming both ids), never mixed in.
- ``node.id`` is the raylog node id, an int the controller hands out when the directory first
  registers (Kafka's node.id; the Kafka listener's broker id). It never changes.

No Ray here: the controller (for the head node) and the node agents (for the others) use it.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from raylog.errors import InconsistentClusterIdError, LogDirError
from raylog.storage import files

META_FILE = "meta.properties"
FORMAT_VERSION = 1
"""Version history: 1 — node identity (this file), partition directories under
``<data dir>/<topic id[:8]>/<topic>-<partition>``, the controller's metadata log under
``<head data dir>/controller/``. (Directories written before node identity had no meta.properties,
partitions under ``node-<Ray node id>/``; they are not opened as a cluster's nodes.)"""
_HEADER = "# raylog node identity: written when this directory joined its cluster; do not edit"
_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def new_cluster_id() -> str:
    """A random cluster id in Kafka's shape: a UUID as 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class NodeMeta:
    """What ``meta.properties`` holds; immutable, like the file once written."""

    cluster_id: str
    node_id: int
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if not (isinstance(self.cluster_id, str) and _CLUSTER_ID.fullmatch(self.cluster_id)):
            raise LogDirError(f"cluster id must be 1-64 characters of [A-Za-z0-9_-], got {self.cluster_id!r}")
        if not isinstance(self.node_id, int) or isinstance(self.node_id, bool) or not 0 <= self.node_id < 2**31:
            raise LogDirError(f"node id must be an int in [0, 2^31), got {self.node_id!r}")
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1:
            raise LogDirError(f"format version must be an int >= 1, got {self.version!r}")

    def to_text(self) -> str:
        return f"{_HEADER}\nversion={self.version}\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\n"

    def check_cluster(self, cluster_id: str, directory: str | Path) -> None:
        """Raise InconsistentClusterIdError unless this directory belongs to ``cluster_id``."""
        if self.cluster_id != cluster_id:
            raise InconsistentClusterIdError(
                f"data directory {directory} belongs to cluster {self.cluster_id} (node {self.node_id}), not to "
                f"this cluster {cluster_id}: a directory of another cluster is never mixed in; give this node "
                "its own data directory, or start it on its own cluster's")


def read(directory: str | Path) -> NodeMeta | None:
    """The directory's identity, None where it has none yet. A file that is not a valid identity, or
    one of a newer format version than this code, raises LogDirError naming the directory."""
    path = Path(directory) / META_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LogDirError(f"cannot read {path}: {exc}") from None
    fields = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, _, value = line.partition("=")
            fields[key.strip()] = value.strip()
    try:
        version = int(fields["version"])
        meta = NodeMeta(fields["cluster.id"], int(fields["node.id"]), version)
    except (KeyError, ValueError) as exc:
        raise LogDirError(f"{path} is not a raylog node identity (needs version, cluster.id and node.id): "
                          f"{type(exc).__name__}: {exc}") from None
    if meta.version > FORMAT_VERSION:
        raise LogDirError(f"{path} is format version {meta.version}, written by a newer raylog; this one reads "
                          f"versions up to {FORMAT_VERSION}: start the node with the newer raylog")
    return meta


def write(directory: str | Path, meta: NodeMeta) -> None:
    """Write the identity of a directory that has none (atomically, durably). A directory that has
    one keeps it: the same identity is a no-op, another raises LogDirError."""
    directory = Path(directory)
    found = read(directory)
    if found == meta:
        return
    if found is not None:
        raise LogDirError(f"{directory} already is node {found.node_id} of cluster {found.cluster_id}; "
                          f"it cannot become node {meta.node_id} of cluster {meta.cluster_id}")
    files.make_directory(directory)
    files.write_atomically(directory / META_FILE, meta.to_text().encode())
