"""The `raylog` command: topics, produce from stdin, consume to stdout.

    raylog topics create events --partitions 3 --replication-factor 3 --config min.insync.replicas=2
    raylog topics list | describe events | delete events
    raylog topics describe --under-replicated | --offline
    raylog partitions elect-leaders [events [--partition 0]]
    raylog partitions reassign events 0 <node id> <node id> ...
    raylog groups list | describe my-group | offsets my-group | delete my-group
    raylog groups reset my-group --topic events --to-earliest (or --to-latest, --to-timestamp MS,
                                                               --shift-by N, --to-offset N)
    seq 1000 | raylog produce events
    raylog consume events --from-beginning --max-messages 1000

It attaches to a running Ray cluster (--address, default "auto"). Errors print
one line "raylog: error: <Error>: <message>" and exit with status 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from raylog.errors import RaylogError, InvalidConfigError
from raylog.records import TopicPartition


def _progress(args, total=None, unit="rec"):
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, unit_scale=True, file=sys.stderr,
                disable=not (args.progress or sys.stderr.isatty()))


def _configs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InvalidConfigError(f"--config takes key=value, got {pair!r}")
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def _connect(args):
    import raylog

    if args.data_root:
        return raylog.connect(args.address, namespace=args.namespace, data_root=args.data_root)
    return raylog.connect(args.address, namespace=args.namespace)


def cmd_topics(args) -> int:
    admin = _connect(args).admin()
    if args.action == "create":
        with _progress(args, unit="replica") as bar:
            def started(_name: str, done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            desc = admin.create_topic(args.name, args.partitions, args.replication_factor, progress=started,
                                      **_configs(args.config))
        print(f"created topic {desc.name} with {len(desc.partitions)} partitions, "
              f"replication factor {args.replication_factor}")
    elif args.action == "list":
        for name in admin.list_topics():
            print(name)
    elif args.action == "describe":
        names = [args.name] if args.name else admin.list_topics()
        for name in names:
            infos = admin.describe_partitions(name)
            if args.under_replicated:
                infos = [i for i in infos if i["under_replicated"]]
            if args.offline:
                infos = [i for i in infos if i["offline"]]
            if (args.under_replicated or args.offline) and not infos:
                continue
            print(f"topic {name}: {len(admin.describe_topics([name])[0].partitions)} partitions")
            for info in infos:
                print("  " + _partition_line(info))
    elif args.action == "delete":
        admin.delete_topics([args.name])
        print(f"deleted topic {args.name}")
    return 0


def _partition_line(info: dict) -> str:
    replicas = ",".join(f"{r['replica_id']}@{r['node_id'][:8]}{'' if r['alive'] else '(down)'}"
                        for r in info["replicas"])
    state = "OFFLINE" if info["offline"] else ("under-replicated" if info["under_replicated"] else "ok")
    line = (f"partition {info['partition']}  leader {info['leader']} (epoch {info['leader_epoch']})  "
            f"replicas {replicas}  isr {','.join(map(str, info['isr']))}  {state}")
    if "log_end_offset" in info:
        line += (f"  offsets [{info['log_start_offset']}, {info['log_end_offset']}) hw {info['high_watermark']}"
                 f"  {info['size_bytes']} bytes")
    elif "leader_error" in info:
        line += f"  ({info['leader_error']})"
    return line


def cmd_partitions(args) -> int:
    admin = _connect(args).admin()
    if args.action == "elect-leaders":
        wanted = None
        if args.topic:
            n = len(admin.describe_topics([args.topic])[0].partitions)
            wanted = [TopicPartition(args.topic, p) for p in ([args.partition] if args.partition is not None
                                                              else range(n))]
        moved = admin.elect_leaders(wanted)
        print(f"preferred leader elected for {len(moved)} partitions" +
              ("" if not moved else ": " + ", ".join(f"{t}-{p}" for t, p in moved)))
    elif args.action == "reassign":
        result = admin.alter_partition_reassignments({TopicPartition(args.topic, args.partition): args.nodes})
        for (topic, p), nodes in result.items():
            print(f"{topic}-{p}: replicas now on {', '.join(n[:8] for n in nodes)} "
                  "(new replicas catch up before old ones are dropped)")
    return 0


def _table(headers: list[str], rows: list[list]) -> str:
    """Columns aligned for a person to read at a glance; numbers right-aligned."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], int) or row[i] is None for row in rows) and rows for i in range(len(headers))]
    lines = ["  ".join(h.rjust(w) if numeric[i] else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    for r in cells:
        lines.append("  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(line.rstrip() for line in lines)


def cmd_groups(args) -> int:
    admin = _connect(args).admin()
    if args.action == "list":
        groups = admin.list_consumer_groups()
        print(_table(["GROUP", "STATE", "MEMBERS"], [[g["group_id"], g["state"], g["member_count"]] for g in groups])
              if groups else "no consumer groups")
    elif args.action == "describe":
        (g,) = admin.describe_consumer_groups([args.group])
        print(f"group {g['group_id']}: {g['state']}, group epoch {g['group_epoch']}, assignor {g['assignor']}, "
              f"{len(g['members'])} members")
        rows = [[m["member_id"][:12], m["instance_id"], m["client_host"][:12], m["client_id"], m["member_epoch"],
                 m["state"], " ".join(f"{t}-{p}" for t, p in m["assigned"])] for m in g["members"]]
        if rows:
            print(_table(["MEMBER", "INSTANCE", "NODE", "CLIENT (actor/process)", "EPOCH", "STATE", "PARTITIONS"],
                         rows))
    elif args.action == "offsets":
        lag = admin.consumer_group_lag(args.group)
        rows = [[r["topic"], r["partition"], r["committed"], r["end_offset"], r["lag"],
                 (r["member_id"] or "")[:12]] for r in lag["partitions"]]
        print(_table(["TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER"], rows))
        if lag["members"]:
            print()
            print(_table(["MEMBER", "LAG"], [[m["member_id"][:12], m["lag"]] for m in lag["members"]]))
        print(f"\ntotal lag {lag['total_lag']}")
    elif args.action == "reset":
        target = {"to": "earliest" if args.to_earliest else ("latest" if args.to_latest else None),
                  "timestamp_ms": args.to_timestamp, "shift_by": args.shift_by}
        if args.to_offset is not None:
            n = len(admin.describe_topics([args.topic])[0].partitions)
            target = {"offsets": {TopicPartition(args.topic, p): args.to_offset for p in range(n)}}
        new = admin.reset_consumer_group_offsets(args.group, [args.topic],
                                                 **{k: v for k, v in target.items() if v is not None})
        print(_table(["TOPIC", "PARTITION", "NEW OFFSET"], [[tp.topic, tp.partition, o] for tp, o in sorted(new.items())]))
    elif args.action == "delete":
        admin.delete_consumer_groups([args.group])
        print(f"deleted group {args.group}")
    return 0


def cmd_produce(args) -> int:
    """Send stdin's lines in chunks; the producer's buffer_memory bounds what is held in memory, and
    failures are counted by an errback instead of keeping a future per chunk for all of stdin."""
    producer = _connect(args).producer()
    sent = 0
    failures: list[BaseException] = []
    bar = _progress(args)

    def send(lines):
        nonlocal sent
        keys = None
        if args.key_separator:
            split = [line.split(args.key_separator, 1) for line in lines]
            keys = [s[0].encode() if len(s) == 2 else None for s in split]
            lines = [s[-1] for s in split]
        future = producer.send_batch(args.topic, [line.encode() for line in lines], keys=keys,
                                     partition=args.partition)
        future.add_errback(failures.append)
        sent += len(lines)
        bar.update(len(lines))

    chunk = []
    for line in sys.stdin:
        chunk.append(line.rstrip("\n"))
        if len(chunk) >= args.batch_lines:
            send(chunk)
            chunk = []
    if chunk:
        send(chunk)
    producer.flush(timeout=120)
    producer.close()
    bar.close()
    if failures:
        raise failures[0]
    print(f"produced {sent} records", file=sys.stderr)
    return 0


def cmd_consume(args) -> int:
    cluster = _connect(args)
    consumer = cluster.consumer(auto_offset_reset="earliest" if args.from_beginning else "latest")
    n = cluster.metadata.partition_count(args.topic)
    parts = [TopicPartition(args.topic, p) for p in ([args.partition] if args.partition is not None else range(n))]
    consumer.assign(parts)
    if args.offset is not None:
        for tp in parts:
            consumer.seek(tp, args.offset)
    elif args.from_beginning:
        consumer.seek_to_beginning(*parts)
    bar = _progress(args, total=args.max_messages)
    count = 0
    last_data = time.monotonic()
    out = sys.stdout
    while args.max_messages is None or count < args.max_messages:
        chunks = consumer.poll_batch(timeout_ms=200)
        if not chunks:
            if (time.monotonic() - last_data) * 1000 >= args.timeout_ms:
                break
            continue
        last_data = time.monotonic()
        for chunk in chunks:
            for off, key, value in zip(chunk.offsets.tolist(), chunk.key_list(), chunk.value_list()):
                if args.max_messages is not None and count >= args.max_messages:
                    break
                prefix = ""
                if args.print_offset:
                    prefix += f"{chunk.partition}:{off}\t"
                if args.print_key:
                    prefix += ("" if key is None else key.decode("utf-8", "replace")) + "\t"
                out.write(prefix + ("" if value is None else value.decode("utf-8", "replace")) + "\n")
                count += 1
                bar.update(1)
    out.flush()
    bar.close()
    consumer.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raylog", description="raylog topics, produce and consume")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    parser.add_argument("--namespace", default="raylog")
    parser.add_argument("--data-root", default=None, help="data root, used only if this call starts the controller")
    parser.add_argument("--progress", action="store_true", help="show a progress bar even when not on a terminal")
    sub = parser.add_subparsers(dest="command", required=True)

    topics = sub.add_parser("topics", help="create, list, describe, delete topics")
    tsub = topics.add_subparsers(dest="action", required=True)
    create = tsub.add_parser("create")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config, e.g. retention.ms=60000")
    tsub.add_parser("list")
    describe = tsub.add_parser("describe", help="leader, replicas, ISR and offsets per partition")
    describe.add_argument("name", nargs="?", default=None, help="a topic (default: all)")
    describe.add_argument("--under-replicated", action="store_true", help="only partitions missing in-sync replicas")
    describe.add_argument("--offline", action="store_true", help="only partitions without a leader")
    tsub.add_parser("delete").add_argument("name")
    topics.set_defaults(func=cmd_topics)

    partitions = sub.add_parser("partitions", help="leader elections and reassignments")
    psub = partitions.add_subparsers(dest="action", required=True)
    elect = psub.add_parser("elect-leaders", help="move leadership back to each partition's preferred replica")
    elect.add_argument("topic", nargs="?", default=None)
    elect.add_argument("--partition", type=int, default=None)
    reassign = psub.add_parser("reassign", help="move a partition's replicas to these Ray node ids")
    reassign.add_argument("topic")
    reassign.add_argument("partition", type=int)
    reassign.add_argument("nodes", nargs="+")
    partitions.set_defaults(func=cmd_partitions)

    groups = sub.add_parser("groups", help="consumer groups: list, describe, offsets and lag, reset, delete")
    gsub = groups.add_subparsers(dest="action", required=True)
    gsub.add_parser("list")
    for action in ("describe", "offsets", "delete"):
        gsub.add_parser(action).add_argument("group")
    reset = gsub.add_parser("reset", help="move a group's committed offsets (the group must have no members)")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-timestamp", type=int, metavar="MS")
    how.add_argument("--shift-by", type=int, metavar="N")
    how.add_argument("--to-offset", type=int, metavar="N")
    groups.set_defaults(func=cmd_groups)

    produce = sub.add_parser("produce", help="send stdin lines as records")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", default=None, help="split each line into key and value at this string")
    produce.add_argument("--partition", type=int, default=None)
    produce.add_argument("--batch-lines", type=int, default=10_000)
    produce.set_defaults(func=cmd_produce)

    consume = sub.add_parser("consume", help="print records to stdout")
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int, default=None)
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=int, default=None)
    consume.add_argument("--max-messages", type=int, default=None)
    consume.add_argument("--timeout-ms", type=int, default=5000, help="stop after this long without records")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--print-offset", action="store_true")
    consume.set_defaults(func=cmd_consume)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RaylogError as exc:
        print(f"raylog: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
