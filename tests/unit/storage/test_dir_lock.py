"""The directory lock: one live process per directory, freed when its holder dies however it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from raylog.errors import DataDirectoryInUseError
from raylog.storage.dir_lock import DirectoryLock

HOLDER = textwrap.dedent("""
    import sys, time
    from raylog.storage.dir_lock import DirectoryLock
    lock = DirectoryLock(sys.argv[1])
    lock.acquire()
    print("held", flush=True)
    sys.stdin.readline()  # until the parent closes our stdin (or kills us)
""")


@pytest.fixture
def holder(tmp_path):
    """A child process holding the lock of ``tmp_path``; killed at the end."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert child.stdout.readline().strip() == "held"
        yield child
    finally:
        child.kill()
        child.wait()


def test_a_held_directory_is_refused_naming_the_holder(tmp_path, holder):
    lock = DirectoryLock(tmp_path, "give each node its own")
    assert not lock.try_acquire()
    with pytest.raises(DataDirectoryInUseError) as refused:
        lock.acquire()
    assert f"pid {holder.pid}" in str(refused.value) and "give each node its own" in str(refused.value)


def test_the_lock_is_free_once_its_holder_is_killed(tmp_path, holder):
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    lock = DirectoryLock(tmp_path)
    lock.acquire()
    assert lock.held and lock.holder() == os.getpid()
    lock.release()


def test_acquire_waits_for_a_holder_that_exits(tmp_path, holder):
    lock = DirectoryLock(tmp_path)
    holder.stdin.close()  # the holder exits when its stdin ends
    lock.acquire(timeout_s=60)
    assert lock.held
    lock.release()


def test_taking_a_lock_this_process_holds_again_is_a_no_op(tmp_path):
    lock = DirectoryLock(tmp_path)
    assert lock.try_acquire() and lock.try_acquire()
    lock.release()
    assert not lock.held
