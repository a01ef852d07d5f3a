#!/usr/bin/env python3
"""Turns a bench result (bench.py) into JSON, a Markdown table and a PNG chart.

  report.py RESULT.json [OUTDIR]   re-render the table and chart of a result

Every figure is a ratio to native in the same run: each sample of a
configuration divided by native's median for that row; the cell shows the
median ratio and, in brackets, the min and max.
"""

import json
import os
import statistics
import sys

ROW_ORDER = ["W1 cold", "W1 hot", "W2 cold", "W2 hot", "W3", "W3 rm", "W4 cold", "W4 hot", "W5"]
ROW_HELP = {
    "W1": "`go list ./...` in a copy of GOROOT",
    "W2": "dd N x 1 KiB + sync",
    "W3": "untar 20k files in 200 dirs + read all",
    "W3 rm": "delete W3's files (at teardown)",
    "W4": "`git status` on a committed Go tree",
    "W5": "import of a SQL dump into PostgreSQL, data directory on the mount (2,000 commits, each a WAL fsync, then CHECKPOINT)",
}


def rows_of(res):
    have = set(res["results"]) | {r for e in res.get("errors", {}).values() for r in e}
    rows = [r for r in ROW_ORDER if r in have]
    return rows + sorted(have - set(rows))


def summary(res):
    """row -> cfg -> {median, min, max, n, ratio_median, ratio_min, ratio_max}"""
    out = {}
    for row, per in res["results"].items():
        nat = per.get("native")
        base = statistics.median(nat["samples"]) if nat and nat["samples"] else None
        for cfg, r in per.items():
            s = r["samples"]
            if not s:
                continue
            d = {"n": len(s), "median_s": round(statistics.median(s), 4), "min_s": min(s), "max_s": max(s)}
            if base:
                rs = [x / base for x in s]
                d.update(ratio=round(statistics.median(rs), 3), ratio_min=round(min(rs), 3),
                         ratio_max=round(max(rs), 3))
            out.setdefault(row, {})[cfg] = d
    return out


def _fmt_ratio(x):
    return ("%.2f" % x) if x < 10 else ("%.1f" % x) if x < 100 else "%.0f" % x


def cell(res, summ, row, cfg):
    d = summ.get(row, {}).get(cfg)
    err = res.get("errors", {}).get(cfg, {}).get(row)
    if cfg in res.get("skipped", {}):
        return "skipped"
    if d is None:
        return "error" if err else "-"
    flag = " (%d/%d ok)" % (d["n"], res["meta"].get("reps", d["n"])) if err else ""
    if cfg == "native":
        return "%.3g s (%.3g-%.3g)%s" % (d["median_s"], d["min_s"], d["max_s"], flag)
    if "ratio" not in d:
        return "%.3g s%s" % (d["median_s"], flag)
    return "**%sx** (%s-%s)%s" % (_fmt_ratio(d["ratio"]), _fmt_ratio(d["ratio_min"]), _fmt_ratio(d["ratio_max"]), flag)


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _max(xs):
    xs = [x for x in xs if x is not None]
    return max(xs) if xs else None


def _f(x, fmt="%.2f"):
    return "-" if x is None else fmt % x


def docker_run_lines(dr):
    """The "run" extra (contrib/bench/dockerrun): `docker run` to the first
    process per configuration, the first run apart (a state's first is its
    volume's first mount: a fresh store)."""
    if dr.get("error"):
        return ["- `docker run` to the first process: error: %s" % dr["error"][:200]]
    L = ["- `docker run` to the container's first process with that source mounted (a private dockerd, "
         "busybox; seconds from the CLI's start; first run, then the median of the rest; + its first stat of %s):"
         % dr.get("probe")]
    for name in ("native", "consistent", "cached", "delegated"):
        c = (dr.get("configs") or {}).get(name)
        if not c:
            continue
        if c.get("error"):
            L.append("  - %s: error: %s" % (name, c["error"][:200]))
            continue
        runs = c.get("runs") or []
        if not runs:
            continue
        first, rest = runs[0], runs[1:]
        line = "  - %s: first run %s s (stat %s s)" % (name, _f(first.get("first_process_s"), "%.3f"),
                                                       _f(first.get("first_stat_s"), "%.3f"))
        if rest:
            line += ", later runs %s s (stat %s s)" % (_f(_med([r.get("first_process_s") for r in rest]), "%.3f"),
                                                       _f(_med([r.get("first_stat_s") for r in rest]), "%.3f"))
        if c.get("volume_create_s") is not None:
            line += "; `docker volume create` before it %s s" % _f(c["volume_create_s"], "%.3f")
        L.append(line)
    return L


