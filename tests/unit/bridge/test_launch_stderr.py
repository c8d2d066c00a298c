"""spark_bridge/launch.py: the driver JVM's stderr keeps Ray's native INFO lines off the terminal."""

from __future__ import annotations

import subprocess
import time

from spark_bridge.launch import _jvm_stderr_filtered

NATIVE_INFO = "[2026-11-23 22:55:15,635 I 7958 8019] gcs_client.cc:96: GcsClient has no Cluster ID set"
NATIVE_WARNING = "[2026-11-23 22:55:15,700 W 7958 8019] core_worker.cc:1: something to look at"


def test_a_child_started_meanwhile_keeps_its_warnings_on_the_terminal_and_its_info_in_the_log(tmp_path, capfd):
    log = tmp_path / "spark-driver.log"
    with _jvm_stderr_filtered(str(log)):
        child = subprocess.Popen(["sh", "-c", f"sleep 0.2; echo '{NATIVE_INFO}' >&2; echo 'WARN Utils: kept' >&2; "
                                              f"echo '{NATIVE_WARNING}' >&2"])
    assert child.wait(timeout=10) == 0
    deadline = time.monotonic() + 10
    err = ""
    while NATIVE_WARNING not in err and time.monotonic() < deadline:
        time.sleep(0.05)
        err += capfd.readouterr().err
    assert "WARN Utils: kept" in err and NATIVE_WARNING in err
    assert "GcsClient" not in err
    assert log.read_text().splitlines() == [NATIVE_INFO]
