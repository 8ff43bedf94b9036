#!/usr/bin/env python3
"""Turns the JSON lines of bench/compare.sh into the `system` section of
BENCHMARKS.md: tables of msgs/s, MB/s, RTT p50/p99, ratios of tagwire to
each baseline measured in the same run, and the issue-3 targets at 64 B
with pass/miss and by how much. Python 3 standard library only.

    report.py --results results.jsonl --command "bench/compare.sh" \
        --nproc 2 --duration 3 [--write BENCHMARKS.md]

Without --write the markdown goes to stdout. With it, only the text between
`<!-- BEGIN system -->` and `<!-- END system -->` is replaced (the file and
the markers are created if absent).
"""

import argparse
import datetime
import json
import os
import re
import sys

BEGIN = "<!-- BEGIN system -->"
END = "<!-- END system -->"

BASELINES = ["raw-relay", "nats", "zenoh", "zenoh-peer"]
TAGWIRES = ["tagwire-tcp", "tagwire-unix", "tagwire-embedded"]
SYSTEMS = BASELINES + TAGWIRES
DAEMON_VARIANTS = ["tagwire-tcp", "tagwire-unix"]  # pub → daemon → sub


def size_name(size):
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size} B"


def fmt_int(x):
    return f"{x:,.0f}" if x is not None else "—"


def fmt_f(x, digits=1):
    return f"{x:,.{digits}f}" if x is not None else "—"


def fmt_ratio(x):
    return f"{x:.2f}×" if x is not None else "—"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


class Results:
    """The runs of one compare.sh invocation, indexed by
    (label, mode, pinned, size)."""

    def __init__(self, lines):
        # (label, mode, pinned, size) -> {round: run}; a run without a
        # round (compare.sh before --rounds) is round 1.
        self.runs = {}
        self.errors = []
        self.sizes = []
        self.rounds = []
        for n, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"report.py: results line {n} is not JSON: {e}")
            size = d.get("run_size", d.get("size"))
            mode = d.get("run_mode", d.get("mode"))
            if size not in self.sizes:
                self.sizes.append(size)
            key = (d["label"], mode, bool(d.get("pinned")), size)
            rnd = int(d.get("round", 1))
            if rnd not in self.rounds:
                self.rounds.append(rnd)
            if "error" in d:
                self.errors.append(d)
            else:
                self.runs.setdefault(key, {})[rnd] = d
        self.sizes.sort()
        self.rounds.sort()

    def values(self, label, mode, size, field, pinned=False):
        """{round: value} of one measurement over the rounds."""
        out = {}
        for rnd, d in self.runs.get((label, mode, pinned, size), {}).items():
            v = d.get(field)
            if isinstance(v, (int, float)):
                out[rnd] = float(v)
        return out

    def get(self, label, mode, size, field, pinned=False):
        """The median over the rounds (one round: its value)."""
        vs = sorted(self.values(label, mode, size, field, pinned).values())
        if not vs:
            return None
        n = len(vs)
        return vs[n // 2] if n % 2 else (vs[n // 2 - 1] + vs[n // 2]) / 2

    def spread(self, label, mode, size, field, pinned=False):
        vs = self.values(label, mode, size, field, pinned).values()
        return (min(vs), max(vs)) if len(vs) > 1 else None

    def has(self, label):
        return any(k[0] == label for k in self.runs)

    # metrics used by the ratio and target tables
    def thr(self, label, size):
        return self.get(label, "throughput", size, "msgs_per_sec")

    def fan(self, label, size):
        return self.get(label, "fanout", size, "per_sub_msgs_per_sec")

    def p50(self, label, size, pinned):
        return self.get(label, "latency", size, "rtt_p50_us", pinned)


def names(args):
    zenoh_v, nats_client_v = lock_versions(args.lockfile)
    nats_v = args.nats_version or "nats-server"
    return {
        "raw-relay": "raw TCP relay",
        "nats": f"{nats_v} + async-nats {nats_client_v}",
        "zenoh": f"Zenoh {zenoh_v} (client → router → client)",
        "zenoh-peer": f"Zenoh {zenoh_v} (peer → peer, no router)",
        "tagwire-tcp": "tagwired, TCP",
        "tagwire-unix": "tagwired, Unix socket",
        "tagwire-embedded": "tagwire embedded (no daemon)",
    }


def lock_versions(lockfile):
    """Versions of the zenoh and async-nats crates in bench/Cargo.lock."""
    found = {"zenoh": "?", "async-nats": "?"}
    if lockfile and os.path.exists(lockfile):
        text = open(lockfile, encoding="utf-8").read()
        for pkg in found:
            m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(pkg), text)
            if m:
                found[pkg] = m.group(1)
    return found["zenoh"], found["async-nats"]


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def present(res, systems):
    return [s for s in systems if res.has(s)]


