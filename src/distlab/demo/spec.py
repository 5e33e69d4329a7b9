"""Cross-field checks of the ``demo:`` config section (torch-free).

``check(config)`` returns one ``"key: why"`` string per problem; the
Snakefile's ``distlab.checks.check_config`` runs it before any job.
"""

from __future__ import annotations

from typing import Any

CONFIG_SECTION = "demo"  # distlab.checks.paper_checks finds check() by it


def _divides(n: int, h: int) -> bool:
    return h > 0 and n % h == 0


def check(config: dict[str, Any]) -> list[str]:
    d = config.get("demo")
    if not isinstance(d, dict):
        return []
    out: list[str] = []
    datasets = config.get("datasets", {}) or {}
    name = d.get("dataset")
    if name not in datasets:
        out.append(f"demo.dataset: {name!r} is not configured under datasets")
    elif datasets[name].get("kind") != "text":
        out.append(f"demo.dataset: {name!r} is a {datasets[name].get('kind')} data set; DeMo trains a language model on text")
    lr = d.get("lr", {}) or {}
    sweep = d.get("sweep", {}) or {}
    real = d.get("real", {}) or {}
    more = d.get("more_workers") or {}
    needed = set(d.get("methods", [])) | set(more.get("methods", []))
    if real.get("enabled"):
        needed |= set(real.get("methods", []))
    for m in sorted(needed):
        if m not in lr:
            out.append(f"demo.lr.{m}: method {m!r} is configured but has no learning rate")
    follows = d.get("lr_follows") or {}
    if d.get("lr_from_sweep"):
        for m in sorted(needed):
            leader = follows.get(m, m)
            if leader not in sweep.get("methods", []):
                out.append(f"demo.sweep.methods: {m!r} takes the sweep's choice for {leader!r} "
                           f"(demo.lr_from_sweep), which the sweep does not run")
    for f, leader in follows.items():
        if leader in follows:
            out.append(f"demo.lr_follows.{f}: follows {leader!r}, itself a follower (one level only)")
    model = d.get("model", {}) or {}
    if model.get("d_model", 128) % model.get("n_head", 4):
        out.append("demo.model.n_head: must divide demo.model.d_model")
    H = (d.get("diloco") or {}).get("H", 1)
    for key, steps, methods in (("demo.steps", d.get("steps", 0), d.get("methods", []) + more.get("methods", [])),
                                ("demo.sweep.steps", sweep.get("steps", 0), sweep.get("methods", []))):
        if "diloco" in methods and not _divides(int(steps), int(H)):
            out.append(f"{key}: DiLoCo synchronises every demo.diloco.H = {H} steps; the run must end on "
                       f"a synchronisation (steps a multiple of H)")
    if real.get("enabled"):
        if "diloco" in real.get("methods", []):
            out.append("demo.real.methods: diloco runs on the simulated backend only")
    dd = d.get("demo") or {}
    topk, chunk = dd.get("topk"), dd.get("chunk")
    if isinstance(topk, int) and isinstance(chunk, int) and chunk > 0 and topk > chunk * chunk:
        out.append(f"demo.demo.topk: {topk} is larger than a chunk x chunk tile ({chunk}^2 = {chunk * chunk}); "
                   f"the optimizer would silently cap it at the tile's size")
    every = d.get("eval_every", 1)
    if d.get("steps", 0) and every > d.get("steps", 0):
        out.append("demo.eval_every: larger than demo.steps (the run would evaluate only at the start and end)")
    for name, net in (d.get("networks") or {}).items():
        if not isinstance(net, dict):
            out.append(f"demo.networks.{name}: must be a mapping")
    if len(d.get("networks") or {}) < 2:
        out.append("demo.networks: give two networks (the loss-vs-time figure compares them)")
    return out
