"""Measuring the atlas's stored compute profile (:mod:`distlab.atlas.profile`) and checking that
it covers a configuration: ``python -m distlab atlas profile``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..config.specs import SpecError
from .profile import size_key
from .spec import TECHNIQUES, kind


def _trend_specs(a: dict, technique: str) -> list[tuple[str, dict]]:
    """The technique's trend runs (atlas.trend), as run_specs makes them."""
    from .workflow import run_specs

    if technique not in (a.get("trend") or {}).get("techniques", []):
        return []
    return [(label, spec) for label, spec in run_specs(a, technique, 0.01, None) if spec.get("trend")]


def check_covers(prof: dict, a: dict, techniques=None) -> list[str]:
    """What the profile lacks for the section ``a`` (every size x technique x N it runs)."""
    from .workflow import reference_specs, run_specs, sweep_specs

    want = set()
    for t in techniques or a["techniques"]:
        for _, spec in sweep_specs(a, t) + run_specs(a, t, 0.01, None):
            want.add((size_key(spec["model"], spec["batch_size"]), t, int(spec["n_workers"])))
    for _, spec in reference_specs(a):
        want.add((size_key(spec["model"], spec["batch_size"]), "ddp", int(spec["n_workers"])))
    return sorted(f"{k} {t} N={n}" for k, t, n in want
                  if str(n) not in prof["sizes"].get(k, {}).get("techniques", {}).get(t, {}))



def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in __import__("os").getloadavg()]
    except OSError:
        return []


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _shapes(sections: list[dict], techniques: list[str] | None) -> dict[str, tuple[dict, int, dict, set]]:
    """size key -> (model, batch, the first section that runs it (its techniques' settings),
    {(technique, N)}): every shape a section's grid, reference runs or trend runs train."""
    from .workflow import reference_specs

    shapes: dict[str, tuple[dict, int, dict, set]] = {}
    for a in sections:
        a = {**a, "compute": "measured"}
        for t in techniques or list(TECHNIQUES):
            for size in a["sizes"]:
                for n in a["n_workers"]:
                    k = size_key(a["sizes"][size], a["batch_size"])
                    shapes.setdefault(k, (dict(a["sizes"][size]), int(a["batch_size"]), a, set()))[3].add((t, int(n)))
        for _, spec in reference_specs(a) + [ls for t in techniques or list(TECHNIQUES)
                                             for ls in _trend_specs(a, t)]:
            k = size_key(spec["model"], spec["batch_size"])
            shapes.setdefault(k, (dict(spec["model"]), int(spec["batch_size"]), a, set()))[3].add(
                (spec["technique"], int(spec["n_workers"])))
    return shapes


def _pass_means(net, train, block: int, bs: int, repeats: int, steps: int) -> list[float]:
    """Each repeat's mean seconds of one forward and backward pass (a plain loop, wall clock)."""
    import time

    from ..data import text_batch
    from ..models import lm_loss

    pass_means = []
    for r in range(repeats):
        ts = []
        for i in range(steps):
            x, y = text_batch(train, block, bs, r, 0, i)
            net.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            lm_loss(net(x), y).backward()
            ts.append(time.perf_counter() - t0)
        pass_means.append(float(np.mean(ts)))
    return pass_means


def _technique_cost(base: dict, model: dict, bs: int, t: str, n: int, repeats: int, steps: int,
                    pass_means: list[float], data_dir, work: Path) -> dict:
    """``extra_s`` (and ``master_s``, master kinds) of technique ``t`` on N = ``n`` workers: the
    simulated driver's ``steps`` steps, once per repeat, against that repeat's pass seconds."""
    from .train import run_simulated
    from .workflow import base_spec

    a = {**base, "sizes": {"m": model}, "batch_size": bs}
    extra, master = [], []
    for r in range(repeats):
        spec = base_spec(a, t, "m", n, r, 0.01, {"model": "none"}, steps=steps)
        spec["eval_every"] = steps + 1     # no evaluation inside the timed steps' run
        spec["eval_batches"] = 1
        if t.startswith("diloco"):
            spec["steps"] = steps - steps % int(spec["diloco"]["H"]) or int(spec["diloco"]["H"])
        d = run_simulated(spec, data_dir, work / f"r{r}")
        rec = json.loads((d / "record.json").read_text())["steps"]
        comp = np.array([s["compute_s"] for s in rec], float)
        passes = np.array([s["passes"] for s in rec], float)
        extra.append(float(np.mean(comp - passes * pass_means[r])))
        if kind(t) == "master":
            master.append(float(np.mean([s["master_s"] for s in rec])))
    c = {"extra_s": max(0.0, float(np.median(extra)))}
    if master:
        c["master_s"] = float(np.median(master))
    return c


def measure(sections: list[dict], data_dir, work_dir, repeats: int, steps: int, command: str,
            techniques: list[str] | None = None) -> dict:
    """A profile for every size (and batch) of the ``sections`` x every technique x every N they
    run: ``pass_s`` the median over ``repeats`` of a repeat's mean single pass (a plain loop, one
    thread); per technique and N the simulated driver's ``steps`` steps, ``extra_s`` the median over
    repeats of the mean of (a worker's measured compute - its passes x that repeat's pass seconds),
    at least 0, and ``master_s`` the median of the master update's mean.  Wall clock
    (``time.perf_counter``), as the driver measures."""
    import datetime
    import os
    import platform
    import time

    import torch

    from ..data import load_split
    from .train import build_lm

    if repeats < 1 or steps < 1:
        raise SpecError(f"--repeats/--steps: must be at least 1, got {repeats}/{steps}")
    torch.set_num_threads(1)
    train = load_split(Path(data_dir), "train")["tokens"]
    load_before, t_start = _loadavg(), time.perf_counter()
    shapes = _shapes(sections, techniques)
    out_sizes = {}
    for k, (model, bs, base, combos) in sorted(shapes.items()):
        block = int(model.get("block_size", 32))
        net = build_lm(model, 0)
        pass_means = _pass_means(net, train, block, bs, repeats, steps)
        pass_s = float(np.median(pass_means))
        techs: dict[str, dict] = {}
        for t, n in sorted(combos):
            c = _technique_cost(base, model, bs, t, n, repeats, steps, pass_means, data_dir,
                                Path(work_dir) / k / t / f"n{n}")
            techs.setdefault(t, {})[str(n)] = c
        out_sizes[k] = {"model": model, "batch_size": bs, "pass_s": pass_s,
                        "pass_s_repeats": pass_means, "techniques": techs}
    return {
        "label": "measured",
        "what": "seconds of a worker's step in the atlas's simulated driver: passes x pass_s + extra_s "
                "(+ master_s, master kinds); docs/atlas.md",
        "provenance": {
            "command": command,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {"cpu": _cpu_name(), "logical_cpus": os.cpu_count(), "torch_threads": 1,
                        "python": platform.python_version(), "torch": torch.__version__,
                        "platform": platform.platform()},
            "load": {"loadavg_1_5_15_before": load_before, "loadavg_1_5_15_after": _loadavg(),
                     "note": "the machine's load average while measuring: a shared machine inflates every "
                             "number alike or not; the profile makes the default run independent of the "
                             "load, not accurate to an idle machine"},
            "statistic": "median over repeats of each repeat's mean (wall clock, time.perf_counter; one torch "
                         "thread); extra_s = mean(measured compute - passes x the repeat's pass seconds), "
                         "clamped at 0",
            "repeats": repeats, "steps": steps,
            "seconds": round(time.perf_counter() - t_start, 1),
        },
        "sizes": out_sizes,
    }
