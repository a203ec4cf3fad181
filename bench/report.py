#!/usr/bin/env python3
"""Merges benchmark rows from Gatun and PyTorch (JSON lines) into one table per (workload, world).

    python3 bench/report.py ROWS.jsonl [ROWS2.jsonl ...] [--csv out.csv] [--json out.json] [--md out.md]

Standard library only. Each input line is one row object (the schema of bench/torch_suite.py; Gatun writes the
same fields). Rows are grouped by (workload, world) into tables, and within a table by (shape, dtype, mode)
into lines; every system+variant present gets a column, unknown variants included.

A cell is "median / pipelined" in microseconds: the median per-call latency (synchronize after every call) and
the per-call time of calls run back to back. Gatun's automatic cells also show the algorithm it chose, e.g.
"20.3 / 12.1 (one_shot)". A failed row shows FAILED(type) with the message in the notes under the table; a
wrong result shows WRONG(relative error) before its times; "unchecked" marks a result that was not checked.
The spread (p10-p90 of the latency) is in a second table under each table.

"Gatun / best peer" divides Gatun's automatic variant (variant "auto" for all_reduce, "default" for seeds and
mlp) by the fastest correct PyTorch cell of the same line, for latency and for pipelined time separately.
Workloads without PyTorch rows (e.g. input_path, host_overhead) get their own tables without that column.

Rows with moved_bytes (the norms family: layernorm, rmsnorm, softmax, loop_order) also get a bandwidth table
under their table: per cell, gbps = moved_bytes (bytes read once + written once) / pipelined time, and in
parentheses of_copy, that divided by the device-to-device copy measured just before in the same process
(copy_gbps). The floors themselves are the d2d_copy columns (a row with "floor": true, never "unchecked").

--csv: one line per input row with every field (plus source, the file and line it came from).
--json: {"rows": [...], "tables": [...]} with the cells and ratios as numbers.
--md: the Markdown tables (what goes into docs/BENCHMARKS.md).
"""
import argparse
import csv
import json
import re
import sys
from collections import OrderedDict

SCHEMA = ["system", "workload", "variant", "mode", "dtype", "shape", "bytes", "world",
          "median_us", "p10_us", "p90_us", "pipelined_us", "calls", "correct", "max_rel_err",
          "chosen", "error", "device", "versions"]
NORM_WORKLOADS = ["layernorm", "rmsnorm", "softmax", "loop_order"]
PEER_WORKLOADS = ["all_reduce", "seeds", "mlp"] + NORM_WORKLOADS
SYSTEM_ORDER = ["gatun", "pytorch"]
SYSTEM_LABEL = {"gatun": "Gatun", "pytorch": "PT"}
VARIANT_ORDER = {
    "gatun": ["auto", "default", "one_shot", "two_shot", "barrier_free", "nccl", "path2", "path3", "d2d_copy"],
    "pytorch": ["symm_one_shot", "symm_two_shot", "nccl", "symm_one_shot+eager", "nccl+eager", "compile_auto_select", "compile", "compile_nn", "eager",
                "eager_nn", "d2d_copy"],
}
AUTOMATIC = {"all_reduce": "auto", "seeds": "default", "mlp": "default", **{w: "default" for w in NORM_WORKLOADS}}
CELL_EXTRAS = ["moved_bytes", "gbps", "copy_gbps", "of_copy", "event_median_us", "event_pipelined_us", "floor"]
MODE_ORDER = {"replay": 0, "eager": 1}
DTYPE_ORDER = {"f32": 0, "bf16": 1, "f16": 2}


def load(paths):
    rows, bad = [], []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    bad.append(f"{path}:{n}: {e}")
                    continue
                if not isinstance(row, dict):
                    bad.append(f"{path}:{n}: not an object")
                    continue
                row["source"] = f"{path}:{n}"
                rows.append(row)
    return rows, bad


def num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def fmt_us(v):
    v = num(v)
    if v is None:
        return "?"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def fmt_bytes(b):
    b = num(b)
    if b is None:
        return ""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= size:
            q = b / size
            return f"{q:g} {unit}" if q == int(q) else f"{q:.1f} {unit}"
    return f"{int(b)} B"


def shape_key(shape):
    dims = [int(d) for d in re.findall(r"\d+", str(shape))]
    prod = 1
    for d in dims:
        prod *= d
    return (0, prod, dims, str(shape)) if dims else (1, 0, [], str(shape))


