"""What gradient coding costs in seconds: one worker's encoding and the master's decoding of
each scheme, measured (:func:`coding_costs`, once per process and setting) or read from the
stored profile the workflow measures for every setting at once (:func:`coding_profile`)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from ..techniques.coded_worker import CodedWorker
from ..techniques.gradient_codes import Scheme, make_scheme
from ..train.common import DTYPES

_CODING_CACHE: dict[tuple, tuple[float, float]] = {}


class _CodingBench:
    """What one worker's encoding and the master's decoding cost for one scheme, on
    constant gradients of ``numel`` values (the values do not change the cost)."""

    def __init__(self, scheme: Scheme, numel: int, dtype: torch.dtype) -> None:
        self.scheme, self.numel, self.dtype = scheme, numel, dtype
        self.worker = CodedWorker(scheme, 0)
        for j in scheme.placement[0]:
            self.worker.update(j, torch.full((numel,), 0.5, dtype=dtype), 0.0, 0)
        one = torch.full((numel,), 0.25, dtype=dtype)
        self.msgs = dict.fromkeys(range(scheme.n), one)  # the cost is the same whichever vector is read
        self.order = list(np.random.default_rng(0).permutation(scheme.n)[:scheme.wait_for])

    def once(self) -> tuple[float, float]:
        """(encode_s, decode_s) of one encoding (worker 0) and one decoding of a typical
        arrival set (the fastest ``n - s`` of a seeded random order), as the master does it.

        Timed in CPU seconds of the calling thread (torch on one thread computes there), not
        wall seconds: another process sharing the core stretches the wall time of a
        measurement but not its CPU time, so the profile does not depend on the load it met."""
        c0 = time.thread_time()
        self.worker.message()
        encode = time.thread_time() - c0
        c0 = time.thread_time()
        weights = self.scheme.decode_weights(self.order)
        g = torch.zeros(self.numel, dtype=self.dtype)
        for k, a in weights.items():
            if a != 0.0:
                g.add_(self.msgs[k], alpha=a)
        return encode, time.thread_time() - c0


def coding_costs(scheme: Scheme, numel: int, dtype: torch.dtype, reps: int = 3) -> tuple[float, float]:
    """Measured seconds of one worker's encoding and of the master's decoding
    for ``scheme`` on gradients of ``numel`` values (median of ``reps``).
    Measured once per process and setting (the seeds of a job share it).  The
    workflow measures them once for every setting instead (:func:`coding_profile`)."""
    key = (scheme.name, scheme.n, scheme.s, scheme.c, int(numel), str(dtype), reps)
    if key not in _CODING_CACHE:
        bench = _CodingBench(scheme, numel, dtype)
        runs = np.array([bench.once() for _ in range(reps)])
        _CODING_CACHE[key] = (float(np.median(runs[:, 0])), float(np.median(runs[:, 1])))
    return _CODING_CACHE[key]


PROFILE_COLUMNS = ("scheme", "n", "s", "c", "numel", "dtype", "rounds", "encode_s", "decode_s",
                   "encode_lo", "encode_hi", "decode_lo", "decode_hi")


def coding_profile(settings: list[dict], numel: int, dtype: str, rounds: int = 9,
                   warmup: int = 1) -> "pd.DataFrame":
    """Encoding and decoding seconds of every setting (``{scheme, n, s, code_seed}``),
    measured in interleaved rounds (each round measures every setting once, so a load
    that comes and goes touches all alike): the median of ``rounds`` and a 95 %
    distribution-free CI of the median (order statistics of the binomial).

    The simulated clock reads these stored values (coding mode ``profile``), so every
    simulated number is a deterministic function of the spec and this file."""
    import pandas as pd
    from scipy.stats import binom

    dt = DTYPES[dtype]
    benches = []
    for st in settings:
        sch = make_scheme(st["scheme"], int(st["n"]), int(st["s"]), seed=int(st.get("code_seed", 0)))
        benches.append((st, sch, _CodingBench(sch, numel, dt)))
    for _ in range(warmup):
        for _, _, b in benches:
            b.once()
    times = [[] for _ in benches]
    for _ in range(rounds):
        for i, (_, _, b) in enumerate(benches):
            times[i].append(b.once())
    # the CI of a median from order statistics: ranks lo..hi cover it with >= 95 %
    lo_rank = max(int(binom.ppf(0.025, rounds, 0.5)) - 1, 0)
    hi_rank = min(rounds - lo_rank - 1, rounds - 1)
    rows = []
    for (st, sch, _), t in zip(benches, times):
        arr = np.sort(np.asarray(t), axis=0)
        rows.append({"scheme": sch.name, "n": sch.n, "s": sch.s, "c": sch.c, "numel": int(numel),
                     "dtype": dtype, "rounds": rounds,
                     "encode_s": float(np.median(arr[:, 0])), "decode_s": float(np.median(arr[:, 1])),
                     "encode_lo": float(arr[lo_rank, 0]), "encode_hi": float(arr[hi_rank, 0]),
                     "decode_lo": float(arr[lo_rank, 1]), "decode_hi": float(arr[hi_rank, 1])})
    return pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))


def profiled_coding_costs(path: str | Path, scheme: Scheme, numel: int, dtype: str) -> tuple[float, float]:
    """The stored (encode_s, decode_s) of one setting; ValueError naming the file if absent."""
    import pandas as pd

    t = pd.read_csv(path)
    hit = t[(t["scheme"] == scheme.name) & (t["n"] == scheme.n) & (t["s"] == scheme.s)
            & (t["numel"] == int(numel)) & (t["dtype"] == dtype)]
    if len(hit) != 1:
        raise ValueError(f"cluster.coding.profile: {path} holds {len(hit)} rows for {scheme.name} "
                         f"n={scheme.n} s={scheme.s} numel={numel} {dtype}; rerun its rule "
                         "(snakemake --forcerun pgc_coding_profile)")
    return float(hit["encode_s"].iloc[0]), float(hit["decode_s"].iloc[0])
