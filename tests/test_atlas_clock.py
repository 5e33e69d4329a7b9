"""The query's projected clock (distlab.atlas.projection): Charles et al. 2025 Table 7 out of it,
overlap, message dtype, and the master's shared link, against hand computations."""

from __future__ import annotations

import numpy as np
import pytest

from distlab.atlas.projection import PRESETS, ClockSettings, Pattern, step_seconds, utilisation_curve
from distlab.bench import utilisation as U


def _grid_readout(util: np.ndarray, targets) -> list[float]:
    """The first bandwidth of the published tables' grid at which the utilisation reaches each target."""
    g = U.BANDWIDTH_GRID_GBPS
    return [float(g[np.argmax(util >= u * (1 - 1e-12))]) if (util >= u * (1 - 1e-12)).any() else np.inf
            for u in targets]


def test_charles_table_7_comes_out_of_the_atlas_clock():
    """Charles et al. 2025 (arXiv 2503.09799) Table 7, 10B: the Gbit/s DDP and DiLoCo (H = 100) need for
    50/80/90/99 % compute utilisation.  The atlas's own clock (step_seconds, overlap on), with the
    paper's settings: DDP at 10B, step 0.8 s, one bucket per layer (48); DiLoCo's row (Streaming DiLoCo
    Table 4's 1B row, which it equals) at 1B, step 0.1 s, 24 layers, its outer all-reduce overlapped with
    the last inner step's backward pass as the simulator does; backward 2/3 of the step; a ring over 2
    replicas; no latency; read off the tables' log grid.  Adjustment, named: the payload is 13.3 bits a
    parameter (U.FIT_PAYLOAD_BITS, fitted; = bf16 with a step 1.2x the table's)."""
    P = U.PUBLISHED_10B
    bw = U.BANDWIDTH_GRID_GBPS * 1e9 / 8
    ddp = utilisation_curve(0.8, 10e9 * U.FIT_PAYLOAD_BITS / 8, 2, 1, bw, buckets=48)
    one_b = U.STREAMING_DILOCO_T4["1B"]
    diloco = utilisation_curve(one_b["step_s"], one_b["n_params"] * U.FIT_PAYLOAD_BITS / 8, 2, 100, bw,
                               buckets=one_b["layers"])
    got = _grid_readout(ddp, P["targets"]) + _grid_readout(diloco, P["targets"])
    want = list(P["ddp_gbps"]) + list(P["diloco_h100_gbps"])
    errs = [g / w - 1 for g, w in zip(got, want)]
    assert max(abs(e) for e in errs) < 0.02, errs  # measured: at most 0.8 % (the table prints 0.1 Gbit/s)
    # the same cells as the closed form of distlab.bench.utilisation
    assert got == pytest.approx(U.reproduce_row(10e9, 0.8, 48, P["targets"], h=1)
                                + U.reproduce_row(1e9, 0.1, 24, P["targets"], h=100), rel=1e-12)
    # without overlap the clock is the affine form, which misses the DDP row by more than 5 %
    flat = utilisation_curve(0.8, 10e9 * U.FIT_PAYLOAD_BITS / 8, 2, 1, bw, buckets=48, overlap=False)
    miss = [g / w - 1 for g, w in zip(_grid_readout(flat, P["targets"]), P["ddp_gbps"])]
    assert max(abs(e) for e in miss) > 0.05


def test_overlap_hides_the_all_reduce_behind_the_backward_pass():
    pat = Pattern("ddp", 1, [[("all_reduce", 4.0)]])   # fp32 gradients, 4 bytes a parameter
    P, N = 1e6, 4
    cs = ClockSettings(flops_per_s=6e9, tokens=100, bucket_bytes=4e5)   # 0.1 s compute, 10 buckets
    comp = cs.compute_s(P)
    bw = np.array([1e7, 1e8, 1e10])
    on = step_seconds(pat, P, N, 0, cs, 0.0, bw, steps=3)
    off = step_seconds(pat, P, N, 0, ClockSettings(flops_per_s=6e9, tokens=100, overlap=False), 0.0, bw, steps=3)
    comm = 2 * 3 / 4 * 4e6 / bw
    assert off == pytest.approx(comp + comm)
    assert on == pytest.approx(comp + np.maximum(comm / 10, comm - 2 / 3 * comp * 0.9))
    # bf16 halves a dense payload; DeMo's own payload keeps its bytes
    half = step_seconds(pat, P, N, 0, ClockSettings(flops_per_s=6e9, tokens=100, overlap=False, dtype="bf16"),
                        0.0, bw, steps=3)
    assert half == pytest.approx(comp + comm / 2)
    demo = Pattern("demo", 1, [[("all_gather", 1.0)]])
    d32 = step_seconds(demo, P, N, 0, ClockSettings(flops_per_s=6e9, tokens=100), 0.0, bw, steps=3)
    d16 = step_seconds(demo, P, N, 0, ClockSettings(flops_per_s=6e9, tokens=100, dtype="bf16"), 0.0, bw, steps=3)
    assert d32 == pytest.approx(d16) and d32 == pytest.approx(comp + 3 * 1e6 / bw)


def test_the_master_link_is_shared_by_its_sends_and_receives():
    """A master step: the broadcast of b bytes to N workers ends at lat + N b / bw; the N messages of m
    bytes arrive one after another; the step ends at the (N - s)-th arrival."""
    P, N, s = 1e6, 8, 1
    pat = Pattern("gc-cr", 1, [], msg=4.0, bcast=4.0)
    cs = ClockSettings(flops_per_s=6e9, tokens=100)
    comp = cs.compute_s(P, 2)  # gc-cr at s = 1: two partitions a worker
    bw, lat = 1e8, 1e-3
    t = step_seconds(pat, P, N, s, cs, lat, bw, steps=1)
    b = m = 4e6
    hand = lat + N * b / bw + comp + lat + (N - s) * m / bw
    assert t[0] == pytest.approx(hand)
    # far more than a master that receives in parallel and broadcasts once would charge
    assert t[0] > 2.5 * (lat + b / bw + comp + lat + m / bw)  # 0.80 s against 0.28 s


def test_presets_name_their_sources():
    for name, (rate, src) in PRESETS.items():
        assert src and (rate is None) == (name == "cpu")
        if rate is not None:
            assert "datasheet" in src and "dense" in src and rate > 1e14
