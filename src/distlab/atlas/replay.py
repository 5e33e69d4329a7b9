"""Time to target under any network and straggler model, from a recording, without retraining.

The recording fixes the trajectory (losses, who was waited for); the replay
re-times it: every step's recorded compute, the straggler model's delays
(drawn with the run's seed: every technique meets the same stragglers), the
recorded message pattern on an alpha-beta network, through
:class:`distlab.atlas.clock.Clock`, vectorised over the network cells (one
Python loop over steps, none over cells).  On the cluster the run was
simulated on it reproduces the run's clock exactly (tested for every technique).

For an arrival-dependent technique (:func:`distlab.atlas.spec.arrival_dependent`)
the replay also reports, per cell, the fraction of steps whose fastest-``wait_for``
set differs from the recorded one: where it is not zero the re-timed trajectory
is not the one that cluster would have produced (``valid`` is False there).
"""

from __future__ import annotations

import numpy as np

from ..runtime.stragglers import StragglerModel
from .clock import Clock, tie_order
from .record import Recording
from .spec import arrival_dependent


def straggler_model(cfg: dict, seed: int) -> StragglerModel:
    return StragglerModel.from_config(cfg, seed)


def replay(rec: Recording, lat, bw, straggler: dict | None = None, upto: int | None = None):
    """Clock after ``upto`` steps (all by default) per cell, and the mismatch fraction per cell."""
    strag = straggler_model(rec.straggler if straggler is None else straggler, rec.seed)
    clock = Clock(rec.n, lat, bw, strag.compute_factor(rec.n))
    steps = rec.steps if upto is None else rec.steps[:upto]
    miss = np.zeros(clock.now.shape)
    for s in steps:
        d = strag.delays(s["step"], rec.n)[None]
        if rec.kind == "sync":
            clock.sync(s["compute_s"], d, s["colls"])
        else:
            _, mask = clock.master(s["compute_s"], d, s["msg_bytes"], s["bcast_bytes"], s["wait_for"],
                                   s["master_s"], tie_order(strag.seed, s["step"], rec.n))
            want = np.zeros(rec.n, dtype=bool)
            want[s["received"]] = True
            miss += (mask != want).any(axis=1)
    return clock.now.copy(), miss / max(1, len(steps))


def time_to_target(rec: Recording, target: float, lat, bw, straggler: dict | None = None):
    """(seconds per cell or inf, valid per cell): the clock when the first evaluation at or
    below ``target`` is taken; inf when the run never gets there (or a worker never answers)."""
    lat, bw = np.atleast_1d(np.asarray(lat, float)), np.atleast_1d(np.asarray(bw, float))
    C = max(lat.size, bw.size)
    k = rec.steps_to_target(target)
    if k is None:
        return np.full(C, np.inf), np.ones(C, dtype=bool)
    with np.errstate(invalid="ignore"):
        t, miss = replay(rec, lat, bw, straggler, upto=k)
    t = np.where(np.isfinite(t), t, np.inf)
    valid = miss == 0 if arrival_dependent(rec.technique) else np.ones(C, dtype=bool)
    return np.broadcast_to(t, (C,)).copy(), valid
