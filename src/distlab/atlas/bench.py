"""The atlas step against a plain AdamW step of the same model (a benchmark; measured, not asserted).

For each technique, size and N the simulated driver trains ``bench.steps`` steps (its
evaluations, clock and recording included) and a plain loop trains the same model on
the same windows for as many steps: per step the N workers' windows forward and
backward on one model, their mean gradient, one ``torch.optim.AdamW`` step — the
arithmetic of AdamW-DDP in one process, with nothing around it.  ``ratio`` is the
driver's CPU seconds per step (the process's CPU time: on a machine shared with other
work far less disturbed than wall time) over the plain loop's; for DDP it is the driver's
overhead, for the other techniques it adds the technique's own arithmetic (several
passes per worker for the codes, DeMo's transform, PowerSGD's factors, DiLoCo's N
model copies).  Each timing is the minimum over ``bench.repeats`` rounds (the least
disturbed by other load on the machine).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import torch

from ..config import specs
from ..data import load_split, text_batch
from ..models import lm_loss
from .spec import SPEC_SCHEMA
from .train import build_lm, run_simulated
from .workflow import base_spec


def plain_adamw_seconds(model_cfg: dict, train, n: int, steps: int, bs: int, lr: float, seed: int) -> float:
    """CPU seconds of ``steps`` plain AdamW steps on the mean gradient of ``n`` windows."""
    model = build_lm(model_cfg, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    block = int(model_cfg.get("block_size", 32))
    t0 = time.process_time()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        for w in range(n):
            x, y = text_batch(train, block, bs, seed, w, step)
            (lm_loss(model(x), y) / n).backward()
        opt.step()
    return time.process_time() - t0


def step_overhead(a: dict, data_dir, out_dir) -> pd.DataFrame:
    b = a["bench"]
    torch.set_num_threads(1)
    train = load_split(Path(data_dir), "train")["tokens"]
    steps, rows = int(b["steps"]), []
    for technique in b["techniques"]:
        for size in b["sizes"]:
            for n in b["n_workers"]:
                spec = specs.validate_spec(base_spec(a, technique, size, n, 0, 0.01, {"model": "none"}, steps=steps),
                                           SPEC_SCHEMA, "atlas")
                drv, plain = [], []
                for r in range(int(b["repeats"])):
                    t0 = time.process_time()
                    run_simulated(spec, data_dir, Path(out_dir) / "runs" / f"{technique}_{size}_n{n}")
                    drv.append(time.process_time() - t0)
                    plain.append(plain_adamw_seconds(a["sizes"][size], train, n, steps, int(a["batch_size"]),
                                                     0.01, 0))
                d, p = min(drv) / steps, min(plain) / steps
                rows.append({"technique": technique, "size": size, "N": n, "steps": steps,
                             "driver_cpu_ms_per_step": 1e3 * d, "plain_adamw_cpu_ms_per_step": 1e3 * p,
                             "ratio": d / p, "label": "measured"})
    return pd.DataFrame(rows)
