"""Pausing a process the way the fault tests mean it: stopped before the next step begins.

``kill(pid, SIGSTOP)`` returns before a multi-threaded process has stopped. Linux wakes one
thread to take the signal and only that thread, once it runs, stops the others; until then
they run on. On this 2-core machine a thread of a "paused" process answered a request sent
right after the kill 9% of the time idle and 39% with three busy loops beside it (the echo
child of tests/unit/test_processes.py, stopped by a bare kill). A test that pauses a leader
and then expects its sends to time out failed in CI that way: the leader acknowledged the send.
"""

from __future__ import annotations

import os
import signal
import time

from actors import process_state

STOPPED = frozenset("TtZX")
"""/proc thread states that run no more user code: stopped, traced, or exited."""
PAUSE_WAIT_S = 60.0
"""A thread in uninterruptible sleep (a disk write) stops when its call returns; none takes this long."""


def pause(pid: int) -> None:
    """SIGSTOP ``pid`` and return once every one of its threads has stopped (or it is gone)."""
    who = process_state.identity_of(pid)
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + PAUSE_WAIT_S
    while who is not None:
        states = process_state.thread_states(who)
        if states is None or states <= STOPPED:  # gone, or every thread stopped
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} still has running threads {PAUSE_WAIT_S}s after SIGSTOP: {states}")
        time.sleep(0.001)