def column_key(col):
    system, variant = col
    s = SYSTEM_ORDER.index(system) if system in SYSTEM_ORDER else len(SYSTEM_ORDER)
    order = VARIANT_ORDER.get(system, [])
    v = order.index(variant) if variant in order else len(order)
    return (s, system, v, variant)


def label(col):
    system, variant = col
    return f"{SYSTEM_LABEL.get(system, system)} {variant}"


def failed(row):
    return row.get("error") not in (None, "")


def usable(row):
    """A timing that may be compared: no error, checked and correct, with a median."""
    return not failed(row) and row.get("correct") is True and num(row.get("median_us")) is not None


def short_error(err):
    err = str(err)
    head = err.split(":", 1)[0].strip()
    if re.fullmatch(r"[A-Za-z_][\w.]*", head) and len(head) <= 40:
        return head
    return err[:40]


def cell_text(row, notes):
    if row is None:
        return "-"
    if failed(row):
        msg = str(row["error"])
        if msg not in notes:
            notes.append(msg)
        return f"FAILED({short_error(msg)}) [{notes.index(msg) + 1}]"
    text = f"{fmt_us(row.get('median_us'))} / {fmt_us(row.get('pipelined_us'))}"
    if row.get("workload") == "host_overhead":
        return f"{fmt_us(row.get('median_us'))} ({row['chosen']})" if row.get("chosen") else fmt_us(row.get("median_us"))
    if row.get("chosen") and not row.get("floor"):  # a floor's description stays in the CSV and JSON
        text += f" ({row['chosen']})"
    if row.get("correct") is False:
        err = num(row.get("max_rel_err"))
        text = f"WRONG({err:.1e}) {text}" if err is not None else f"WRONG {text}"
    elif row.get("correct") is None and not row.get("floor"):
        text += " unchecked"
    return text


def bandwidth_text(row):
    """"gbps (of_copy)" of a row with bandwidth fields; "-" where there is none."""
    if row is None or failed(row) or num(row.get("gbps")) is None:
        return "-"
    of = num(row.get("of_copy"))
    return f"{row['gbps']:.0f}" + (f" ({of:.2f})" if of is not None else "")


def spread_text(row):
    if row is None or failed(row):
        return "-"
    p10, p90 = num(row.get("p10_us")), num(row.get("p90_us"))
    if p10 is None or p90 is None:
        return "?"
    return f"{fmt_us(p10)}-{fmt_us(p90)}"


def build_tables(rows):
    groups = OrderedDict()
    for row in rows:
        key = (str(row.get("workload")), row.get("world"))
        groups.setdefault(key, []).append(row)

    def table_order(key):
        w, world = key
        return (PEER_WORKLOADS.index(w) if w in PEER_WORKLOADS else len(PEER_WORKLOADS), w,
                world if isinstance(world, int) else 1 << 30)

    tables = []
    for key in sorted(groups, key=table_order):
        workload, world = key
        trows = groups[key]
        columns = sorted({(str(r.get("system")), str(r.get("variant"))) for r in trows}, key=column_key)
        has_peer = any(c[0] == "pytorch" for c in columns) and any(c[0] == "gatun" for c in columns)
        auto_variant = AUTOMATIC.get(workload)
        if auto_variant is None:  # another workload: the automatic variant is whichever of these exists
            auto_variant = next((v for s, v in columns if s == "gatun" and v in ("auto", "default")), None)
        lines = OrderedDict()
        duplicates = 0
        for r in trows:
            lkey = (str(r.get("shape")), str(r.get("dtype")), str(r.get("mode")))
            cells = lines.setdefault(lkey, {"bytes": r.get("bytes"), "cells": {}})
            col = (str(r.get("system")), str(r.get("variant")))
            if col in cells["cells"]:
                duplicates += 1  # the later row wins (the newer measurement); all rows stay in CSV and JSON
            cells["cells"][col] = r
            if cells["bytes"] is None:
                cells["bytes"] = r.get("bytes")
        ordered = sorted(lines.items(), key=lambda kv: (DTYPE_ORDER.get(kv[0][1], 9), kv[0][1], shape_key(kv[0][0]),
                                                        MODE_ORDER.get(kv[0][2], 9), kv[0][2]))
        out_lines = []
        for (shape, dtype, mode), info in ordered:
            cells = info["cells"]
            ratio = None
            if has_peer and auto_variant is not None:
                ratio = {"latency": None, "pipelined": None, "latency_peer": None, "pipelined_peer": None}
                g = cells.get(("gatun", auto_variant))
                peers = [(c, r) for c, r in cells.items() if c[0] == "pytorch" and usable(r)]
                if g is not None and usable(g) and peers:
                    c, r = min(peers, key=lambda cr: cr[1]["median_us"])
                    ratio["latency"] = g["median_us"] / r["median_us"] if r["median_us"] else None
                    ratio["latency_peer"] = label(c)
                    pp = [(c, r) for c, r in peers if num(r.get("pipelined_us"))]
                    if num(g.get("pipelined_us")) and pp:
                        c, r = min(pp, key=lambda cr: cr[1]["pipelined_us"])
                        ratio["pipelined"] = g["pipelined_us"] / r["pipelined_us"]
                        ratio["pipelined_peer"] = label(c)
            out_lines.append({"shape": shape, "dtype": dtype, "mode": mode, "bytes": info["bytes"],
                              "cells": cells, "ratio": ratio})
        meta = OrderedDict()
        for r in trows:
            s = SYSTEM_LABEL.get(str(r.get("system")), str(r.get("system")))
            for field in ("device", "versions"):
                if r.get(field):
                    meta.setdefault(s, OrderedDict()).setdefault(str(r[field]), None)
        tables.append({"workload": workload, "world": world, "columns": columns, "lines": out_lines,
                       "has_peer": has_peer and auto_variant is not None, "auto_variant": auto_variant,
                       "duplicates": duplicates, "meta": meta})
    return tables


