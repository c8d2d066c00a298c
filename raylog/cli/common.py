"""What every command shares: attaching to the cluster, tables, JSON, key=value parsing."""

from __future__ import annotations

import json
import logging
import sys

from raylog.errors import InvalidConfigError


def connect(args):
    """The cluster, with Ray's own start-up logging, workers' output and raylet warnings kept off
    the terminal (on stderr with --verbose)."""
    import ray

    import raylog

    if not ray.is_initialized():
        _route_raylet_messages(args.verbose)
    quiet = {"log_to_driver": args.verbose, "logging_level": logging.INFO if args.verbose else logging.WARNING}
    if args.data_root:
        return raylog.connect(args.address, namespace=args.namespace, data_root=args.data_root, **quiet)
    return raylog.connect(args.address, namespace=args.namespace, **quiet)


def _route_raylet_messages(verbose: bool) -> None:
    """Ray's driver prints the raylets' warnings (worker pool size, memory kills) on stdout whatever
    log_to_driver says (ray._private.worker.listen_error_messages calls the module's
    print_to_stdstream); in `raylog consume` stdout is data, so they go to stderr with --verbose and
    are dropped otherwise. Ray 2.60's internal name: without it, nothing is rerouted."""
    try:
        from ray._private import worker
    except ImportError:
        return
    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        return

    def routed(data, ignore_prefix):
        if verbose:
            original({**data, "is_err": True}, ignore_prefix)

    worker.print_to_stdstream = routed


def progress(args, total=None, unit="rec"):
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, unit_scale=True, file=sys.stderr,
                disable=not (args.progress or sys.stderr.isatty()))


def typed(value: str):
    """A setting given on the command line as its Python value: int, float, bool, or the string."""
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return value


def split_outside_brackets(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` except inside [...], as kafka-configs.sh reads --add-config 'k=[a,b],k2=v'."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def key_values(pairs, what: str, convert=typed) -> dict:
    """'k=v' strings (each possibly 'k=v,k2=v2') into a dict; InvalidConfigError for one without '='."""
    out = {}
    for item in pairs or []:
        for pair in split_outside_brackets(item):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise InvalidConfigError(f"{what} takes key=value, got {pair!r}")
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[key.strip()] = convert(value)
    return out


def table(headers: list[str], rows: list[list], right: frozenset[str] = frozenset()) -> str:
    """Columns aligned for a person to read at a glance; numbers (and the ``right`` headers)
    right-aligned."""
    cells = [[("-" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [h in right or (bool(rows) and all(isinstance(row[i], (int, float)) or row[i] is None for row in rows))
               for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if numeric[i] else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    for r in cells:
        lines.append("  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(line.rstrip() for line in lines)


def emit_json(obj) -> None:
    """One JSON document on stdout (tuples as lists, anything else by str())."""
    print(json.dumps(obj, default=_jsonable, sort_keys=False))


def _jsonable(obj):
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if hasattr(obj, "_asdict"):
        return obj._asdict()
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(obj)
    return str(obj)
