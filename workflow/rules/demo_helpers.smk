# DeMo (P4) helpers only: paths, run specs, the registered tables and outputs.  No rules here.

from distlab.extra_seeds import for_setting

DEMO = config["demo"]
DEMO_RUN = f"{RESULTS}/demo/{{dbackend}}/n{{nw}}/{{dmethod}}/seed{{seed}}"
DEMO_SIM_JOB = f"{RESULTS}/demo/{SIM}/n{{nw}}/{{dmethod}}"   # a simulated job: every seed below it
DEMO_SWEEP_JOB = f"{RESULTS}/demo/sweep/lr{{lr}}/{{dmethod}}"   # a sweep job: every sweep seed below it
DEMO_LR_CHOICE = f"{RESULTS}/demo/sweep/chosen_lr.json"       # the sweep's choice (validation split)
DEMO_FROM_SWEEP = bool(DEMO.get("lr_from_sweep", False))
DEMO_NETWORKS = as_json(DEMO["networks"])
DEMO_REAL = DEMO["real"]["enabled"]
DEMO_REAL_BACKEND = DEMO["real"]["backend"]


wildcard_constraints:
    dmethod=r"adamw|demo|demo-compact|demo-allmean|diloco|powersgd",
    dbackend=r"simulated|gloo|nccl",
    nw=r"\d+",
    lr=r"[0-9.e-]+",


def demo_lr(method, lr=None):
    """A run's learning rate: the sweep point's, the sweep's choice on the validation split
    (read by the job from DEMO_LR_CHOICE, an input of its rule), or the configured value."""
    if lr is not None:
        return float(lr)
    if DEMO_FROM_SWEEP:
        return {"sweep": DEMO_LR_CHOICE, "method": method}
    return float(DEMO["lr"][method])


def demo_choice_input():
    return [DEMO_LR_CHOICE] if DEMO_FROM_SWEEP else []


def demo_sim_settings():
    """(N, method) of every simulated job: methods x n_workers, and more_workers' methods x its N."""
    d = DEMO
    out = [(int(n), m) for n in d["n_workers"] for m in d["methods"]]
    more = d.get("more_workers") or {}
    out += [(int(n), m) for n in more.get("n_workers", []) for m in more.get("methods", [])
            if (int(n), m) not in out]
    return out


def demo_reuse(method, n):
    """The sweep's root when the comparison job of (method, N) takes its sweep seeds' runs from the
    sweep: the lr is the sweep's choice, the method was swept at this N, and the sweep ran the
    comparison's horizon, so the comparison at the chosen lr is the sweep's run at that lr for
    those seeds (the same computation).  None otherwise."""
    sw = DEMO.get("sweep") or {}
    same = (DEMO_FROM_SWEEP and method in sw.get("methods", []) and int(n) == int(sw.get("n_workers", -1))
            and int(sw.get("steps", -1)) == int(DEMO["steps"]))
    return f"{RESULTS}/demo/sweep" if same else None


def demo_reuse_input(w):
    """The sweep runs a comparison job may take (every swept lr: the choice is known only at run time)."""
    if demo_reuse(w.dmethod, w.nw) is None:
        return []
    sw = DEMO["sweep"]
    return [f"{RESULTS}/demo/sweep/lr{lr:g}/{w.dmethod}/seed{s}/manifest.json"
            for lr in sw["lrs"] for s in sw["seeds"] if int(s) in [int(k) for k in config["seeds"]]]


def demo_extra_seeds(n, method):
    """Extra seeds of one simulated setting whose claim asked for more (config stats.extra_seeds),
    numbered after config seeds; each runs in a job of its own (demo_train_sim_extra)."""
    return for_setting(EXTRA_SEED_REQUESTS, config["seeds"], "demo_sim", {"method": method, "n_workers": int(n)})


