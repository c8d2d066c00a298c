"""`raylog topics`, `partitions`, `configs`, `groups` and `nodes`: kafka-topics.sh, kafka-configs.sh,
kafka-leader-election.sh, kafka-consumer-groups.sh and kafka-broker-api's node listing and
controlled shutdown, over AdminClient."""

from __future__ import annotations

import datetime
import re
import time

from raylog.cli.common import connect, emit_json, key_values, progress, split_outside_brackets, table
from raylog.errors import InvalidConfigError
from raylog.records import TopicPartition


def _replica_text(r: dict) -> str:
    return f"{r['replica_id']}@node{r['node_id']}{'' if r['alive'] else '(down)'}"


def partition_line(info: dict) -> str:
    replicas = ",".join(_replica_text(r) for r in info["replicas"])
    state = "OFFLINE" if info["offline"] else ("under-replicated" if info["under_replicated"] else "ok")
    line = (f"partition {info['partition']}  leader {info['leader']} (epoch {info['leader_epoch']})  "
            f"replicas {replicas}  isr {','.join(map(str, info['isr']))}  {state}")
    if "log_end_offset" in info:
        line += (f"  offsets [{info['log_start_offset']}, {info['log_end_offset']}) hw {info['high_watermark']}"
                 f"  {info['size_bytes']} bytes")
    elif "leader_error" in info:
        line += f"  ({info['leader_error']})"
    return line


_PARTITION_JSON_KEYS = ("partition", "leader", "leader_epoch", "isr", "offline", "under_replicated",
                        "log_start_offset", "log_end_offset", "high_watermark", "size_bytes", "leader_error")


def _partition_json(info: dict) -> dict:
    out = {k: info[k] for k in _PARTITION_JSON_KEYS if k in info}
    out["replicas"] = [{"replica_id": r["replica_id"], "node_id": r["node_id"], "alive": r["alive"]}
                       for r in info["replicas"]]
    return out