def throughput_table(res, nm):
    head = ["system"]
    for s in res.sizes:
        head += [f"{size_name(s)} msgs/s", f"{size_name(s)} MB/s"]
    rows = []
    for sys_ in present(res, SYSTEMS):
        row = [nm[sys_]]
        for s in res.sizes:
            cell = fmt_int(res.thr(sys_, s))
            sp = res.spread(sys_, "throughput", s, "msgs_per_sec")
            if sp:
                cell += f" ({fmt_int(sp[0])}–{fmt_int(sp[1])})"
            row.append(cell)
            row.append(fmt_f(res.get(sys_, "throughput", s, "mb_per_sec")))
        rows.append(row)
    return table(head, rows)


def rounds_table(res):
    """Issue 23's throughput ratios at 64 B round by round: each round
    measured every system once, so its ratios are paired."""
    s = 64
    pairs = [("tagwire-tcp", "nats", 2.0), ("tagwire-tcp", "zenoh-peer", 1.0),
             ("tagwire-unix", "nats", 2.0), ("tagwire-unix", "zenoh-peer", 1.0)]
    head = ["round"] + [f"{tw} ÷ {b} (target ≥ {t:.1f}×)" for tw, b, t in pairs]
    rows = []
    for rnd in res.rounds:
        row = [str(rnd)]
        for tw, b, _ in pairs:
            a = res.values(tw, "throughput", s, "msgs_per_sec").get(rnd)
            c = res.values(b, "throughput", s, "msgs_per_sec").get(rnd)
            row.append(fmt_ratio(ratio(a, c)))
        rows.append(row)
    return table(head, rows)


def fanout_table(res, nm, subs):
    head = ["system"]
    for s in res.sizes:
        head += [f"{size_name(s)} per sub msgs/s", f"{size_name(s)} total msgs/s",
                 f"{size_name(s)} per sub ÷ 1→1"]
    rows = []
    for sys_ in present(res, SYSTEMS):
        row = [nm[sys_]]
        for s in res.sizes:
            per = res.fan(sys_, s)
            row += [fmt_int(per),
                    fmt_int(res.get(sys_, "fanout", s, "total_msgs_per_sec")),
                    fmt_ratio(ratio(per, res.thr(sys_, s)))]
        rows.append(row)
    return table(head, rows)


def latency_table(res, nm, pinned):
    head = ["system"]
    for s in res.sizes:
        head += [f"{size_name(s)} p50 µs", f"{size_name(s)} p99 µs"]
    rows = []
    for sys_ in present(res, SYSTEMS):
        row = [nm[sys_]]
        for s in res.sizes:
            row.append(fmt_f(res.p50(sys_, s, pinned)))
            row.append(fmt_f(res.get(sys_, "latency", s, "rtt_p99_us", pinned)))
        rows.append(row)
    return table(head, rows)


