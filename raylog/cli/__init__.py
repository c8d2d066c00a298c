"""The `raylog` command, shaped after Kafka's command-line tools and kcat.

    raylog topics create events --partitions 3 --replication-factor 3 --config min.insync.replicas=2
    raylog topics list | describe events | alter events --partitions 6 | delete events
    raylog configs describe --topic events ; raylog configs alter --topic events --add-config retention.ms=60000
    raylog partitions elect-leaders [events [--partition 0]] ; raylog partitions reassign events 0 <node> ...
    raylog groups list | describe --group g | lag --group g | delete --group g
    raylog groups reset --group g --topic events --to-earliest [--execute]     (a dry run without --execute)
    seq 1000 | raylog produce events -K : -H source=seq -X linger_ms=50
    raylog consume events --offset earliest -f '%p:%o %k=%s\\n' --exit-at-end
    raylog top [--topic events] [--group g] [--once]

It attaches to a running Ray cluster (--address, default "auto"). A raylog error prints one line
"error: <message>" on stderr and exits with status 1; usage errors exit 2; Ctrl-C exits 130.
docs/operations.md describes every command and flag.
"""

from __future__ import annotations

import argparse
import os
import sys

from raylog.errors import RaylogError


def _topics_parser(sub) -> None:
    from raylog.cli.admin_commands import cmd_topics

    topics = sub.add_parser("topics", help="create, list, describe, alter, delete topics (kafka-topics.sh)")
    tsub = topics.add_subparsers(dest="action", required=True)
    create = tsub.add_parser("create")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config, e.g. retention.ms=60000")
    listing = tsub.add_parser("list")
    listing.add_argument("--include-internal", action="store_true", help="also __consumer_offsets")
    listing.add_argument("--json", action="store_true")
    describe = tsub.add_parser("describe", help="leader, replicas, ISR and offsets per partition")
    describe.add_argument("name", nargs="?", default=None, help="a topic (default: all)")
    describe.add_argument("--under-replicated", action="store_true", help="only partitions missing in-sync replicas")
    describe.add_argument("--offline", action="store_true", help="only partitions without a leader")
    describe.add_argument("--json", action="store_true")
    alter = tsub.add_parser("alter", help="grow a topic's partition count (partitions are never removed)")
    alter.add_argument("name", nargs="?", default=None)
    alter.add_argument("--topic", default=None, help="the topic (kafka-topics.sh spelling)")
    alter.add_argument("--partitions", type=int, required=True)
    tsub.add_parser("delete").add_argument("name")
    topics.set_defaults(func=cmd_topics)


def _partitions_parser(sub) -> None:
    from raylog.cli.admin_commands import cmd_partitions

    partitions = sub.add_parser("partitions", help="leader elections and reassignments")
    psub = partitions.add_subparsers(dest="action", required=True)
    elect = psub.add_parser("elect-leaders", help="move leadership back to each partition's preferred replica")
    elect.add_argument("topic", nargs="?", default=None)
    elect.add_argument("--partition", type=int, default=None)
    elect.add_argument("--json", action="store_true")
    reassign = psub.add_parser("reassign", help="move a partition's replicas to these node ids")
    reassign.add_argument("topic")
    reassign.add_argument("partition", type=int)
    reassign.add_argument("nodes", nargs="+", type=int)
    reassign.add_argument("--json", action="store_true")
    partitions.set_defaults(func=cmd_partitions)


def _configs_parser(sub) -> None:
    from raylog.cli.admin_commands import cmd_configs

    configs = sub.add_parser("configs", help="describe and alter topic configs (kafka-configs.sh)")
    csub = configs.add_subparsers(dest="action", required=True)
    for action in ("describe", "alter"):
        p = csub.add_parser(action)
        p.add_argument("--topic", default=None)
        p.add_argument("--entity-type", default=None, help="topics (the only kind raylog has)")
        p.add_argument("--entity-name", default=None)
        p.add_argument("--json", action="store_true")
        if action == "describe":
            p.add_argument("--all", action="store_true", help="defaults too, not only the topic's own settings")
        else:
            p.add_argument("--add-config", action="append", metavar="K=V[,K2=V2]",
                           help="set configs (Kafka's dotted names, e.g. retention.ms=60000)")
            p.add_argument("--delete-config", action="append", metavar="K[,K2]", help="back to the default")
    configs.set_defaults(func=cmd_configs)