def cmd_topics(args) -> int:
    admin = connect(args).admin()
    if args.action == "create":
        with progress(args, unit="replica") as bar:
            def started(_name: str, done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            desc = admin.create_topic(args.name, args.partitions, args.replication_factor, progress=started,
                                      **key_values(args.config, "--config"))
        print(f"created topic {desc.name} with {len(desc.partitions)} partitions, "
              f"replication factor {args.replication_factor}")
    elif args.action == "list":
        names = admin.list_topics(include_internal=args.include_internal)
        if args.json:
            emit_json(names)
        else:
            for name in names:
                print(name)
    elif args.action == "describe":
        names = [args.name] if args.name else admin.list_topics()
        described = []
        for name in names:
            infos = admin.describe_partitions(name)
            if args.under_replicated:
                infos = [i for i in infos if i["under_replicated"]]
            if args.offline:
                infos = [i for i in infos if i["offline"]]
            if (args.under_replicated or args.offline) and not infos:
                continue
            described.append((name, len(admin.describe_topics([name])[0].partitions), infos))
        if args.json:
            emit_json([{"topic": name, "partition_count": n, "partitions": [_partition_json(i) for i in infos]}
                       for name, n, infos in described])
        else:
            for name, n, infos in described:
                print(f"topic {name}: {n} partitions")
                for info in infos:
                    print("  " + partition_line(info))
    elif args.action == "alter":
        name = args.name or args.topic
        if not name or args.partitions is None:
            raise InvalidConfigError("topics alter takes a topic and --partitions N")
        before = len(admin.describe_topics([name])[0].partitions)
        with progress(args, unit="replica") as bar:
            def started(_name: str, done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            admin.create_partitions({name: args.partitions}, progress=started)
        print(f"topic {name}: {before} -> {args.partitions} partitions")
    elif args.action == "delete":
        admin.delete_topics([args.name])
        print(f"deleted topic {args.name}")
    return 0


def cmd_partitions(args) -> int:
    admin = connect(args).admin()
    if args.action == "elect-leaders":
        wanted = None
        if args.topic:
            n = len(admin.describe_topics([args.topic])[0].partitions)
            wanted = [TopicPartition(args.topic, p) for p in ([args.partition] if args.partition is not None
                                                              else range(n))]
        moved = admin.elect_leaders(wanted)
        if args.json:
            emit_json([{"topic": t, "partition": p} for t, p in moved])
        else:
            print(f"preferred leader elected for {len(moved)} partitions" +
                  ("" if not moved else ": " + ", ".join(f"{t}-{p}" for t, p in moved)))
    elif args.action == "reassign":
        result = admin.alter_partition_reassignments({TopicPartition(args.topic, args.partition): args.nodes})
        if args.json:
            emit_json([{"topic": t, "partition": p, "nodes": nodes} for (t, p), nodes in result.items()])
        else:
            for (topic, p), nodes in result.items():
                print(f"{topic}-{p}: replicas now on nodes {', '.join(map(str, nodes))} "
                      "(new replicas catch up before old ones are dropped)")
    return 0


# --- nodes ------------------------------------------------------------------------------------


def node_rows(cluster: dict) -> list[list]:
    return [[n["node_id"], n["state"] + (" (lost)" if n["lost"] else "") + (", draining" if n["draining"] else ""),
             n["host"], n["data_dir"], n["replicas"], n["leaders"],
             f"{n['missing_ms'] / 1000:.0f} s" if n["state"] == "missing" else ""]
            for n in cluster["nodes"]]


NODE_COLUMNS = ["NODE", "STATE", "HOST", "DATA DIR", "REPLICAS", "LEADERS", "MISSING FOR"]


def cmd_nodes(args) -> int:
    admin = connect(args).admin()
    if args.action == "list":
        cluster = admin.describe_cluster()
        if args.json:
            emit_json(cluster)
        else:
            kafka = f", Kafka clients at {cluster['bootstrap_servers']}" if cluster.get("bootstrap_servers") else ""
            print(f"cluster {cluster['cluster_id']}, controller on node {cluster['controller']['node_id']}{kafka}")
            print(table(NODE_COLUMNS, node_rows(cluster)))
    elif args.action == "drain":
        result = admin.drain_node(args.node, cancel=args.cancel, timeout_ms=args.timeout_ms)
        stoppable = args.cancel or result["can_stop"]
        if args.json:
            emit_json(result)
        elif args.cancel:
            print(f"node {args.node}: drain cancelled; it may lead and join ISRs again")
        elif result["can_stop"]:
            print(f"node {args.node} leads no partition and is in {result['in_isr']} ISRs: it can be stopped")
        else:
            print(f"node {args.node} still leads {result['leaders']} partitions whose only in-sync replica it holds "
                  f"({', '.join(f'{t}-{p}' for t, p in result['blocked'][:10])}): stopping it takes them offline "
                  "until it is back")
        return 0 if stoppable else 2
    return 0


def cmd_users(args) -> int:
    import getpass
    import sys

    admin = connect(args).admin()
    if args.action == "add":
        password = sys.stdin.readline().rstrip("\n") if args.password_stdin else getpass.getpass(
            f"password for {args.name}: ")
        admin.create_user(args.name, password)
        print(f"user {args.name} can log in to the Kafka listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
    elif args.action == "delete":
        admin.delete_user(args.name)
        print(f"user {args.name} deleted")
    else:
        users = admin.list_users()
        if args.json:
            emit_json(users)
        else:
            print(table(["user", "mechanisms", "iterations"],
                        [[u["name"], ", ".join(u["mechanisms"]), u["iterations"]] for u in users]))
    return 0


# --- configs ----------------------------------------------------------------------------------


def _config_topic(args) -> str:
    if args.topic:
        return args.topic
    if args.entity_type not in (None, "topics", "topic"):
        raise InvalidConfigError(f"--entity-type {args.entity_type!r}: raylog has topic configs only (topics)")
    if not args.entity_name:
        raise InvalidConfigError("name the topic: --topic T (or --entity-type topics --entity-name T)")
    return args.entity_name


def _config_rows(entries) -> list[list]:
    return [[e.name, e.value, e.source, "yes" if e.read_only else "no"] for e in entries]


def _config_json(entries) -> list[dict]:
    return [{"name": e.name, "value": e.value, "source": e.source, "is_default": e.is_default,
             "read_only": e.read_only} for e in entries]


def cmd_configs(args) -> int:
    admin = connect(args).admin()
    topic = _config_topic(args)
    if args.action == "describe":
        entries = admin.describe_topic_config(topic)
        if not args.all:
            entries = [e for e in entries if not e.is_default]
        if args.json:
            emit_json({"topic": topic, "configs": _config_json(entries)})
        elif not entries:
            print(f"topic {topic}: no configs set (every value is the default; --all lists them)")
        else:
            print(f"topic {topic}:")
            print(table(["NAME", "VALUE", "SOURCE", "READ-ONLY"], _config_rows(entries)))
    else:
        to_set = key_values(args.add_config, "--add-config", convert=str)
        to_delete = [k for item in args.delete_config or [] for k in split_outside_brackets(item)]
        if not to_set and not to_delete:
            raise InvalidConfigError("configs alter takes --add-config k=v[,k2=v2] and/or --delete-config k[,k2]")
        entries = admin.alter_topic_config(topic, set=to_set, delete=to_delete)
        changed = set(to_set) | set(to_delete)
        if args.json:
            emit_json({"topic": topic, "configs": _config_json(entries)})
        else:
            print(f"Completed updating config for topic {topic}.")
            shown = [e for e in entries if e.name in changed or e.name.replace(".", "_") in
                     {c.replace(".", "_") for c in changed}]
            if shown:
                print(table(["NAME", "VALUE", "SOURCE", "READ-ONLY"], _config_rows(shown)))
    return 0


# --- consumer groups --------------------------------------------------------------------------


def _group(args) -> str:
    group = args.group_option or args.group
    if not group:
        raise InvalidConfigError("name the group: --group G")
    return group


def cmd_groups(args) -> int:
    admin = connect(args).admin()
    if args.action == "list":
        groups = admin.list_consumer_groups()
        if args.json:
            emit_json(groups)
        else:
            print(table(["GROUP", "STATE", "MEMBERS"], [[g["group_id"], g["state"], g["member_count"]]
                                                         for g in groups]) if groups else "no consumer groups")
    elif args.action == "describe":
        (g,) = admin.describe_consumer_groups([_group(args)])
        if args.json:
            emit_json(g)
            return 0
        print(f"group {g['group_id']}: {g['state']}, group epoch {g['group_epoch']}, assignor {g['assignor']}, "
              f"{len(g['members'])} members")
        rows = [[m["member_id"][:12], m["instance_id"], m["client_host"][:12], m["client_id"], m["member_epoch"],
                 m["state"], " ".join(f"{t}-{p}" for t, p in m["assigned"])] for m in g["members"]]
        if rows:
            print(table(["MEMBER", "INSTANCE", "NODE", "CLIENT (actor/process)", "EPOCH", "STATE", "PARTITIONS"],
                        rows))
    elif args.action in ("offsets", "lag"):
        lag = admin.consumer_group_lag(_group(args))
        if args.json:
            emit_json(lag)
            return 0
        rows = [[r["topic"], r["partition"], r["committed"], r["end_offset"], r["lag"],
                 (r["member_id"] or "")[:12]] for r in lag["partitions"]]
        print(table(["TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER"], rows))
        if lag["members"]:
            print()
            print(table(["MEMBER", "LAG"], [[m["member_id"][:12], m["lag"]] for m in lag["members"]]))
        print(f"\ntotal lag {lag['total_lag']}")
    elif args.action == "reset":
        return reset_offsets(admin, args)
    elif args.action == "delete":
        group = _group(args)
        admin.delete_consumer_groups([group])
        print(f"deleted group {group}")
    return 0


_DURATION = re.compile(r"^(-)?P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?"
                       r"(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Kafka's --by-duration takes it (java.time.Duration: PnDTnHnMn.nS)."""
    m = _DURATION.match(text.strip())
    if not m or not any(m.group(i) for i in range(2, 6)) or text.upper().endswith("T"):
        raise InvalidConfigError(f"--by-duration takes an ISO-8601 duration such as P1DT2H30M or PT15M, "
                                 f"got {text!r}")
    days, hours, minutes, seconds = (float(m.group(i) or 0) for i in range(2, 6))
    ms = round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    return -ms if m.group(1) else ms


def parse_datetime_ms(text: str) -> int:
    """Kafka's --to-datetime ('2026-11-23T10:00:00.000', optional Z or +hh:mm; local time without
    one) as epoch milliseconds."""
    raw = text.strip()
    try:
        when = datetime.datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise InvalidConfigError(f"--to-datetime takes YYYY-MM-DDTHH:mm:SS.sss, optionally with Z or +hh:mm, "
                                 f"got {text!r}") from None
    if when.tzinfo is None:
        when = when.astimezone()  # naive: the local time zone, as kafka-consumer-groups.sh
    return int(when.timestamp() * 1000)


def _scope(admin, args, group: str) -> list:
    """--topic T / T:0,2 (repeatable) or --all-topics, as names and TopicPartitions."""
    if args.all_topics:
        topics = sorted({tp.topic for tp in admin.list_consumer_group_offsets(group)})
        if not topics:
            raise InvalidConfigError(f"group {group!r} has no committed offsets: name topics with --topic")
        return topics
    if not args.topic:
        raise InvalidConfigError("groups reset needs --topic T (repeatable, T:0,2 for some partitions) "
                                 "or --all-topics")
    scope = []
    for item in args.topic:
        name, sep, parts = item.partition(":")
        if not sep:
            scope.append(name)
            continue
        try:
            scope += [TopicPartition(name, int(p)) for p in parts.split(",") if p.strip()]
        except ValueError:
            raise InvalidConfigError(f"--topic takes TOPIC or TOPIC:P1,P2, got {item!r}") from None
    return scope


def _partitions_of(admin, scope: list) -> list[TopicPartition]:
    out = []
    for item in scope:
        if isinstance(item, TopicPartition):
            out.append(item)
        else:
            out += [TopicPartition(item, p) for p in range(len(admin.describe_topics([item])[0].partitions))]
    return out


def reset_offsets(admin, args) -> int:
    """kafka-consumer-groups.sh --reset-offsets: prints the plan, and applies it only with --execute."""
    group = _group(args)
    scope = _scope(admin, args, group)
    tps = _partitions_of(admin, scope)
    target: dict = {}
    if args.to_earliest:
        target["to"] = "earliest"
    elif args.to_latest:
        target["to"] = "latest"
    elif args.to_timestamp is not None:
        target["timestamp_ms"] = args.to_timestamp
    elif args.to_datetime is not None:
        target["timestamp_ms"] = parse_datetime_ms(args.to_datetime)
    elif args.by_duration is not None:
        target["timestamp_ms"] = max(0, int(time.time() * 1000) - parse_duration_ms(args.by_duration))
    elif args.shift_by is not None:
        target["shift_by"] = args.shift_by
    elif args.to_offset is not None:
        # Kafka clamps an offset outside the log to its nearest end.
        starts, ends = admin.beginning_offsets(tps), admin.end_offsets(tps)
        target["offsets"] = {tp: min(max(args.to_offset, starts[tp]), ends[tp]) for tp in tps}
    else:
        raise InvalidConfigError("groups reset needs one of --to-earliest, --to-latest, --to-offset N, "
                                 "--shift-by N, --to-datetime, --by-duration, --to-timestamp")
    current = admin.list_consumer_group_offsets(group, tps)
    new = admin.reset_consumer_group_offsets(group, scope, dry_run=not args.execute, **target)
    plan = [{"group": group, "topic": tp.topic, "partition": tp.partition,
             "current_offset": current[tp].offset if tp in current else None, "new_offset": new[tp]}
            for tp in sorted(new)]
    if args.json:
        emit_json({"group": group, "executed": bool(args.execute), "plan": plan})
        return 0
    print(table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                [[r["group"], r["topic"], r["partition"], r["current_offset"], r["new_offset"]] for r in plan]))
    if not args.execute:
        print("\ndry run: nothing changed (add --execute to apply these offsets)")
    return 0