def markdown(res):
    m = res["meta"]
    summ = summary(res)
    cfgs = [c for c in res["configs"]]
    rows = rows_of(res)
    L = []
    L.append("## bindstate benchmark%s: %s, commit %s" % (" (quick)" if m.get("quick") else "", m.get("date"), m.get("commit")))
    L.append("")
    L.append("Ratio to native (ext4) in the same run: median of %s runs (min-max); native in seconds. "
             "Share: %s. W2: %s. W1 tree: %s files. Consistent measured via: %s. "
             "Host: %s cores, kernel %s, proactive page-cache reclaim: %s. Wall time %s s."
             % (m.get("reps"), m.get("share", "sshfs over loopback sshd"), m.get("w2"), (m.get("w1_tree") or {}).get("files", "?"), m.get("consistent_via", "-"),
                m.get("cpus"), m.get("kernel"), m.get("reclaim", "not recorded"), m.get("wall_s")))
    if m.get("share_op_ms"):
        L[-1] += (" One request to the share (an `lstat` of a missing name through it) took %.3f ms (median; min %.3f)."
                  % (m["share_op_ms"]["median"], m["share_op_ms"]["min"]))
    L.append("")
    L.append("| workload | " + " | ".join(cfgs) + " |")
    L.append("| --- | " + " | ".join("---" for _ in cfgs) + " |")
    for row in rows:
        L.append("| %s | " % row + " | ".join(cell(res, summ, row, c) for c in cfgs) + " |")
    L.append("")
    for w, h in ROW_HELP.items():
        if any(r == w or r.startswith(w + " ") for r in rows):
            L.append("- %s: %s" % (w, h))
    L.append("- cold: fresh share mount, fresh volume and store, caches dropped; hot: the same run repeated")

    pcfgs = [c for c in cfgs if c in res.get("resources", {})]
    if pcfgs:
        L.append("")
        L.append("Plugin process during each workload (median CPU seconds, median CPU % of one core, max RSS MiB):")
        L.append("")
        L.append("| workload | " + " | ".join(pcfgs) + " |")
        L.append("| --- | " + " | ".join("---" for _ in pcfgs) + " |")
        for row in rows:
            cells = []
            for c in pcfgs:
                rs = res["resources"][c].get(row)
                if not rs:
                    cells.append("-")
                    continue
                cells.append("%s s, %s%%, %s MiB" % (_f(_med([r["cpu_s"] for r in rs])), _f(_med([r["cpu_pct"] for r in rs]), "%.0f"),
                                                   _f(_max([r["rss_max_mib"] for r in rs]), "%.0f")))
            L.append("| %s | " % row + " | ".join(cells) + " |")
        L.append("")
        L.append("Plugin at idle (median CPU % of one core; max RSS MiB), after mount / after the workload:")
        L.append("")
        for c in pcfgs:
            ids = res.get("idle", {}).get(c, [])
            parts = []
            for when in ("after mount", "after workload"):
                xs = [i for i in ids if i and i.get("when") == when]
                if xs:
                    parts.append("%s: %s%%, %s MiB" % (when, _f(_med([i["cpu_pct"] for i in xs])),
                                                     _f(_max([i["rss_max_mib"] for i in xs]), "%.0f")))
            L.append("- %s: %s" % (c, "; ".join(parts) or "-"))

    wb = res.get("writeback", {})
    wrows = []
    for c in cfgs:
        if c == "native":
            continue
        for row in rows:
            d = wb.get(c, {}).get(row)
            pre = wb.get(c, {}).get(row.split()[0], {}) if row.endswith(("cold", "hot")) or row == row.split()[0] else {}
            d = d or {}
            lag, fl, al = d.get("lag_s"), d.get("exit_flush_s"), d.get("after_unmount_lag_s")
            first = row == row.split()[0] or row.endswith("cold")
            setup = (pre.get("initial_sync_s") or pre.get("mount_s")) if first else None
            if lag or fl or al or setup:
                lost = al and any(x is None for x in al)
                wrows.append("| %s | %s | %s | %s | %s | %s |" % (
                    c, row, _f(_med(setup), "%.2f s") if setup else "-",
                    _f(_med(lag or []), "%.2f s") if lag else "-", _f(_med(fl or []), "%.2f s") if fl else "-",
                    "**never (data lost)**" if lost else (_f(_med(al), "%.2f s") if al else "-")))
    if wrows:
        L.append("")
        L.append("Setup and writeback (medians): mount, or initial sync for sync tools (before the cold run); "
                 "writeback lag (end of the run until the data is on H; for sync tools the sync back); exit flush "
                 "(Unmount after the last run); time the data still needed to reach H after Unmount returned:")
        L.append("")
        L.append("| config | workload | mount / initial sync | writeback lag | exit flush (Unmount) | after Unmount |")
        L.append("| --- | --- | --- | --- | --- | --- |")
        L.extend(wrows)

    ex = res.get("extra") or {}
    if ex:
        L.append("")
        L.append("Also reported (BENCH.md):")
        L.append("")
        if ex.get("big_files"):
            L.append("- a %d-file source (native `find` walk %s s):" % (ex["big_files"], ex.get("big_walk_native_s")))
            for st in ("cached", "delegated"):
                e = ex.get(st)
                if not e:
                    continue
                if e.get("error"):
                    L.append("  - %s: error: %s" % (st, e["error"][:200]))
                    continue
                idl = e.get("idle_serving") or {}
                wp = e.get("walk_plugin") or {}
                L.append("  - %s: Create+Mount %s s, + first stat %s s; cold walk %s s (%sx native), plugin RSS max %s MiB "
                         "during the walk; idle while serving it: %s%% CPU, %s MiB"
                         % (st, e.get("mount_s"), e.get("mount_and_first_stat_s"), e.get("walk_s"), e.get("walk_ratio"),
                            wp.get("rss_max_mib"), idl.get("cpu_pct"), idl.get("rss_end_mib")))
        dr = ex.get("docker_run")
        if dr:
            L.extend(docker_run_lines(dr))
        f = ex.get("exit_flush")
        if f:
            if f.get("error"):
                L.append("- exit flush: error: %s" % f["error"][:200])
            else:
                L.append("- exit flush of %.0f MB in %d files: delegated Unmount %s s vs `cp -r` to the share %s s "
                         "(throughput %s of cp -r; cp -r into the delegated volume itself took %s s); files on H after: %s"
                         % (f["bytes"] / 1e6, f["files"], f.get("exit_flush_s"), f.get("cp_r_to_share_s"),
                            f.get("throughput_vs_cp"), f.get("cp_r_into_delegated_s"), f.get("on_host_after_unmount")))

    notes = []
    for c, why in res.get("skipped", {}).items():
        notes.append("- %s skipped: %s" % (c, why))
    for ce in res.get("cycle_errors", []):
        notes.append("- %s %s r%s (outside the timed runs): %s" % (ce["config"], ce["workload"], ce["rep"],
                                                                  ce["error"].replace("\n", " ")[:300]))
    for n in res.get("notes", []):
        notes.append("- " + n)
    for c, per in res.get("errors", {}).items():
        for row, e in per.items():
            notes.append("- %s %s: %s" % (c, row, e.replace("\n", " ")[:300]))
    if notes:
        L.append("")
        L.append("Errors and skips:")
        L.append("")
        L.extend(notes)
    return "\n".join(L) + "\n"


