"""Child process for the kill -9 test: appends deterministic batches forever, acking each.

Usage: python -m tests.support.append_child DIR
Prints one line per acknowledged batch: "<base_offset> <last_offset>", flushed at once.
Record values are derived from their offsets, so a parent can check content after a kill.
"""

import sys

from raylog.config import TopicConfig
from raylog.storage import batch as rb
from raylog.storage.log import PartitionLog

CONFIG = TopicConfig(segment_bytes=64 * 1024, index_interval_bytes=512, retention_ms=-1)


def value_for(offset: int) -> bytes:
    return b"record-%d-" % offset + b"x" * (offset % 97)


def main() -> None:
    log = PartitionLog(sys.argv[1], CONFIG)
    out = sys.stdout
    while True:
        base = log.log_end_offset
        count = 1 + base % 13
        info = log.append(rb.build([value_for(base + i) for i in range(count)], timestamps_ms=base,
                                   compression="lz4" if base % 2 else "none"))
        out.write(f"{info.base_offset} {info.last_offset}\n")
        out.flush()


if __name__ == "__main__":
    main()
