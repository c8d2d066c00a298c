"""actors/process_state.py against real processes: a busy one is working, a sleeping or stopped
one is not, an exited one (or one whose pid now names another process, or from another boot)
cannot be seen; and the restart decision built on it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from actors import process_state
from actors.process_state import BUSY_SILENCE_LIMIT, ProcessIdentity, is_working, should_restart
from tests.support.processes import pause

pytestmark = pytest.mark.skipif(not os.path.exists(process_state.BOOT_ID_PATH), reason="needs Linux's /proc")


def identity_of(pid: int) -> ProcessIdentity:
    with open(f"/proc/{pid}/stat") as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    return ProcessIdentity(process_state._boot_id(), pid, start)


@pytest.fixture
def child():
    started = []

    def start(code: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code])
        started.append(proc)
        time.sleep(0.3)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()


def test_own_identity_names_this_process_and_this_boot():
    me = process_state.own_identity()
    assert me == identity_of(os.getpid())
    assert ProcessIdentity.from_list(me.to_list()) == me


def test_a_busy_process_is_working(child):
    assert is_working(identity_of(child("while True: pass").pid)) is True


def test_a_busy_thread_beside_a_sleeping_main_thread_is_working(child):
    code = "import threading, time\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()\ntime.sleep(60)"
    assert is_working(identity_of(child(code).pid)) is True


def test_a_sleeping_process_is_not_working(child):
    who = identity_of(child("import time; time.sleep(60)").pid)
    wait_until_asleep(who, after_cpu_s=0)  # on a loaded machine its start-up may still be running
    assert is_working(who) is False


def test_a_process_that_just_finished_a_busy_spell_is_working_by_the_cpu_it_used(child):
    """The controller's busy loop may end (and its answer be on its way) just before the check:
    the CPU it used since the previous look says it was working, though no thread runs now. The
    looks are given as (when, CPU seconds then) so the shares do not depend on this machine's load."""
    proc = child("import time\nuntil = time.process_time() + 0.5\nwhile time.process_time() < until: pass\n"
                 "time.sleep(60)")
    who = identity_of(proc.pid)
    wait_until_asleep(who, after_cpu_s=0.5)
    assert is_working(who) is False, "no thread runs now"
    used, now = process_state.cpu_seconds(who), time.monotonic()
    assert is_working(who, since=(now - 0.5, used - 0.5)) is True, "a whole CPU since the last look"
    assert is_working(who, since=(now - 10.0, used - 0.1)) is False, "1% of a CPU: asleep, as a hung one"


def test_a_sleeping_process_has_used_next_to_no_cpu(child):
    who = identity_of(child("import time; time.sleep(60)").pid)
    wait_until_asleep(who, after_cpu_s=0)
    since = (time.monotonic() - 5.0, process_state.cpu_seconds(who))
    assert is_working(who, since=since) is False
    assert process_state.cpu_seconds(replace(who, start_ticks=who.start_ticks + 1)) is None


def wait_until_asleep(who: ProcessIdentity, after_cpu_s: float) -> None:
    """Until the process has used ``after_cpu_s`` of CPU and no thread of it runs (its busy spell
    is over): events; the bound only turns a child that never sleeps into a failure, not a hang."""
    give_up = time.monotonic() + 120
    while process_state.cpu_seconds(who) < after_cpu_s or "R" in process_state.thread_states(who):
        assert time.monotonic() < give_up, "the child never finished its busy spell"
        time.sleep(0.05)


def test_a_stopped_busy_process_is_not_working(child):
    proc = child("while True: pass")
    who = identity_of(proc.pid)
    since = (time.monotonic(), process_state.cpu_seconds(who))
    pause(proc.pid)
    assert is_working(who) is False
    assert is_working(who, since=since) is False, "stopped, whatever it used before"
    proc.send_signal(signal.SIGCONT)
    assert is_working(who) is True


def test_an_exited_process_a_reused_pid_and_another_host_cannot_be_seen(child):
    proc = child("while True: pass")
    who = identity_of(proc.pid)
    assert is_working(replace(who, start_ticks=who.start_ticks + 1)) is None
    assert is_working(replace(who, boot_id="another-host")) is None
    proc.kill()
    proc.wait()
    assert is_working(who) is None
    assert is_working(None) is None


@pytest.mark.parametrize("value", [None, [], ["b", 1], ["b", "1", 2], ["b", 1, 2, 3], {"pid": 1}, "b,1,2"])
def test_an_answer_without_a_well_formed_identity_gives_none(value):
    assert ProcessIdentity.from_list(value) is None


def test_a_silent_controller_is_restarted_after_the_session_unless_seen_working_then_after_the_limit():
    session = 9.0
    for working in (True, False, None):
        assert not should_restart(session, session, working)
    assert should_restart(session + 0.1, session, False)
    assert not should_restart(session + 0.1, session, False, idle_looks=1), "one idle look is not enough"
    assert should_restart(session + 0.1, session, None)
    assert not should_restart(session + 0.1, session, True)
    assert not should_restart(BUSY_SILENCE_LIMIT * session, session, True)
    assert should_restart(BUSY_SILENCE_LIMIT * session + 0.1, session, True)


def test_a_controller_seen_working_during_the_silence_gets_a_session_timeout_after_it_before_a_restart():
    session = 9.0
    assert not should_restart(3 * session, session, False, idle_looks=5, idle_s=session - 0.1), \
        "killed while it may still be answering what queued up during its busy spell"
    assert should_restart(3 * session, session, False, idle_looks=2, idle_s=session + 0.1)
    assert not should_restart(3 * session, session, False, idle_looks=1, idle_s=session + 0.1)
