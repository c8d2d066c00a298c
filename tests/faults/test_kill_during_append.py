"""kill -9 in the middle of appends.

Fault model: a process appending to a PartitionLog is killed with SIGKILL at a
seeded random moment: between appends, halfway through copying a batch into
the mapped segment, during a roll (truncating one segment, creating the next).
The kernel keeps whatever reached the page cache; nothing is flushed.

What must survive: every batch the child reported as appended (it reports
after append returns), with its exact offsets and bytes; the reopened log is a
gap-free prefix from offset 0; no torn or corrupt batch is ever returned; the
log keeps working (the next child appends after the recovered end).
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time

from raylog.storage.log import PartitionLog
from tests.support.append_child import CONFIG, value_for
from tests.support.builders import read_all

KILLS = 50


def run_and_kill(directory, delay_s: float) -> int:
    """Start a child, let it append for ``delay_s``, SIGKILL it; returns the last acked offset."""
    child = subprocess.Popen([sys.executable, "-m", "tests.support.append_child", str(directory)],
                             stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    acked = [-1]

    def reader():
        for line in child.stdout:
            acked[0] = max(acked[0], int(line.split()[1]))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    # Wait until the child has acked at least one batch so every round kills mid-append work.
    deadline = time.monotonic() + 20
    while acked[0] < 0 and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.005)
    time.sleep(delay_s)
    child.send_signal(signal.SIGKILL)
    child.wait()
    t.join(timeout=5)
    return acked[0]


def test_every_acknowledged_batch_survives_sigkill_mid_append(tmp_path, seed):
    rng = random.Random(seed)
    directory = tmp_path / "p0"
    highest_acked = -1
    for round_no in range(KILLS):
        acked = run_and_kill(directory, rng.uniform(0.0, 0.05))
        highest_acked = max(highest_acked, acked)
        log = PartitionLog(directory, CONFIG)
        try:
            records = read_all(log)
            offsets = [o for o, _, _ in records]
            assert offsets == list(range(len(offsets))), f"round {round_no}: a gap or reorder in offsets"
            assert log.log_end_offset == len(offsets)
            assert log.log_end_offset > highest_acked, (
                f"round {round_no}: acknowledged offset {highest_acked} lost (log end {log.log_end_offset})")
            assert all(v == value_for(o) for o, _, v in records), f"round {round_no}: a record's bytes changed"
        finally:
            if rng.random() < 0.5:
                log.close()
            else:
                log.close_unclean()
    assert highest_acked > 100