COLORS = {"native": "#4d4d4d", "consistent": "#d62728", "cached": "#1f77b4", "delegated": "#2ca02c",
          "cached-ro": "#aec7e8", "delegated-ro": "#98df8a",
          "rclone": "#ff7f0e", "unison": "#9467bd", "mutagen": "#8c564b"}


def chart(res, path):
    """Bars per workload, one colour per configuration, log scale."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print("report: no chart (%s): apt-get install python3-matplotlib, run with /usr/bin/python3" % e, file=sys.stderr)
        return None
    summ = summary(res)
    rows = [r for r in rows_of(res) if r in summ]
    cfgs = [c for c in res["configs"] if any(c in summ.get(r, {}) for r in rows)]
    if not rows or not cfgs:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows) + 2), 4.2), dpi=80)
    width = 0.8 / len(cfgs)
    for i, c in enumerate(cfgs):
        xs, ys, lo, hi = [], [], [], []
        for j, r in enumerate(rows):
            d = summ[r].get(c)
            if d and "ratio" in d:
                xs.append(j + (i - (len(cfgs) - 1) / 2) * width)
                ys.append(d["ratio"])
                lo.append(d["ratio"] - d["ratio_min"])
                hi.append(d["ratio_max"] - d["ratio"])
        ax.bar(xs, ys, width, label=c, color=COLORS.get(c), yerr=[lo, hi], capsize=2, error_kw={"elinewidth": 0.8})
    ax.set_yscale("log")
    ax.axhline(1, color="black", linewidth=0.6)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(rows)
    ax.set_ylabel("time / native (log)")
    m = res["meta"]
    ax.set_title("bindstate%s %s (median of %s, min-max bars)" % (" quick" if m.get("quick") else "", m.get("commit"), m.get("reps")),
                 fontsize=10)
    ax.legend(fontsize=8, ncol=min(4, len(cfgs)))
    ax.grid(axis="y", which="both", alpha=0.25)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ---- a sweep over the share's latency (bench.py --share-rtt 0,0.5,2)

def _sweep_points(res):
    """(rtt, op_ms, summary) per run, and the rows and configurations any
    run measured, in order."""
    pts, rows, cfgs = [], [], []
    for r in res["runs"]:
        m = r["meta"]
        summ = summary(r)
        pts.append((m.get("share_rtt_ms", 0), (m.get("share_op_ms") or {}).get("median"), summ, r))
        rows += [x for x in rows_of(r) if x not in rows]
        cfgs += [c for c in r["configs"] if c not in cfgs]
    return pts, rows, cfgs


def sweep_markdown(res):
    pts, rows, cfgs = _sweep_points(res)
    m = res["runs"][0]["meta"] if res["runs"] else {}
    L = ["## bindstate benchmark over a slower share: %s, commit %s" % (m.get("date"), m.get("commit")), ""]
    L.append("The same workloads with every round trip to the share made longer by a delay line "
             "(contrib/delayline between sshfs and the sshd: half the added time each way; requests in flight "
             "overlap). Ratio to native (ext4) in the same run, median of %s runs (min-max); native in seconds. "
             "Per column: the time added to each round trip, and what one request to the share then took "
             "(an `lstat` of a missing name through sshfs, median). Host: %s cores, kernel %s. Wall time %s s."
             % (m.get("reps"), m.get("cpus"), m.get("kernel"), res.get("wall_s")))
    L.append("")
    head = ["+%g ms (one request %s ms)" % (rtt, "%.2f" % op if op is not None else "?") for rtt, op, _, _ in pts]
    L.append("| workload | configuration | " + " | ".join(head) + " |")
    L.append("| --- | --- | " + " | ".join("---" for _ in pts) + " |")
    for row in rows:
        for c in cfgs:
            cells = [cell(r, summ, row, c) if c in r["configs"] else "-" for _, _, summ, r in pts]
            if all(x == "-" for x in cells):
                continue
            L.append("| %s | %s | " % (row, c) + " | ".join(cells) + " |")
    L.append("")
    for w, h in ROW_HELP.items():
        if any(r == w or r.startswith(w + " ") for r in rows):
            L.append("- %s: %s" % (w, h))
    L.append("- cold: fresh share mount, fresh volume and store, caches dropped; hot: the same run repeated")
    errs = ["%s (+%g ms): %s" % (c, rtt, "; ".join("%s: %s" % kv for kv in sorted(e.items())))
            for rtt, _, _, r in pts for c, e in sorted(r.get("errors", {}).items())]
    if errs:
        L.append("")
        L.append("Errors:")
        L += ["- " + e for e in errs]
    return "\n".join(L) + "\n"


def sweep_chart(res, path):
    """One panel per workload row: ratio to native against the time of one
    request to the share, a line per configuration, log scales."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print("report: no chart (%s): apt-get install python3-matplotlib, run with /usr/bin/python3" % e, file=sys.stderr)
        return None
    pts, rows, cfgs = _sweep_points(res)
    rows = [r for r in rows if any(r in summ for _, _, summ, _ in pts)]
    cfgs = [c for c in cfgs if c != "native"]
    if not rows or not cfgs or len(pts) < 2:
        return None
    ncol = min(3, len(rows))
    nrow = (len(rows) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.3 * nrow), dpi=80, squeeze=False)
    for i, row in enumerate(rows):
        ax = axes[i // ncol][i % ncol]
        for c in cfgs:
            xs, ys = [], []
            for _, op, summ, _ in pts:
                d = summ.get(row, {}).get(c)
                if op is not None and d and "ratio" in d:
                    xs.append(op)
                    ys.append(d["ratio"])
            if xs:
                ax.plot(xs, ys, marker="o", label=c, color=COLORS.get(c))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axhline(1, color="black", linewidth=0.6)
        ax.set_title(row, fontsize=10)
        ax.set_xlabel("one request to the share (ms, log)", fontsize=8)
        ax.set_ylabel("time / native (log)", fontsize=8)
        ax.grid(which="both", alpha=0.25)
    for j in range(len(rows), nrow * ncol):
        axes[j // ncol][j % ncol].axis("off")
    axes[0][0].legend(fontsize=8)
    m = res["runs"][0]["meta"]
    fig.suptitle("bindstate %s: ratio to native as the share gets slower (median of %s)" % (m.get("commit"), m.get("reps")),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_sweep(res, outdir, stem):
    res = dict(res)
    res["runs"] = [dict(r, summary=summary(r)) for r in res["runs"]]
    return _write(res, outdir, stem, sweep_markdown(res), sweep_chart)


def write_all(res, outdir, stem):
    res = dict(res)
    res["summary"] = summary(res)
    return _write(res, outdir, stem, markdown(res), chart)


def dumps(v, indent=""):
    """JSON of v, sorted keys, one line per record: an object or array that
    holds another is laid out a member a line, one that holds none (a
    sample, a resource record, a list of timings) stays on one line. The
    committed results stay small and still diff a record at a time (laid
    out member by member, a run's per-sample records were most of a
    157 KB file)."""
    inner = indent + " "
    if isinstance(v, dict) and any(isinstance(x, (dict, list)) for x in v.values()):
        items = ["%s%s: %s" % (inner, json.dumps(k), dumps(v[k], inner)) for k in sorted(v)]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v):
        return "[\n" + ",\n".join(inner + dumps(x, inner) for x in v) + "\n" + indent + "]"
    return json.dumps(v, sort_keys=True)


def _write(res, outdir, stem, md, draw):
    """Writes STEM.json (res), STEM.md (md, with the chart below it) and
    STEM.png (draw(res, path); none without matplotlib); returns the paths."""
    paths = []
    p = os.path.join(outdir, stem + ".json")
    with open(p, "w") as f:
        f.write(dumps(res) + "\n")
    paths.append(p)
    png = draw(res, os.path.join(outdir, stem + ".png"))
    if png:
        md += "\n![chart](%s)\n" % os.path.basename(png)
    p = os.path.join(outdir, stem + ".md")
    with open(p, "w") as f:
        f.write(md)
    paths.append(p)
    if png:
        paths.append(png)
    return paths


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1]) as f:
        r = json.load(f)
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.dirname(os.path.abspath(sys.argv[1]))
    stem = os.path.splitext(os.path.basename(sys.argv[1]))[0]
    if "sweep" in r:
        write_sweep(r, out, stem)
        print(sweep_markdown(r))
    else:
        write_all(r, out, stem)
        print(markdown(r))