def ratio_table(res, nm):
    short = {"raw-relay": "raw relay", "nats": "nats-server", "zenoh": "Zenoh",
             "zenoh-peer": "Zenoh peer"}
    head = ["tagwire", "metric", "size"] + [f"÷ {short[b]}" for b in BASELINES]
    rows = []
    metrics = [
        ("throughput msgs/s (higher is better)", lambda l, s: res.thr(l, s)),
        ("fan-out per sub msgs/s (higher is better)", lambda l, s: res.fan(l, s)),
        ("RTT p50, all cores (lower is better)", lambda l, s: res.p50(l, s, False)),
        ("RTT p50, core 0 (lower is better)", lambda l, s: res.p50(l, s, True)),
    ]
    for tw in present(res, TAGWIRES):
        for mname, f in metrics:
            for s in res.sizes:
                rows.append([nm[tw], mname, size_name(s)]
                            + [fmt_ratio(ratio(f(tw, s), f(b, s))) for b in BASELINES])
    return table(head, rows)


def verdict(measured, target, at_least):
    """'pass'/'miss' with the margin: for an at-least target the shortfall
    is 1 - measured/target, for an at-most target the excess is
    measured/target - 1."""
    if measured is None:
        return "not measured"
    if at_least:
        if measured >= target:
            return f"**pass** ({(measured / target - 1) * 100:+.0f}% margin)"
        return f"**miss** by {(1 - measured / target) * 100:.0f}% (needs ≥ {target:.2f}×)"
    if measured <= target:
        return f"**pass** ({(1 - measured / target) * 100:.0f}% margin)"
    return f"**miss** by {(measured / target - 1) * 100:.0f}% (needs ≤ {target:.2f}×)"


def targets_table(res, nm):
    s = 64
    targets = [
        ("throughput ≥ 1.5× nats-server", 1.5, True,
         lambda tw: ratio(res.thr(tw, s), res.thr("nats", s))),
        ("throughput ≥ 2× nats-server (issue 23)", 2.0, True,
         lambda tw: ratio(res.thr(tw, s), res.thr("nats", s))),
        ("throughput ≥ 1.0× Zenoh", 1.0, True,
         lambda tw: ratio(res.thr(tw, s), res.thr("zenoh", s))),
        ("throughput ≥ 1.0× Zenoh peer → peer", 1.0, True,
         lambda tw: ratio(res.thr(tw, s), res.thr("zenoh-peer", s))),
        ("throughput ≥ 0.7× raw relay", 0.7, True,
         lambda tw: ratio(res.thr(tw, s), res.thr("raw-relay", s))),
        ("RTT p50 ≤ 1.2× raw relay (all cores)", 1.2, False,
         lambda tw: ratio(res.p50(tw, s, False), res.p50("raw-relay", s, False))),
        ("RTT p50 ≤ 1.2× raw relay (everything on core 0)", 1.2, False,
         lambda tw: ratio(res.p50(tw, s, True), res.p50("raw-relay", s, True))),
        ("fan-out to 10: per sub ≥ 0.8× its own 1→1", 0.8, True,
         lambda tw: ratio(res.fan(tw, s), res.thr(tw, s))),
    ]
    head = ["target (64 B)"]
    for tw in DAEMON_VARIANTS:
        head += [f"{nm[tw]}: measured", f"{nm[tw]}: result"]
    rows = []
    for name, target, at_least, f in targets:
        row = [name]
        for tw in DAEMON_VARIANTS:
            m = f(tw) if res.has(tw) else None
            row += [fmt_ratio(m), verdict(m, target, at_least)]
        rows.append(row)
    return table(head, rows)


