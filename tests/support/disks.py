"""Small disks for simulated nodes: a tmpfs mounted on a node's data directory, and filling one up.

Mounting needs root (a sandbox that allows it, as this project's machines); where it is refused,
``can_mount_tmpfs`` says so and tests that need a full disk skip with a line saying why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path


def can_mount_tmpfs() -> bool:
    """Whether this process may mount a tmpfs (root in a sandbox that allows it)."""
    probe = Path(f"/tmp/raylog-mount-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                              capture_output=True, timeout=10)
        if done.returncode != 0:
            return False
        subprocess.run(["umount", str(probe)], capture_output=True, timeout=10)
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def mount_tmpfs(path: Path, size_mb: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], check=True,
                   capture_output=True, timeout=10)


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10)


def fill(ballast: Path) -> None:
    """Fill the file system holding ``ballast`` to its last block with that one file."""
    st = os.statvfs(ballast.parent)
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, max(st.f_bavail * st.f_frsize, 4096))
        except OSError:
            pass  # what could be allocated stays allocated
        os.lseek(fd, 0, os.SEEK_END)
        chunk = b"\0" * 4096
        while True:  # fallocate can leave a little: write until ENOSPC
            try:
                os.write(fd, chunk)
            except OSError:
                break
    finally:
        os.close(fd)