def ratio_text(ratio):
    if ratio is None:
        return None
    lat = f"{ratio['latency']:.2f}" if ratio["latency"] is not None else "-"
    pipe = f"{ratio['pipelined']:.2f}" if ratio["pipelined"] is not None else "-"
    peers = [p.split(" ", 1)[1] if p else "-" for p in (ratio["latency_peer"], ratio["pipelined_peer"])]
    if ratio["latency"] is None and ratio["pipelined"] is None:
        return "- / -"
    vs = peers[0] if peers[0] == peers[1] else f"{peers[0]} / {peers[1]}"
    return f"{lat} / {pipe} (vs {vs})"


def render(table):
    """(title, header, body rows, spread rows, notes) as plain strings."""
    title = f"{table['workload']}, world {table['world']}"
    header = ["shape", "dtype", "mode", "bytes"] + [label(c) for c in table["columns"]]
    if table["has_peer"]:
        header.append("Gatun / best peer")
    notes, body, spread = [], [], []
    for line in table["lines"]:
        lead = [line["shape"], line["dtype"], line["mode"], fmt_bytes(line["bytes"])]
        cells = [cell_text(line["cells"].get(c), notes) for c in table["columns"]]
        spreads = [spread_text(line["cells"].get(c)) for c in table["columns"]]
        if table["has_peer"]:
            cells.append(ratio_text(line["ratio"]) or "-")
        body.append(lead + cells)
        spread.append(lead + spreads)
    note_lines = [f"[{i}] {msg}" for i, msg in enumerate(notes, 1)]
    return title, header, body, spread, note_lines


BANDWIDTH_TITLE = ("effective bandwidth, GB/s (bytes read once + written once, per pipelined call), and in parentheses "
                   "the fraction of the device-to-device copy measured just before in the same process:")


def render_bandwidth(table):
    """(header, body) of the bandwidth table, or None where no row of the table has moved_bytes."""
    if not any(num(r.get("moved_bytes")) is not None for line in table["lines"] for r in line["cells"].values()):
        return None
    header = ["shape", "dtype", "mode", "moved"] + [label(c) for c in table["columns"]]
    body = []
    for line in table["lines"]:
        moved = next((r.get("moved_bytes") for r in line["cells"].values() if num(r.get("moved_bytes")) is not None), None)
        body.append([line["shape"], line["dtype"], line["mode"], fmt_bytes(moved)]
                    + [bandwidth_text(line["cells"].get(c)) for c in table["columns"]])
    return header, body


LEGEND = ("Each cell: median latency / pipelined time per call, in microseconds. Latency: host wall time from "
          "enqueue to completion with a synchronize after every call; pipelined: the calls run back to back "
          "with one synchronize at the end, divided by the number of calls. Gatun's automatic cells show the "
          "algorithm it chose in parentheses. \"Gatun / best peer\": Gatun's automatic variant divided by the "
          "fastest correct PyTorch cell of the line (latency / pipelined). FAILED(...) rows are explained in "
          "the notes; WRONG(e) is a result outside tolerance (e = relative norm error); \"-\" was not measured.")


