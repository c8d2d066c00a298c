"""Draw the suite's PNGs under bench/results/ from its JSON; a plot whose JSON is missing is
skipped with a line saying so.

    python -m bench.plot [--results bench/results] [--markdown]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _load(results: Path, name: str) -> dict | None:
    path = results / name
    if not path.exists():
        print(f"  {name} missing: its plot is skipped (run its scenario first)")
        return None
    return json.loads(path.read_text())


def _save(fig, results: Path, name: str) -> None:
    fig.tight_layout()
    fig.savefig(results / name, dpi=110)
    print(f"  wrote {results / name}")


def kafka_table(plt, results: Path) -> None:
    data = _load(results, "kafka.json")
    if not data:
        return
    from bench.kafka_table import LABELS

    rows = data["rows"]
    labels, ours, theirs = [], [], []
    for row, label in LABELS.items():
        if row not in rows:
            continue
        if row == "7":
            for side in ("producer", "consumer"):
                labels.append(f"7. at once: {side}")
                ours.append(rows[row][side]["median"])
                theirs.append(data["kafka"][row])
        else:
            labels.append(f"{row}. {label}")
            ours.append(rows[row]["median"])
            theirs.append(data["kafka"][row])
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(labels) + 1.5))
    y = range(len(labels))
    ax.barh([i + 0.2 for i in y], [v / 1e6 for v in ours], 0.4, label="raylog (this machine)")
    ax.barh([i - 0.2 for i in y], [v / 1e6 for v in theirs], 0.4, label="Kafka (published, 3 machines)")
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.set_xlabel("million records/s (100-byte records)")
    ax.set_title("Kafka's reference table, raylog beside it")
    ax.legend()
    _save(fig, results, "kafka_table.png")

    if "8" in rows:
        sizes = sorted(rows["8"], key=int)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot([int(s) for s in sizes], [rows["8"][s]["median"] for s in sizes], "o-", label="records/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("record size (bytes)")
        ax.set_ylabel("records/s")
        mb = ax.twinx()
        mb.plot([int(s) for s in sizes], [rows["8"][s]["mb_per_s"] for s in sizes], "s--", color="tab:orange",
                label="MB/s")
        mb.set_ylabel("MB/s")
        ax.set_title("One producer by record size (6 partitions, RF=1)")
        fig.legend(loc="lower center", ncol=2)
        _save(fig, results, "record_size.png")

    if "9" in rows:
        fig, ax = plt.subplots(figsize=(7, 4))
        for mode, r in rows["9"].items():
            samples = r["samples_ms"]
            n = len(samples)
            ax.plot(samples, [(i + 1) / n for i in range(n)], label=f"{mode} (p99 {r['p50_p99_p999_ms'][1]:.2f} ms)")
        ax.set_xscale("log")
        ax.set_xlabel("end-to-end latency (ms), send() to poll_batch() returning it")
        ax.set_ylabel("fraction of records")
        ax.set_title("End-to-end latency at 1,000 records/s (CDF)")
        ax.axvline(2, color="grey", ls=":", label="Kafka p50 2 ms")
        ax.legend()
        _save(fig, results, "latency_cdf.png")


def stored_data(plt, results: Path) -> None:
    data = _load(results, "stored_data.json")
    if not data:
        return
    s = data["samples"]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([x["stored_gb"] for x in s], [x["rate"] / 1e6 for x in s], "-", lw=1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("stored data (GB)")
    ax.set_ylabel("million records/s")
    ax.set_title(f"One producer while the log grows to {data['gb']:g} GB "
                 f"(last / first: {data['ratio']:.2f}x)")
    _save(fig, results, "stored_data.png")


def peers(plt, results: Path) -> None:
    data = _load(results, "peers.json")
    if not data:
        return
    names = list(data["rates"])
    fig, ax = plt.subplots(figsize=(8, 4))
    x = range(len(names))
    for offset, side in ((-0.2, "produce"), (0.2, "consume")):
        ax.bar([i + offset for i in x], [data["rates"][n][side]["median"] for n in names], 0.4, label=side)
    ax.set_xticks(list(x), names)
    ax.set_yscale("log")
    ax.set_ylabel("records/s (log scale)")
    ax.set_title(f"raylog and its peers, {data['records']:,} records of 100 bytes, same run")
    ax.legend()
    _save(fig, results, "peers.png")


def partitions(plt, results: Path) -> None:
    data = _load(results, "partitions.json")
    if not data:
        return
    rows = [r for r in data["rows"] if r["produce_rate"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4))
    counts = [r["partitions"] for r in rows]
    ax.plot(counts, [r["produce_rate"] / 1e6 for r in rows], "o-", label="send_batch")
    ax.plot(counts, [r["consume_rate"] / 1e6 for r in rows], "s-", label="poll_batch")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("partitions")
    ax.set_ylabel("million records/s")
    ax.set_title("Throughput by partition count (one node)")
    ax.legend()
    _save(fig, results, "partitions.png")


def spark(plt, results: Path) -> None:
    data = _load(results, "spark_bench.json")
    if not data:
        return
    rows = list(data["rows"])
    fig, ax = plt.subplots(figsize=(8, 4))
    x = range(len(rows))
    for offset, side in ((-0.2, "raylog"), (0.2, "parquet")):
        ax.bar([i + offset for i in x], [data["rows"][r][side] / 1e6 for r in rows], 0.4, label=side)
    ax.set_xticks(list(x), rows, rotation=10)
    ax.set_ylabel("million records/s")
    ax.set_title(f"Spark through RayDP: format('raylog') against local parquet ({data['records']:,} records)")
    ax.legend()
    _save(fig, results, "spark.png")


def markdown(results: Path) -> str:
    """The README's table: Kafka's rows, the peers and row 10, from the JSON."""
    from bench.kafka_table import LABELS

    lines = ["| row | raylog | min-max | Kafka (published) | raylog/Kafka |", "|---|---:|---:|---:|---:|"]
    data = json.loads((results / "kafka.json").read_text()) if (results / "kafka.json").exists() else None
    if data:
        rows, kafka = data["rows"], data["kafka"]
        for row, label in LABELS.items():
            if row not in rows:
                continue
            sides = [("", rows[row])] if row != "7" else [(": producer", rows[row]["producer"]),
                                                          (": consumer", rows[row]["consumer"])]
            for suffix, r in sides:
                lines.append(f"| {row}. {label}{suffix} | {r['median']:,.0f} rec/s | {r['min']:,.0f}-{r['max']:,.0f} | "
                             f"{kafka[row]:,} | {r['median'] / kafka[row]:.2f}x |")
        for size, r in rows.get("8", {}).items():
            lines.append(f"| 8. record size {int(size):,} B | {r['median']:,.0f} rec/s ({r['mb_per_s']:.0f} MB/s) | "
                         f"{r['min']:,.0f}-{r['max']:,.0f} | | |")
        for mode, r in rows.get("9", {}).items():
            p50, p99, p999 = r["p50_p99_p999_ms"]
            lines.append(f"| 9. end-to-end latency, {mode} (p50 / p99 / p99.9) | {p50:.2f} / {p99:.2f} / {p999:.2f} ms "
                         f"| | 2 / 3 / 14 ms | |")
    stored = results / "stored_data.json"
    if stored.exists():
        d = json.loads(stored.read_text())
        lines.append(f"| 10. one producer while the log grows to {d['samples'][-1]['stored_gb']:.1f} GB | "
                     f"{d['last_rate']:,.0f} rec/s at the end | first {d['first_rate']:,.0f} | flat | "
                     f"{d['ratio']:.2f}x of its start |")
    peers_path = results / "peers.json"
    if peers_path.exists():
        p = json.loads(peers_path.read_text())
        ours = p["rates"]["raylog"]
        lines += ["", f"Peers, {p['records']:,} records of 100 bytes, one producer then one consumer, "
                      f"median of {p['runs']}:", "",
                  "| system | produce rec/s | consume rec/s | raylog is | how it was driven |",
                  "|---|---:|---:|---:|---|"]
        for name, r in p["rates"].items():
            ratio = "" if name == "raylog" else (f"{ours['produce']['median'] / r['produce']['median']:.1f}x / "
                                                 f"{ours['consume']['median'] / r['consume']['median']:.1f}x")
            lines.append(f"| {name} | {r['produce']['median']:,.0f} | {r['consume']['median']:,.0f} | {ratio} | "
                         f"{p['setups'][name]} |")
        for name, why in p.get("skipped", {}).items():
            lines.append(f"| {name} | skipped | | | {why} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--markdown", action="store_true", help="print the README's tables instead")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(args.results))
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for draw in (kafka_table, stored_data, peers, partitions, spark):
        draw(plt, args.results)
        plt.close("all")


if __name__ == "__main__":
    main()
