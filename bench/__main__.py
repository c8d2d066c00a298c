"""Run the benchmark suite, or one scenario of it; results go to bench/results/*.json.

    python -m bench                 # the whole suite (make bench)
    python -m bench --quick         # a reduced suite, under 5 minutes (make bench-quick)
    python -m bench kafka           # one scenario; the rest of the line goes to it
    python -m bench stored-data --gb 50

Scenarios: kafka (Kafka's table, rows 1-9), peers (Redis Streams, NATS JetStream and
ray.util.queue beside raylog), stored-data (row 10), and each area's own script: clients,
replication, groups (a new cluster's first join among its rows), partitions, spark, storage,
codec, kafka-protocol (Kafka clients through the listener). Then `python -m bench.plot` draws the PNGs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

AREAS = {
    "clients": "bench.client_bench",
    "replication": "bench.replication_bench",
    "groups": "bench.groups_bench",
    "partitions": "bench.partitions_bench",
    "spark": "bench.spark_bench",
    "storage": "bench.storage_bench",
    "codec": "bench.codec_bench",
    "kafka-protocol": "bench.kafka_protocol_bench",
}
SCENARIOS = ["kafka", "peers", "stored-data", *AREAS]


def kafka(argv: list[str], quick: bool) -> None:
    from bench import kafka_table

    parser = argparse.ArgumentParser(prog="python -m bench kafka", description=kafka_table.__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000 if quick else 2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=1000 if quick else 3000)
    parser.add_argument("--quick", action="store_true", default=quick)
    args = parser.parse_args(argv)
    kafka_table.run(args.records, args.runs, args.latency_samples, kafka_table.SIZES, replicated=not args.quick)


def peers(argv: list[str], quick: bool) -> None:
    from bench import peers as peers_module

    parser = argparse.ArgumentParser(prog="python -m bench peers")
    parser.add_argument("--records", type=int, default=200_000 if quick else 1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    peers_module.run(args.records, args.runs)


def stored_data(argv: list[str], quick: bool) -> None:
    from bench import stored_data as module

    module.main((["--gb", "1"] if quick else []) + argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    quick = "--quick" in argv
    argv = [a for a in argv if a != "--quick"]
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    if argv and argv[0] not in SCENARIOS:
        sys.exit(f"unknown scenario {argv[0]!r}; one of: {', '.join(SCENARIOS)}")
    own = {"kafka": kafka, "peers": peers, "stored-data": stored_data}
    chosen = [argv[0]] if argv else (["kafka", "peers", "stored-data"] if quick else SCENARIOS)
    rest = argv[1:]
    for name in chosen:
        started = time.monotonic()
        print(f"=== {name} ===", flush=True)
        if name in own:
            own[name](rest, quick)
        else:
            importlib.import_module(AREAS[name]).main(rest)
        print(f"=== {name}: {time.monotonic() - started:.0f} s ===\n", flush=True)
    if not argv:
        from bench import plot

        plot.main([])


if __name__ == "__main__":
    main()
