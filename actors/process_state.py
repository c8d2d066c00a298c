"""What a raylog process can see of another one on its own host, without asking it.

A replica whose controller has answered no heartbeat for the session timeout has to tell a
controller that is stopped or hung (kill it: Ray restarts it from its metadata log) from one
that is working but starved of CPU (256 replicas starting on two cores leave it a few
percent of a core for minutes; killing it throws that work away and the restarted controller
has all of it to do again, under the same starvation). Linux says which: a thread that runs or
waits for a CPU is in state R; a stopped process's threads are in T, a hung one's sleep (S, D)
on a lock or a call that never returns. A controller on another host (another boot id), or
gone, cannot be seen, and the replica falls back to the session timeout alone.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
BUSY_SILENCE_LIMIT = 20
"""Session timeouts a working controller may stay silent before it is restarted anyway: a busy
loop that never yields looks like starvation, and must not keep the cluster leaderless forever.
Twenty (three minutes by default) outlasts 256 replicas starting on two cores."""


BUSY_CPU_SHARE = 0.25
"""Share of a CPU a controller must have used since its silence began to count as working when no
thread of it is seen running: the loop that was busy may have just finished and answered, the
answer still on its way to the replica. An idle or hung Ray actor process uses about 1% (its
core worker's threads)."""


@dataclass(frozen=True)
class ProcessIdentity:
    """A process, told apart from a later one with the same pid by its start time (in clock ticks
    after boot, /proc/<pid>/stat's 22nd field) and from one on another host by the boot id."""

    boot_id: str
    pid: int
    start_ticks: int

    def to_list(self) -> list:
        return [self.boot_id, self.pid, self.start_ticks]

    @classmethod
    def from_list(cls, value) -> ProcessIdentity | None:
        """The identity a heartbeat answer carries, or None when it carries none (or garbage)."""
        if not isinstance(value, (list, tuple)) or len(value) != 3:
            return None
        boot_id, pid, start = value
        if not (isinstance(boot_id, str) and isinstance(pid, int) and isinstance(start, int)):
            return None
        return cls(boot_id, pid, start)


def own_identity() -> ProcessIdentity | None:
    """This process's identity; None where /proc does not say (not Linux)."""
    return identity_of(os.getpid())


def identity_of(pid: int) -> ProcessIdentity | None:
    """The identity of the process ``pid`` on this host now; None when /proc does not show it."""
    boot_id = _boot_id()
    fields = _stat_fields(f"/proc/{pid}/stat")
    if boot_id is None or fields is None:
        return None
    return ProcessIdentity(boot_id, pid, int(fields[19]))


def cpu_seconds(identity: ProcessIdentity | None) -> float | None:
    """CPU time the process has used (all its threads), or None when it cannot be seen from here."""
    if identity is None or _boot_id() != identity.boot_id:
        return None
    fields = _stat_fields(f"/proc/{identity.pid}/stat")
    if fields is None or int(fields[19]) != identity.start_ticks:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def is_working(identity: ProcessIdentity | None, samples: int = 5, interval_s: float = 0.02,
               since: tuple[float, float] | None = None) -> bool | None:
    """True when a thread of the process is seen running or waiting for a CPU in one of ``samples``
    looks, or (``since``: a time.monotonic() and the cpu_seconds() then) it used BUSY_CPU_SHARE of
    a CPU since then and is not stopped; False when it is stopped, or asleep in every look after
    little CPU; None when it cannot be seen from here (another host, or it exited)."""
    if identity is None or _boot_id() != identity.boot_id:
        return None
    for i in range(samples):
        states = thread_states(identity)
        if states is None:
            return None
        if "T" in states:
            return False
        if "R" in states:
            return True
        if i + 1 < samples:
            time.sleep(interval_s)
    if since is not None:
        used, elapsed = cpu_seconds(identity), time.monotonic() - since[0]
        if used is not None and since[1] is not None and elapsed > 0:
            return (used - since[1]) / elapsed >= BUSY_CPU_SHARE
    return False


IDLE_LOOKS = 2
"""Looks in a row that must see a silent controller idle before it is killed: one that has just
ended a busy spell sleeps for a moment while the answers it owes are on their way (a single look
then killed a working controller under load, in CI). A hung one stays idle: the second look is one
heartbeat round after the first."""


def should_restart(silent_s: float, session_s: float, working: bool | None, idle_looks: int = IDLE_LOOKS,
                   idle_s: float | None = None) -> bool:
    """Whether a controller silent for ``silent_s`` is to be killed: after the session timeout once
    ``idle_looks`` looks in a row (this one included) saw it idle and it has been idle and silent
    for a session timeout (``idle_s``: since the heartbeat was sent or it was last seen working,
    whichever is later; silent_s when not given), or at once when it cannot be seen; when it is
    seen working, only after BUSY_SILENCE_LIMIT session timeouts."""
    if silent_s <= session_s:
        return False
    if working is False:
        # A controller that just ended a busy spell owes every answer that queued up meanwhile;
        # it gets a whole session timeout for them, as one that was never busy does (two looks
        # half a second apart killed one still working through that backlog, in CI).
        return idle_looks >= IDLE_LOOKS and (silent_s if idle_s is None else idle_s) > session_s
    return working is None or silent_s > BUSY_SILENCE_LIMIT * session_s


def thread_states(identity: ProcessIdentity) -> set[str] | None:
    """The state letters of the process's threads (R running, S asleep, T stopped...); None once it
    is gone or its pid names a later process."""
    fields = _stat_fields(f"/proc/{identity.pid}/stat")
    if fields is None or int(fields[19]) != identity.start_ticks:
        return None
    states = set()
    try:
        tids = os.listdir(f"/proc/{identity.pid}/task")
    except OSError:
        return None
    for tid in tids:
        thread = _stat_fields(f"/proc/{identity.pid}/task/{tid}/stat")
        if thread is not None:
            states.add(thread[0])
    return states or None


def _stat_fields(path: str) -> list[str] | None:
    """The fields of a /proc stat file after the command name (which is in parentheses and may
    hold spaces): [0] is the state, [11] and [12] user and system CPU time, [19] the start time."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return fields if len(fields) > 19 else None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _boot_id() -> str | None:
    try:
        with open(BOOT_ID_PATH) as f:
            return f.read().strip()
    except OSError:
        return None