def table(head, rows):
    out = ["| " + " | ".join(head) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


def render(res, args, raw_lines):
    nm = names(args)
    date = args.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "## System comparison (issue 3)",
        "",
        f"Produced by `{args.command.strip()}` on {date}; `nproc` = {args.nproc} "
        f"({cpu_model()}); {args.duration} s per run; all systems measured in this "
        + (f"one run, {len(res.rounds)} rounds (every system once per round, interleaved; "
           "tables give the median of the rounds, throughput also their range), "
           if len(res.rounds) > 1 else "one run, ")
        + "on loopback. Method, definitions and caveats: "
        "[docs/benchmarks.md](docs/benchmarks.md). MB = 10⁶ bytes of payload.",
        "",
    ]
    facts = []
    if args.revision:
        facts.append(f"tagwire revision: {args.revision}")
    if args.load:
        facts.append(f"load average (1/5/15 min): {args.load} — the machine is shared, "
                     "so differences under ~10 % are noise")
    if facts:
        out += ["; ".join(facts) + ".", ""]
    if args.tagwire_skipped:
        out += [f"**tagwire was not measured in this run:** {args.tagwire_skipped}. "
                "Its rows, ratios and targets are missing below.", ""]
    out += [
        "### Targets at 64 B (pub → daemon → sub)", "",
        targets_table(res, nm), "",
        "### Throughput, 1 publisher → 1 subscriber", "",
        throughput_table(res, nm), "",
    ]
    if len(res.rounds) > 1 and 64 in res.sizes:
        out += ["### Issue 23's 64 B throughput ratios, round by round", "",
                rounds_table(res), ""]
    out += [
        f"### Fan-out, 1 publisher → {args.subscribers} subscribers", "",
        "Per sub: the mean of each subscriber's own rate; per sub ÷ 1→1 divides it "
        "by the same system's 1→1 rate above.", "",
        fanout_table(res, nm, args.subscribers), "",
        "### RTT, ping → echo → pong (one message in flight), all cores", "",
        latency_table(res, nm, False), "",
        "### RTT, everything (broker, pinger, echo) pinned to core 0", "",
        latency_table(res, nm, True), "",
    ]
    if present(res, TAGWIRES):
        out += ["### Ratios of tagwire to each baseline (same run)", "",
                ratio_table(res, nm), ""]
    if res.errors:
        out += ["### Runs that failed", ""]
        for e in res.errors:
            pin = ", core 0" if e.get("pinned") else ""
            out.append(f"- {e['label']} {e['mode']} {size_name(e['size'])}{pin}: {e['error']}")
        out.append("")
    if args.notes and os.path.exists(args.notes):
        notes = open(args.notes, encoding="utf-8").read().strip()
        if notes:
            out += [notes, ""]
    out += ["<details><summary>Raw JSON lines of this run</summary>", "", "```json"]
    out += [l.strip() for l in raw_lines if l.strip()]
    out += ["```", "", "</details>"]
    return "\n".join(out) + "\n"


def splice(path, section):
    """Replaces the text between the markers in `path` (creating the file
    or the markers when absent), leaving everything else as it was."""
    block = f"{BEGIN}\n{section}{END}"
    if os.path.exists(path):
        text = open(path, encoding="utf-8").read()
    else:
        text = "# Benchmarks\n"
    if BEGIN in text and END in text and text.index(BEGIN) < text.index(END):
        a = text.index(BEGIN)
        b = text.index(END) + len(END)
        text = text[:a] + block + text[b:]
    elif BEGIN in text or END in text:
        raise SystemExit(f"report.py: {path} has only one of the markers {BEGIN} / {END}; fix it by hand")
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", required=True)
    p.add_argument("--command", default="bench/compare.sh")
    p.add_argument("--nproc", default=str(os.cpu_count()))
    p.add_argument("--duration", default="?")
    p.add_argument("--subscribers", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1, help="rounds compare.sh ran (informative)")
    p.add_argument("--date")
    p.add_argument("--load", help="load averages (1/5/15 min) around the runs")
    p.add_argument("--revision", help="git revision of the tagwire measured")
    p.add_argument("--nats-version")
    p.add_argument("--lockfile")
    p.add_argument("--notes", help="markdown appended as the analysis (bench/notes.md)")
    p.add_argument("--tagwire-skipped", help="why tagwire was not measured")
    p.add_argument("--write", help="BENCHMARKS.md to edit between the markers")
    args = p.parse_args(argv)
    with open(args.results, encoding="utf-8") as f:
        lines = f.readlines()
    res = Results(lines)
    section = render(res, args, lines)
    if args.write:
        splice(args.write, section)
    else:
        sys.stdout.write(section)


if __name__ == "__main__":
    main()