def text_table(header, body):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)] if body else [len(h) for h in header]
    fmt = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
    out = [fmt(header), "  ".join("-" * w for w in widths)]
    out += [fmt(r) for r in body]
    return "\n".join(out)


def md_escape(x):
    return str(x).replace("|", "\\|").replace("\n", " ")


def md_table(header, body):
    out = ["| " + " | ".join(md_escape(h) for h in header) + " |",
           "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(md_escape(x) for x in r) + " |" for r in body]
    return "\n".join(out)


def meta_lines(table):
    return [f"{s}: " + "; ".join(vals) for s, vals in table["meta"].items()]


def to_stdout(tables, bad):
    print(LEGEND)
    for t in tables:
        title, header, body, spread, notes = render(t)
        print()
        print(f"== {title} ==")
        for m in meta_lines(t):
            print(m)
        print(text_table(header, body))
        print()
        print("latency spread, p10-p90 (us):")
        print(text_table(header[:-1] if t["has_peer"] else header, spread))
        bw = render_bandwidth(t)
        if bw:
            print()
            print(BANDWIDTH_TITLE)
            print(text_table(*bw))
        for n in notes:
            print(n)
        if t["duplicates"]:
            print(f"({t['duplicates']} repeated cell(s): the row read last is shown)")
    if bad:
        print()
        print(f"{len(bad)} unreadable line(s) skipped:")
        for b in bad:
            print("  " + b)


def to_markdown(tables):
    out = [LEGEND]
    for t in tables:
        title, header, body, spread, notes = render(t)
        out += ["", f"### {title}", ""]
        for m in meta_lines(t):
            out.append(f"- {md_escape(m)}")
        if t["meta"]:
            out.append("")
        out.append(md_table(header, body))
        out += ["", "<details><summary>Latency spread, p10-p90 (us)</summary>", "",
                md_table(header[:-1] if t["has_peer"] else header, spread), "", "</details>"]
        bw = render_bandwidth(t)
        if bw:
            out += ["", md_escape(BANDWIDTH_TITLE), "", md_table(*bw)]
        if notes:
            out.append("")
            out += [f"- {md_escape(n)}" for n in notes]
        if t["duplicates"]:
            out += ["", f"({t['duplicates']} repeated cell(s): the row read last is shown.)"]
    return "\n".join(out) + "\n"


def to_json(rows, tables):
    jt = []
    for t in tables:
        lines = []
        for line in t["lines"]:
            cells = {}
            for c in t["columns"]:
                r = line["cells"].get(c)
                if r is None:
                    continue
                cells[label(c)] = {k: r.get(k) for k in ("median_us", "p10_us", "p90_us", "pipelined_us", "calls",
                                                         "correct", "max_rel_err", "chosen", "error", "source")}
                cells[label(c)].update({k: r[k] for k in CELL_EXTRAS if k in r})
            lines.append({"shape": line["shape"], "dtype": line["dtype"], "mode": line["mode"],
                          "bytes": line["bytes"], "cells": cells, "gatun_over_best_peer": line["ratio"]})
        jt.append({"workload": t["workload"], "world": t["world"], "columns": [label(c) for c in t["columns"]],
                   "automatic_variant": t["auto_variant"] if t["has_peer"] else None,
                   "lines": lines})
    return {"rows": rows, "tables": jt}


def to_csv(rows, path):
    extra = sorted({k for r in rows for k in r} - set(SCHEMA) - {"source"})
    fields = SCHEMA + extra + ["source"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else
                            json.dumps(r[k]) if isinstance(r.get(k), (dict, list, bool)) else r.get(k))
                        for k in fields})


def main(argv=None):
    p = argparse.ArgumentParser(description="Gatun and PyTorch benchmark rows into one table.")
    p.add_argument("rows", nargs="+", help="JSON-lines files")
    p.add_argument("--csv")
    p.add_argument("--json")
    p.add_argument("--md")
    a = p.parse_args(argv)
    rows, bad = load(a.rows)
    tables = build_tables(rows)
    to_stdout(tables, bad)
    if a.csv:
        to_csv(rows, a.csv)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(to_json(rows, tables), f, indent=1)
            f.write("\n")
    if a.md:
        with open(a.md, "w") as f:
            f.write(to_markdown(tables))
    if not rows:
        print("no rows read", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