def demo_all_extra_seeds():
    """Every extra seed of any simulated setting (the extra-seed rule's wildcard values)."""
    return sorted({k for n, m in demo_sim_settings() for k in demo_extra_seeds(n, m)})


def demo_sim_spec(method, n, seeds):
    """The spec of a simulated comparison job (its seeds; the sweep's root where it reuses runs)."""
    return demo_spec(method, n, None, SIM, seeds=seeds, reuse=demo_reuse(method, n))


def demo_spec(method, n, seed, backend, lr=None, steps=None, seeds=None, reuse=None):
    """The run spec of one run, or with ``seeds`` (simulated) of every seed of one job."""
    d = DEMO
    spec = {
        "experiment": "demo", "method": method, "backend": backend,
        **({"seeds": [int(k) for k in seeds]} if seeds is not None else {"seed": int(seed)}),
        "model": d["model"], "n_workers": int(n), "batch_size": d["batch_size"],
        "lr": demo_lr(method, lr),
        "steps": int(steps or d["steps"]), "eval_every": d["eval_every"],
        "eval_batches": d["eval_batches"], "dtype": d.get("dtype", "float32"),
        "demo": d["demo"], "adamw": d["adamw"], "diloco": d["diloco"], "powersgd": d["powersgd"],
        "cluster": {"compute": d["compute"], "network": config["cluster"]["network"],
                    "straggler": {"model": "none"}},
        **({"reuse_from": reuse} if reuse else {}),
    }
    return as_json(spec)


def demo_runs(group):
    d = DEMO
    if group == SIM:
        return [f"{RESULTS}/demo/{SIM}/n{n}/{m}/seed{s}/manifest.json"
                for n, m in demo_sim_settings() for s in [*config["seeds"], *demo_extra_seeds(n, m)]]
    if group == "sweep":
        sw = d["sweep"]
        return [f"{RESULTS}/demo/sweep/lr{lr:g}/{m}/seed{s}/manifest.json"
                for lr in sw["lrs"] for m in sw["methods"] for s in sw["seeds"]]
    r = d["real"]
    return [f"{RESULTS}/demo/{group}/n{n}/{m}/seed{s}/manifest.json"
            for n in r["n_workers"] for m in r["methods"] for s in r["seeds"]]


DEMO_FIGURES = [f"{PAPER}/figures/demo_{k}.png" for k in ("loss_steps", "gap_steps", "loss_bytes", "loss_time")]
DEMO_TABLES = [f"{PAPER}/tables/demo_results.csv", f"{PAPER}/tables/demo_results.md",
               *([f"{PAPER}/tables/demo_sweep.md"] if DEMO_FROM_SWEEP else []),
               f"{PAPER}/tables/demo_bytes.csv", f"{PAPER}/tables/demo_bytes.md"]
DEMO_REAL_OUT = ([f"{PAPER}/figures/demo_real.png", f"{PAPER}/tables/demo_real.md"] if DEMO_REAL else [])

register_tables("P4", {"demo_sim": f"{RESULTS}/demo/{SIM}/summary.csv",
                       "demo_bytes": f"{PAPER}/tables/demo_bytes.csv",
                       **({"demo_real": f"{RESULTS}/demo/{DEMO_REAL_BACKEND}/summary.csv"} if DEMO_REAL else {})})
register_outputs("P4", DEMO_FIGURES + DEMO_TABLES + DEMO_REAL_OUT)


def DEMO_REAL_SPEC(w):
    """The spec of one real run (its request, too: distlab.jobs)."""
    return demo_spec(w.dmethod, w.nw, w.seed, DEMO_REAL_BACKEND, steps=DEMO["real"]["steps"])


def DEMO_SWEEP_SPEC(w):
    """The spec of one sweep job (every sweep seed of one method and rate)."""
    return demo_spec(w.dmethod, DEMO["sweep"]["n_workers"], None, SIM, lr=w.lr,
                     steps=DEMO["sweep"]["steps"], seeds=DEMO["sweep"]["seeds"])
