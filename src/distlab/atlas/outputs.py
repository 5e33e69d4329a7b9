"""The map's tables: cells, winners, crossovers, the reference against the floor, the replay benchmark."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..results.tables import markdown_table, write_table, write_table_record
from .efficiency import measured_ratios
from .profile import apply as apply_profile
from .profile import load as load_profile
from .profile import mode as compute_mode
from .grid import interval, projected_cells, ranked_mask, simulated_cells, winners
from .projection import LINK_RANGE, ClockSettings, measured_flops_per_s
from .record import Recording
from .replay import replay
from .workflow import straggler_for


# the pairs crossovers.csv holds, in its order: the claims' contrasts, which the docs and the
# time-vs-bandwidth figure read; a choice, not a property of the catalogue (every technique against
# DDP in plot order would add eight pairs and put IS-SGD before PGC-FR)
CROSSOVER_PAIRS = (("diloco", "ddp"), ("pgc-fr", "ddp"), ("is-sgd", "ddp"), ("diloco-demo", "diloco"))


def bandwidths(a: dict) -> np.ndarray:
    m = a["map"]["bandwidths"]
    return np.geomspace(float(m["lo"]), float(m["hi"]), int(m["points"]))


def load_runs(done_files) -> list[Recording]:
    recs = []
    for f in done_files:
        for d in json.loads(Path(f).read_text())["runs"]:
            recs.append(Recording.load(d))
    return recs


def crossovers(cells: pd.DataFrame, a_tech: str, b_tech: str) -> pd.DataFrame:
    """Per (size, N, straggler, latency): the bandwidths between which ``a`` stops/starts beating ``b``."""
    keys = ["n_params", "N", "straggler", "latency_s"]
    out = []
    sub = cells[cells["technique"].isin([a_tech, b_tech])]
    sub = sub[ranked_mask(sub)]  # a technique listed apart (no step ratio there) has no time to target to cross
    for k, g in sub.groupby(keys):
        p = g.pivot_table(index="bandwidth_Bps", columns="technique", values="time_s")
        if a_tech not in p or b_tech not in p:
            continue
        better = (p[a_tech] < p[b_tech]).to_numpy()
        bws = p.index.to_numpy()
        flips = np.flatnonzero(better[1:] != better[:-1])
        for i in flips:
            out.append({**dict(zip(keys, k)), "a": a_tech, "b": b_tech, "bw_lo_Bps": bws[i], "bw_hi_Bps": bws[i + 1],
                        "a_wins_below": bool(better[i])})
    return pd.DataFrame(out, columns=keys + ["a", "b", "bw_lo_Bps", "bw_hi_Bps", "a_wins_below"])


def reference_table(a: dict, ref_done, floors_csv, target: float) -> pd.DataFrame:
    recs = load_runs([ref_done])
    fl = pd.read_csv(floors_csv)
    bigram = float(fl.loc[fl["split"] == "val", "bigram_nats"].iloc[0])
    rows = [{"seed": r.seed, "steps": len(r.steps), "final_curve_val_loss": r.curve()[1][-1],
             "steps_to_target": r.steps_to_target(target), "bigram_floor_val": bigram,
             "below_floor_by": bigram - r.curve()[1][-1]} for r in recs]
    return pd.DataFrame(rows)


def replay_benchmark(rec: Recording, target: float, cells: int = 10_000) -> dict:
    """Seconds to replay one whole recording on ``cells`` network cells (one straggler model)."""
    side = int(np.sqrt(cells))
    B, L = np.meshgrid(np.geomspace(1.25e6, 5e10, side), np.geomspace(1e-5, 0.1, cells // side), indexing="ij")
    t0 = time.perf_counter()
    replay(rec, L.ravel(), B.ravel(), {"model": "exponential", "mean": 0.01})
    return {"cells": int(B.size), "steps_replayed": len(rec.steps),
            "technique": rec.technique, "N": rec.n, "seconds": time.perf_counter() - t0}


def extrapolated_cells(a: dict, every: list[Recording], recs: list[Recording], target: float, bws,
                       lats) -> tuple[float, pd.DataFrame]:
    """(the FLOP rate, the extrapolated cells): the configured sizes x workers x straggler models,
    every bandwidth, the middle latency: time per step from the projected clock (overlap on, fp32)
    x the step-efficiency ratio against DDP (:func:`distlab.atlas.grid.projected_cells`)."""
    ex = a["extrapolate"]
    rate = measured_flops_per_s(recs) if ex["flops_per_s"] == "measured" else float(ex["flops_per_s"])
    tokens = int(a["batch_size"]) * int(next(iter(a["sizes"].values())).get("block_size", 32))
    # the query's clock for the same settings: an achieved rate (measured, or atlas.extrapolate's) is
    # exact in MFU; the link at its stated achieved fraction of the nominal bandwidth
    clock = ClockSettings(flops_per_s=rate, tokens=tokens, link_range=LINK_RANGE)
    lat_mid = np.full(bws.size, lats[len(lats) // 2])
    xrows = []
    for P in ex["sizes"]:
        for n in ex["workers"]:
            for sname, scfg in a["straggler_axis"].items():
                df = projected_cells(every, target, float(P), int(n), int(a["s"]), clock, lat_mid, bws,
                                     straggler_for(scfg, int(n)))
                if not df.empty:
                    df["straggler"] = sname
                    xrows.append(df)
    return rate, (pd.concat(xrows, ignore_index=True) if xrows else pd.DataFrame())


def build_map(a: dict, done_files, ref_done, floors_csv, out: Path) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = float(a["target_loss"])
    every = apply_profile(load_runs(done_files), a)  # atlas.compute: the stored profile's seconds, or measured
    # the map ranks the full grid only; the trend cells (atlas.trend) join the step-efficiency fit
    recs = [r for r in every if not r.trend]
    bws, lats = bandwidths(a), [float(x) for x in a["map"]["latencies"]]
    axis = a["straggler_axis"]
    grid_cells = {(r.n_params, r.n) for r in recs}
    # the straggler configs of each N differ only by where "last" points: one table per N
    cells = []
    for n in sorted({r.n for r in recs}):
        strag = {k: straggler_for(v, n) for k, v in axis.items()}
        cells.append(simulated_cells([r for r in recs if r.n == n], target, bws, lats, strag))
    cells = pd.concat(cells, ignore_index=True)
    rate, xcells = extrapolated_cells(a, every, recs, target, bws, lats)
    allcells = pd.concat([cells, xcells], ignore_index=True)
    write_table(allcells, out / "cells.csv")
    win = winners(allcells)
    write_table(win, out / "winners.csv")
    cross = pd.concat([crossovers(allcells, a_t, b_t) for a_t, b_t in CROSSOVER_PAIRS], ignore_index=True)
    write_table(cross, out / "crossovers.csv")
    ratio_rows = pd.DataFrame([{**vars(c), "trend": (c.n_params, c.N) not in grid_cells}
                               for c in measured_ratios(every, target)[0]])
    write_table(ratio_rows, out / "efficiency.csv")
    ref = reference_table(a, ref_done, floors_csv, target)
    write_table(ref, out / "reference.csv")
    # precondition: the DDP reference reaches the target on every seed of every measured (size, N)
    reached = [{"n_params": r.n_params, "N": r.n, "technique": r.technique, "seed": r.seed,
                "steps_to_target": r.steps_to_target(target)} for r in recs if r.straggler.get("model") == "none"]
    reached = pd.DataFrame(reached)
    write_table(reached, out / "steps_to_target.csv")
    ttt = ttt_table(a, recs)
    write_table(ttt, out / "ttt.csv")
    # the scorecard's table records the runs it was built from, the full grid's (a vanished run fails
    # its reader); the trend cells' runs are not in it
    write_table_record(out / "ttt.csv", ttt, [r.path for r in recs])
    big = max(recs, key=lambda r: (r.technique == "ddp", r.n, r.n_params))
    bench = replay_benchmark(big, target)
    (out / "bench_replay.json").write_text(json.dumps(bench, indent=2) + "\n")
    compute = {"mode": compute_mode(a)}
    if compute["mode"] == "stored":
        prof, sha = load_profile(a.get("compute_profile", "data/atlas/compute_profile.json"))
        compute.update(profile=str(a.get("compute_profile", "data/atlas/compute_profile.json")), sha256=sha,
                       measured=prof["provenance"]["date_utc"], machine=prof["provenance"]["machine"].get("cpu"))
    summary = {"target_loss": target, "flops_per_s": rate, "compute": compute, "cells": int(len(allcells)),
               "ddp_reaches_target_every_seed": bool(reached[reached.technique == "ddp"]["steps_to_target"].notna().all()),
               "replay_bench": bench}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    md = ["# The atlas: winners (simulated and extrapolated cells)", "",
          f"Target validation loss {target} nats/byte (fixed in config before the runs).  Times are "
          "**simulated** (replayed recordings on the modelled cluster; compute "
          + ("the stored profile's, " + compute["profile"] + ", measured " + compute["measured"]
             if compute["mode"] == "stored" else "measured while each run trained") + ") or **extrapolated** (FLOP/byte arithmetic "
          f"at {rate:.3g} FLOP/s, overlap on, the link at {LINK_RANGE[0]:g}..{LINK_RANGE[1]:g} of its nominal "
          "bandwidth, x the step-efficiency ratio against DDP: measured, fitted within 10x of the runs or published; "
          "column basis).  A technique without a ratio at a cell's distance is not ranked: column apart lists it "
          "with the step ratio under which it would match the winner.", ""]
    show = win[win["latency_s"].isin([lats[len(lats) // 2]])].copy()
    show = show.iloc[:: max(1, len(show) // 60)]
    md.append(markdown_table(show))
    (out / "winners.md").write_text("\n".join(md) + "\n")
    return summary


def curve_table(recs: list[Recording]) -> pd.DataFrame:
    rows = []
    for r in recs:
        st, v = r.curve()
        for s, x in zip(st, v):
            rows.append({"technique": r.technique, "n_params": r.n_params, "N": r.n, "seed": r.seed,
                         "straggler": r.straggler.get("model"), "step": int(s), "val_loss": float(x)})
    return pd.DataFrame(rows)


__all__ = ["build_map", "crossovers", "curve_table", "interval", "load_runs"]


def ttt_table(a: dict, recs: list[Recording]) -> pd.DataFrame:
    """The scorecard's table: one row per (technique, size, N, straggler, named network, seed):
    simulated time to target (NaN where never reached or where the replay is invalid for an
    arrival-dependent technique), steps to target, reached (0/1) and the run's horizon."""
    target = float(a["target_loss"])
    size_of = {}
    for name, m in a["sizes"].items():
        size_of[json.dumps(m, sort_keys=True)] = name
    nets = a["claims_networks"]
    rows = []
    for r in recs:
        size = size_of.get(json.dumps((r.spec or {}).get("model"), sort_keys=True), str(r.n_params))
        trained = r.straggler.get("model")
        for sname, scfg in a["straggler_axis"].items():
            cfg = straggler_for(scfg, r.n)
            if trained != "none" and cfg != r.straggler:
                continue
            if trained == "none" and sname != "none" and any(
                    (q.technique, q.n, q.n_params, q.seed) == (r.technique, r.n, r.n_params, r.seed)
                    and q.straggler == cfg for q in recs):
                continue  # the run trained under this straggler model stands for it
            for nname, net in nets.items():
                t, valid = time_to_target_one(r, target, net, cfg)
                k = r.steps_to_target(target)
                rows.append({"technique": r.technique, "size": size, "n_params": r.n_params, "N": r.n,
                             "straggler": sname, "network": nname, "seed": r.seed,
                             "time_to_target_s": t if (valid and np.isfinite(t)) else np.nan,
                             "steps_to_target": np.nan if k is None else k, "reached": int(k is not None),
                             "valid": int(valid), "steps": len(r.steps)})
    return pd.DataFrame(rows)


def time_to_target_one(rec: Recording, target: float, net: dict, straggler: dict) -> tuple[float, bool]:
    from .replay import time_to_target

    t, v = time_to_target(rec, target, [float(net["latency_s"])], [float(net["bandwidth_Bps"])], straggler)
    return float(t[0]), bool(v[0])