def _groups_parser(sub) -> None:
    from raylog.cli.admin_commands import cmd_groups

    groups = sub.add_parser("groups", help="consumer groups: list, describe, lag, reset, delete "
                                           "(kafka-consumer-groups.sh)")
    gsub = groups.add_subparsers(dest="action", required=True)
    gsub.add_parser("list").add_argument("--json", action="store_true")
    parsers = {}
    for action in ("describe", "lag", "offsets", "delete", "reset"):
        p = parsers[action] = gsub.add_parser(
            action, help={"lag": "committed offset, end and lag per partition", "offsets": "the same as lag",
                          "reset": "move committed offsets: a dry run unless --execute"}.get(action))
        p.add_argument("group", nargs="?", default=None)
        p.add_argument("--group", dest="group_option", default=None)
        if action != "delete":
            p.add_argument("--json", action="store_true")
    reset = parsers["reset"]
    scope = reset.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P1,P2]",
                       help="a topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has committed offsets for")
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true")
    how.add_argument("--to-latest", action="store_true")
    how.add_argument("--to-offset", type=int, metavar="N", help="clamped to the log's range, as Kafka")
    how.add_argument("--shift-by", type=int, metavar="N", help="from the committed offset (negative: back)")
    how.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="local time, or with Z / +hh:mm")
    how.add_argument("--by-duration", metavar="PnDTnHnMnS", help="ISO-8601 duration back from now")
    how.add_argument("--to-timestamp", type=int, metavar="MS", help="epoch milliseconds")
    run = reset.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="apply the plan (without it: print it only)")
    run.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    groups.set_defaults(func=cmd_groups)


def _produce_parser(sub) -> None:
    from raylog.cli.produce import cmd_produce

    produce = sub.add_parser("produce", help="send stdin's lines as records, each as it is read")
    produce.add_argument("topic")
    produce.add_argument("-K", "--key-separator", default=None, help="split each line into key and value at this")
    produce.add_argument("-H", "--header", action="append", metavar="NAME=VALUE", help="a header on every record")
    produce.add_argument("-p", "--partition", type=int, default=None, help="send every record to this partition")
    produce.add_argument("--null-value", default=None, metavar="STR", help="a value equal to STR is sent as null "
                                                                           "(a tombstone)")
    produce.add_argument("-X", "--producer-property", action="append", metavar="KEY=VALUE",
                         help="producer setting, kafka-python's name (linger_ms=50) or Kafka's (linger.ms=50)")
    produce.add_argument("--property", action="append", metavar="KEY=VALUE",
                         help="kafka-console-producer's reader properties: parse.key, key.separator, parse.headers, "
                              "headers.delimiter, headers.separator, headers.key.separator, null.marker")
    produce.add_argument("--flush-timeout-s", type=float, default=120.0, metavar="S",
                         help="how long to wait at end of input for the last records' outcomes")
    produce.set_defaults(func=cmd_produce)


