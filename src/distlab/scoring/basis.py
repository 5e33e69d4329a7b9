"""What a decided verdict rests on: a measurement, training, or the simulated clock.

A row reads *reproduced* or *not reproduced* on a number, and the number comes from one
of four kinds of evidence.  This module names the kind for every metric a claim may test,
so that the snapshot can say how many decided rows rest on evidence and how many on a
model of ours (does evidence decide it, or a choice of ours?):

``measured``
    wall time, throughput or memory measured on this machine (the claim says
    ``measured: true``), whatever the metric;
``trained``
    losses and steps to a threshold from training runs (and placement latencies: the
    latency of a learned placement in the profiled cost model, so the learner decides it);
``trained x clock``
    trained steps to a target multiplied by the simulated clock's time per step (time to
    target): training decides the steps, the clock the seconds;
``clock``
    simulated time alone (per-step time, total time): the clock's formula at the settings
    of the config fixes it; such rows read *by construction* or *model prediction*, and a
    decided row of this kind is reported as one the clock decided;
``arithmetic``
    byte counts and other exact arithmetic.

Every metric in ``config/claims.yaml`` must appear in :data:`METRIC_BASIS` (a test checks
it), so a new metric cannot enter the scorecard without saying what decides it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

MEASURED = "measured"
TRAINED = "trained"
TRAINED_CLOCK = "trained x clock"
CLOCK = "clock"
ARITHMETIC = "arithmetic"
KINDS = (MEASURED, TRAINED, TRAINED_CLOCK, CLOCK, ARITHMETIC)

METRIC_BASIS: dict[str, str] = {
    # losses and steps from training runs
    "final_test_loss": TRAINED,
    "final_train_loss_full": TRAINED,
    "final_val_loss": TRAINED,
    "steps_to_threshold": TRAINED,
    "steps_to_threshold_ma": TRAINED,
    # a learned placement's latency in the profiled cost model
    "final_median_ms": TRAINED,
    "final_policy_ms": TRAINED,
    "latency_ms": TRAINED,
    # trained steps x the simulated clock
    "time_to_target_s": TRAINED_CLOCK,
    "time_to_threshold": TRAINED_CLOCK,
    # the simulated clock alone (measured when the claim says measured: true)
    "time_per_step": CLOCK,
    "total_time": CLOCK,
    "time_wan": CLOCK,
    "time_datacenter": CLOCK,
    # quantities that exist only as measurements
    "tokens_per_s": MEASURED,
    "pss_mb": MEASURED,
    "rss_mb": MEASURED,
    "rss_sum_mb": MEASURED,
    # bytes on the wire
    "bytes_reduction_bf16": ARITHMETIC,
    "reduction_vs_bf16_ddp": ARITHMETIC,
}

DECIDED = ("reproduced", "not reproduced")


class UnknownMetric(ValueError):
    """A metric no entry of METRIC_BASIS names."""


def basis(metric: str, measured: bool) -> str:
    """The kind of evidence a row of ``metric`` rests on (``measured`` wins over the metric)."""
    if measured:
        return MEASURED
    try:
        return METRIC_BASIS[metric]
    except KeyError:
        raise UnknownMetric(f"metric {metric!r} has no basis in distlab.scoring.basis.METRIC_BASIS") from None


def _truthy(v: object) -> bool:
    return v is True or str(v).strip().lower() in ("true", "1", "yes")


def decided_by_basis(rows: Iterable[Mapping]) -> Counter:
    """Over scorecard rows (dicts with ``metric``, ``measured``, ``verdict``): how many of the
    rows that read reproduced or not reproduced rest on each kind of evidence."""
    out: Counter = Counter()
    for r in rows:
        if r.get("verdict") in DECIDED:
            out[basis(str(r.get("metric", "")), _truthy(r.get("measured")))] += 1
    return out


def sentence(c: Counter) -> str:
    """One line for the README: the decided rows by what they rest on."""
    n = sum(c.values())
    if not n:
        return "No row reads reproduced or not reproduced."
    evidence = c[MEASURED] + c[TRAINED] + c[TRAINED_CLOCK]
    parts = [f"{c[MEASURED]} on a measurement on this machine",
             f"{c[TRAINED]} on trained losses, steps or learned placements",
             f"{c[TRAINED_CLOCK]} on trained steps times the simulated clock's time per step"]
    tail = [f"{c[CLOCK]} on the simulated clock alone"] if c[CLOCK] else []
    tail += [f"{c[ARITHMETIC]} on arithmetic"] if c[ARITHMETIC] else []
    return (f"Of the {n} rows that read reproduced or not reproduced, {evidence} rest on measured or "
            f"trained quantities: " + "; ".join(parts + tail) + ".")
