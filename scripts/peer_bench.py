#!/usr/bin/env python3
"""hetero-bench against llama.cpp's llama-bench on the same GGUF files, interleaved.

Each round runs, for every file, hetero-bench and then llama-bench (prompt of -p tokens,
then -n generated tokens, -r repetitions each); the table gives each side's median over
the rounds and the ratio hetero / llama.cpp. Interleaving matters on shared machines,
whose speed drifts by 10-20% over minutes: both programs see the same drift.

    python3 scripts/peer_bench.py --llama-bench PATH/llama-bench [--rounds 3] [-t 2] [-p 512] [-n 128] [-d 0] FILE...

-p 0 or -n 0 leaves that test out; -d D runs both tests D tokens deep into a context (both
programs' own -d; an older llama-bench without it fails with its own message).

llama.cpp is not part of this project: build it from its own source tree and pass the
path of its llama-bench. Prints a Markdown table, with the CPU and the date, to stdout.
"""
import argparse
import csv
import datetime
import io
import json
import os
import statistics
import subprocess
import sys


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def run(cmd):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def hetero(args, path):
    cmd = [args.hetero_bench, "-m", path, "-p", str(args.p), "-n", str(args.n), "-t", str(args.t), "-r", str(args.r),
           "--json"]
    if args.d > 0:
        cmd += ["-d", str(args.d)]
    out = json.loads(run(cmd))
    at = f"_d{args.d}" if args.d > 0 else ""
    pp = out[f"pp{args.p}{at}"]["tok_s_median"] if args.p > 0 else None
    tg = out[f"tg{args.n}{at}"]["tok_s_median"] if args.n > 0 else None
    return pp, tg, out.get("decode_weight_bytes")


def llama(args, path):
    cmd = [args.llama_bench, "-m", path, "-p", str(args.p), "-n", str(args.n), "-t", str(args.t), "-r", str(args.r),
           "-o", "csv"]
    if args.d > 0:
        cmd += ["-d", str(args.d)]  # llama-bench's own -d (2025 and later)
    rows = list(csv.DictReader(io.StringIO(run(cmd))))
    pp = next(float(r["avg_ts"]) for r in rows if r["n_prompt"] == str(args.p) and r["n_gen"] == "0") if args.p > 0 else None
    tg = next(float(r["avg_ts"]) for r in rows if r["n_gen"] == str(args.n) and r["n_prompt"] == "0") if args.n > 0 else None
    return pp, tg


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--llama-bench", required=True)
    parser.add_argument("--hetero-bench", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin",
                                                               "hetero-bench"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-t", type=int, default=2)
    parser.add_argument("-p", type=int, default=512)
    parser.add_argument("-n", type=int, default=128)
    parser.add_argument("-r", type=int, default=3)
    parser.add_argument("-d", type=int, default=0, help="depth: tokens already in the context (llama-bench -d)")
    args = parser.parse_args()
    if args.p < 0 or args.n < 0 or args.d < 0 or (args.p == 0 and args.n == 0):
        sys.exit("-p, -n and -d must not be negative, and -p or -n must be above 0")
    for f in args.files:
        if not os.path.isfile(f):
            sys.exit(f"no such file: {f}")
    results = {f: {"h": [], "l": []} for f in args.files}
    for round_ in range(args.rounds):
        for f in args.files:
            results[f]["h"].append(hetero(args, f))
            results[f]["l"].append(llama(args, f))
            h, l = results[f]["h"][-1], results[f]["l"][-1]
            print(f"round {round_ + 1}: {os.path.basename(f)}: hetero {fmt(h[0])} / {fmt(h[1])}, "
                  f"llama.cpp {fmt(l[0])} / {fmt(l[1])}", file=sys.stderr, flush=True)
    print(f"{cpu_model()}, {args.t} threads, {datetime.date.today()}; medians of {args.rounds} interleaved rounds "
          f"(each -r {args.r}), tok/s\n")
    at = f" @ d{args.d}" if args.d > 0 else ""
    tests = [(i, name) for i, name, count in ((0, f"pp{args.p}{at}", args.p), (1, f"tg{args.n}{at}", args.n)) if count > 0]
    print("| file | " + " | ".join(f"hetero {name} | llama.cpp {name} | ratio" for _, name in tests) + " |")
    print("|---|" + "---|---|---|" * len(tests))
    for f in args.files:
        cells = []
        for i, _ in tests:
            h = statistics.median(x[i] for x in results[f]["h"])
            l = statistics.median(x[i] for x in results[f]["l"])
            cells.append(f"{h:.1f} | {l:.1f} | {h / l:.2f}x")
        print(f"| {os.path.basename(f)} | " + " | ".join(cells) + " |")
    # On a machine whose speed drifts, the ratio within each round (both programs a few
    # seconds apart) says more than the ratio of medians; its spread says how much.
    if args.rounds > 1:
        print("\nEach round's own ratio (hetero / llama.cpp in that round): median [lowest, highest]\n")
        print("| file | " + " | ".join(f"{name} ratio" for _, name in tests) + " |")
        print("|---|" + "---|" * len(tests))
        for f in args.files:
            cells = []
            for i, _ in tests:
                ratios = [h[i] / l[i] for h, l in zip(results[f]["h"], results[f]["l"])]
                cells.append(f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}, {max(ratios):.2f}]")
            print(f"| {os.path.basename(f)} | " + " | ".join(cells) + " |")
    # What bounds decode: the weights one token reads (hetero's count, the same file for
    # both) times each side's median tok/s, to set against the memory's bandwidth. An older
    # hetero-bench does not report the count: no table then, rather than zeros.
    if args.n == 0 or any(results[f]["h"][-1][2] is None for f in args.files):
        return
    kv = " (at a depth the KV cache's reads come on top)" if args.d > 0 else ""
    print(f"\nDecode's weight reads (the file's bytes a token reads, times the median tg{args.n}{at}){kv}:\n")
    print("| file | MB per token | hetero GB/s | llama.cpp GB/s |")
    print("|---|---|---|---|")
    for f in args.files:
        per_token = results[f]["h"][-1][2]
        ht = statistics.median(x[1] for x in results[f]["h"])
        lt = statistics.median(x[1] for x in results[f]["l"])
        print(f"| {os.path.basename(f)} | {per_token / 1e6:.1f} | {ht * per_token / 1e9:.1f} | {lt * per_token / 1e9:.1f} |")


if __name__ == "__main__":
    main()