def _consume_parser(sub) -> None:
    from raylog.cli.consume import cmd_consume

    consume = sub.add_parser("consume", help="print records to stdout, following the log until stopped")
    consume.add_argument("topics", nargs="*", metavar="TOPIC")
    consume.add_argument("-t", "--topic", action="append", help="a topic (repeatable), as kcat -t")
    consume.add_argument("--pattern", "--include", dest="pattern", metavar="REGEX",
                         help="every topic whose whole name matches (a member with --group follows new ones)")
    consume.add_argument("-p", "--partition", type=int, action="append", help="only this partition (repeatable)")
    consume.add_argument("-G", "--group", default=None, help="read as a member of this consumer group, committing")
    consume.add_argument("-o", "--offset", default=None, metavar="earliest|latest|N|-N|@MS",
                         help="where to start; default latest (kafka-console-consumer); with --group only for "
                              "partitions the group has no offset for")
    consume.add_argument("--from-beginning", action="store_true", help="the same as --offset earliest")
    consume.add_argument("-c", "--max-messages", type=int, default=None, metavar="N", help="exit after N records")
    consume.add_argument("--timeout-ms", type=int, default=None, metavar="MS", help="exit after MS without a record")
    consume.add_argument("-e", "--exit-at-end", action="store_true",
                         help="exit once every partition was read to the end it had when reached (kcat -e)")
    out = consume.add_mutually_exclusive_group()
    out.add_argument("-f", "--format", default=None, help="kcat's format: %%t %%p %%o %%k %%K %%s %%S %%T %%h, \\n \\t")
    out.add_argument("-J", "--json", action="store_true", help="one JSON object per record (kcat -J)")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--print-offset", action="store_true", help="partition:offset before the key and value")
    consume.add_argument("--print-timestamp", action="store_true")
    consume.add_argument("--key-separator", default="\t", help="between key and value (default: tab)")
    consume.add_argument("-X", "--consumer-property", action="append", metavar="KEY=VALUE",
                         help="consumer setting, kafka-python's name (fetch_max_wait_ms=100) or Kafka's")
    consume.add_argument("-q", "--quiet", action="store_true", help="no 'consumed N records' on stderr at the end")
    consume.set_defaults(func=cmd_consume)


def _nodes_parser(sub) -> None:
    from raylog.cli.admin_commands import cmd_nodes

    nodes = sub.add_parser("nodes", help="registered nodes (alive, registered, missing); drain one before "
                                         "stopping it (Kafka's controlled shutdown)")
    nsub = nodes.add_subparsers(dest="action", required=True)
    nsub.add_parser("list").add_argument("--json", action="store_true")
    drain = nsub.add_parser("drain", help="move every leadership off NODE and take it out of the ISRs, then "
                                          "say whether it can be stopped (exit 2 if some partition would go offline)")
    drain.add_argument("node", type=int)
    drain.add_argument("--cancel", action="store_true", help="end a drain without restarting the node")
    drain.add_argument("--timeout-ms", type=int, default=30_000,
                       help="how long a partition led only there waits for another replica to catch up")
    drain.add_argument("--json", action="store_true")
    nodes.set_defaults(func=cmd_nodes)


def _users_parser(sub) -> None:
    from raylog.cli.admin_commands import cmd_users

    users = sub.add_parser("users", help="users of the Kafka listener's SASL (PLAIN, SCRAM-SHA-256/512)")
    usub = users.add_subparsers(dest="action", required=True)
    add = usub.add_parser("add", help="add a user, or change its password (asked on the terminal)")
    add.add_argument("name")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin's first line")
    usub.add_parser("delete").add_argument("name")
    usub.add_parser("list").add_argument("--json", action="store_true")
    users.set_defaults(func=cmd_users)


def _top_parser(sub) -> None:
    from raylog.cli.top import cmd_top

    top = sub.add_parser("top", help="live view of partitions, produce rates and group lag")
    top.add_argument("--topic", action="append", help="only this topic (repeatable)")
    top.add_argument("--group", action="append", help="only this consumer group (repeatable; default all)")
    top.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between refreshes")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.add_argument("--iterations", type=int, default=None, metavar="N", help="print N frames and exit")
    top.add_argument("--json", action="store_true", help="frames as JSON lines (with --once or --iterations)")
    top.set_defaults(func=cmd_top)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raylog", description="raylog's command line: topics, configs, groups, "
                                                                "nodes, users, produce, consume, top")
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS") or "auto",
                        help="Ray cluster address (default: RAY_ADDRESS, else auto: the cluster started on this machine)")
    parser.add_argument("--namespace", default="raylog")
    parser.add_argument("--data-root", default=None, help="data root, used only if this call starts the controller")
    parser.add_argument("--progress", action="store_true", help="show a progress bar even when not on a terminal")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show Ray's own messages (connection, raylet warnings, workers' output) on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_topics_parser, _configs_parser, _partitions_parser, _groups_parser, _nodes_parser,
                _users_parser, _produce_parser, _consume_parser, _top_parser):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RaylogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


__all__ = ["build_parser", "main"]
