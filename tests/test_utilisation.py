"""Compute utilisation from its formula, the published Table 7 figures held against it, and the
sparse all-gather / dense all-reduce crossover against the cost model."""

from __future__ import annotations

import math

import pytest

from distlab.bench import utilisation as U
from distlab.runtime.network import NetworkModel

P = U.PUBLISHED_10B


def test_bandwidth_for_utilisation_inverts_utilisation():
    t = U.step_compute_s(10e9, 2**20, 2, 1e15)
    assert t == pytest.approx(6 * 10e9 * 2**20 / 2e15)
    for h in (1, 100):
        for u in P["targets"]:
            w = U.bandwidth_for_utilisation(u, t, 10e9, 16, 2, h=h, latency_s=0.01)
            assert U.utilisation(t, 10e9, 16, 2, w, h=h, latency_s=0.01) == pytest.approx(u, rel=1e-12)
    # latency alone above the allowed communication time: no bandwidth is enough
    assert U.bandwidth_for_utilisation(0.99, 1.0, 10e9, 16, 2, latency_s=0.5) == math.inf
    with pytest.raises(ValueError):
        U.bandwidth_for_utilisation(1.0, 1.0, 1, 16, 2)


def test_the_affine_form_fits_its_own_figures_and_not_the_published_ddp_row():
    t = 1.5
    own = [U.bandwidth_for_utilisation(u, t, 10e9, 16, 2, latency_s=0.005) / 1e9 for u in P["targets"]]
    assert U.affine_fit_error(P["targets"], own) < 1e-9
    # Charles et al. 2025, Table 7: no step time, bytes per sync or latency of the
    # non-overlapped ring form reaches 5 % on the DDP row (see the module docstring)
    assert U.affine_fit_error(P["targets"], P["ddp_gbps"]) > 0.05


def test_the_form_makes_ddp_need_h_times_dilocos_bandwidth_and_the_table_does_not():
    t = 1.5
    for u in P["targets"]:
        ddp = U.bandwidth_for_utilisation(u, t, 10e9, 16, 2, h=1)
        diloco = U.bandwidth_for_utilisation(u, t, 10e9, 16, 2, h=100)
        assert ddp / diloco == pytest.approx(100.0)
    published = [d / l for d, l in zip(P["ddp_gbps"], P["diloco_h100_gbps"])]
    assert max(published) < 80 and min(published) < 5  # 75, 30, 17, 4.5


@pytest.mark.parametrize("b,k,bv,bi", [(4, 0.01, 2, 4), (4, 0.05, 4, 4), (2, 0.001, 2, 4)])
def test_sparse_crossover_matches_the_cost_model(b, k, bv, bi):
    net = NetworkModel(latency_s=0.0, bandwidth_Bps=1e9)
    exact = U.sparse_crossover_exact(b, k, bv, bi)
    first = U.first_n_where_dense_wins(net, 1_000_000, b, k, bv, bi)
    assert first == math.ceil(exact) if exact != int(exact) else first == int(exact)
    # the quoted formula is the large-N limit: one worker later
    assert U.sparse_crossover_quoted(b, k, bv, bi) == pytest.approx(exact + 1)
    # latency favours the all-gather (half the rounds): dense wins no earlier
    # (with a latency above a payload's transfer time it never does: checked in the second line)
    slow = U.first_n_where_dense_wins(NetworkModel(latency_s=1e-6, bandwidth_Bps=1e9), 1_000_000, b, k, bv, bi)
    assert slow is not None and slow >= first
    assert U.first_n_where_dense_wins(NetworkModel(latency_s=1.0, bandwidth_Bps=1e9), 1_000_000, b, k, bv, bi,
                                      n_max=512) is None


# ------------------------------------------------------------------ overlapped form


def _event_stall(t_step, comm_s, frac, buckets):
    """Independent check: send the buckets one by one as they become ready, return the idle time."""
    free = 0.0
    for k in range(1, buckets + 1):
        ready = t_step * (1 - frac) + k * frac * t_step / buckets
        free = max(free, ready) + comm_s / buckets
    return max(0.0, free - t_step)


@pytest.mark.parametrize("comm", [0.01, 0.3, 0.8, 2.5])
@pytest.mark.parametrize("buckets", [1, 7, 48])
def test_overlapped_stall_matches_an_event_schedule_and_its_inverse(comm, buckets):
    assert U.overlapped_stall_s(0.8, comm, 2 / 3, buckets) == pytest.approx(_event_stall(0.8, comm, 2 / 3, buckets))
    payload = 1.6e11
    for h in (1, 100):
        for u in U.T4_TARGETS:
            w = U.overlapped_bandwidth_for_utilisation(u, 0.8, payload, h, 2 / 3, buckets)
            assert U.overlapped_utilisation(0.8, payload, w, h, 2 / 3, buckets) == pytest.approx(u, rel=1e-9)


def test_every_published_ddp_and_diloco_figure_is_a_point_of_the_log_grid():
    # Streaming DiLoCo (arXiv 2501.18512) Table 4 and the Table 7 figures: all on logspace(-1, 3, 50)
    figures = list(P["ddp_gbps"]) + list(P["diloco_h100_gbps"])
    for row in U.STREAMING_DILOCO_T4.values():
        figures += list(row["ddp_gbps"]) + list(row["diloco_h100_gbps"])
    for w in figures:
        # within 2 % of a grid point (printed to 0.1 Gbit/s; the grid step is 20.7 %)
        assert min(abs(g / w - 1) for g in U.BANDWIDTH_GRID_GBPS) < 0.02
    g = U.BANDWIDTH_GRID_GBPS
    assert U.grid_readout_gbps(g[37]) == g[37] and U.grid_readout_gbps(g[37] * 1.01) == g[38]
    assert g[38] / g[37] == pytest.approx(1.207, abs=1e-3) and U.grid_readout_gbps(2e3) == math.inf
    # the Table 7 DiLoCo row is, cell for cell, Table 4's 1B vanilla-DiLoCo row (50/80/90/99 %)
    one_b = U.STREAMING_DILOCO_T4["1B"]["diloco_h100_gbps"]
    assert tuple(one_b[i] for i in (0, 1, 2, 4)) == P["diloco_h100_gbps"]


SOURCE = dict(bits=16, replicas=2, collective="ring", backward_frac=2 / 3, buckets=48)


def test_overlap_breaks_the_h_times_ratio_but_the_source_settings_miss_table_7():
    ddp = U.overlapped_table(10e9, 0.8, P["targets"], h=1, **SOURCE)
    dil = U.overlapped_table(10e9, 0.8, P["targets"], h=100, **SOURCE)
    ratios = [d / l for d, l in zip(ddp, dil)]
    assert ratios == pytest.approx([60.8, 28.4, 15.4, 3.43], rel=0.01)  # table: 75, 30, 17, 4.5
    # not reproduced: measured error per cell (DDP 50/80/90/99, then DiLoCo), continuous requirement
    err = [p / r - 1 for p, r in zip(ddp + dil, P["ddp_gbps"] + P["diloco_h100_gbps"])]
    assert err == pytest.approx([0.155, 0.203, 0.178, 0.056, 0.419, 0.257, 0.278, 0.386], abs=0.002)


def test_best_fit_over_the_open_settings_is_not_within_5_percent():
    # sweep: bits 16/32, ring over 2 or 4 replicas or one-shot, overlap fraction 0..1, buckets 1/L/2L
    t7 = U.sweep_overlap_fit(10e9, 0.8, 48, P["targets"], P["ddp_gbps"], P["diloco_h100_gbps"])
    assert len(t7) == 90
    assert t7[0]["max_abs"] == pytest.approx(0.415, abs=0.002)
    assert t7[0]["settings"]["bits"] == 16 and t7[0]["settings"]["backward_frac"] == 1.0
    # against Table 4's own 10B row (the source the settings come from) the best fit is 17.8 %,
    # and read off the grid as the paper does no setting is within one grid step (20.7 %) everywhere
    row = U.STREAMING_DILOCO_T4["10B"]
    t4 = U.sweep_overlap_fit(row["n_params"], row["step_s"], row["layers"], U.T4_TARGETS,
                             row["ddp_gbps"], row["diloco_h100_gbps"])
    assert t4[0]["max_abs"] == pytest.approx(0.178, abs=0.002)
    assert t4[0]["settings"] == dict(SOURCE, grid=False)
    t4g = U.sweep_overlap_fit(row["n_params"], row["step_s"], row["layers"], U.T4_TARGETS,
                              row["ddp_gbps"], row["diloco_h100_gbps"], grid=True)
    assert t4g[0]["max_abs"] == pytest.approx(0.214, abs=0.002)
    for name, row in U.STREAMING_DILOCO_T4.items():
        best = U.sweep_overlap_fit(row["n_params"], row["step_s"], row["layers"], U.T4_TARGETS,
                                   row["ddp_gbps"], row["diloco_h100_gbps"])[0]
        assert best["max_abs"] > 0.05, name


# ------------------------------------------------------------------ the published tables reproduced


def _errors(pred, ref):
    return [p / r - 1 for p, r in zip(pred, ref)]


def test_charles_table_7_and_streaming_diloco_table_4_reproduced_within_5_percent():
    """Charles et al. 2025 (arXiv 2503.09799) Table 7, 10B: DDP 104.8/184.2/222.3/390.7 and DiLoCo H = 100
    1.4/6.2/13.3/86.8 Gbit/s at 50/80/90/99 %; Streaming DiLoCo (arXiv 2501.18512) Table 4, rows 1B and 100B
    (DP and DiLoCo H = 100 at 50/80/90/95/99 %).  Settings: step time and layers per size from Table 4
    (Table 7's DiLoCo row is Table 4's 1B row, so it is recomputed at 1B's 0.1 s and 24 layers; its DDP row
    at 10B's 0.8 s and 48 layers); H = 100 from Table 4's caption; backward 2/3 of the step from the 6ND
    rule; one bucket per layer; ring over 2 workers; the grid of BANDWIDTH_GRID_GBPS; payload 13.3 bits a
    parameter, fitted (U.FIT_PAYLOAD_BITS)."""
    one_b, hundred_b = U.STREAMING_DILOCO_T4["1B"], U.STREAMING_DILOCO_T4["100B"]
    t7 = (U.reproduce_row(10e9, 0.8, 48, P["targets"], h=1)
          + U.reproduce_row(one_b["n_params"], one_b["step_s"], one_b["layers"], P["targets"], h=100))
    assert max(abs(e) for e in _errors(t7, P["ddp_gbps"] + P["diloco_h100_gbps"])) < 0.05
    for row in (one_b, hundred_b):
        pred = (U.reproduce_row(row["n_params"], row["step_s"], row["layers"], U.T4_TARGETS, h=1)
                + U.reproduce_row(row["n_params"], row["step_s"], row["layers"], U.T4_TARGETS, h=100))
        errs = _errors(pred, row["ddp_gbps"] + row["diloco_h100_gbps"])
        assert max(abs(e) for e in errs) < 0.05, errs  # measured: at most 1.8 % (printed to 0.1 Gbit/s)


def test_table_4_ten_b_row_misses_by_one_grid_step_in_three_cells():
    # Table 4's 10B row and Table 7's DDP row disagree at 80 % (222.3 against 184.2) and 99 % (471.5
    # against 390.7) for the same model size; no payload reproduces both.  At the fitted 13.3 bits the
    # 10B row is printed one grid step low (-17.1 %) at DP 80 %, DP 99 % and DiLoCo 95 %; the other 7
    # cells match.  At 16 bits x 5/6 = 13.33 bits it is one cell (DP 99 %), but Table 7's DDP 80 % moves
    # one step up (+20.7 %).
    row = U.STREAMING_DILOCO_T4["10B"]
    pred = (U.reproduce_row(row["n_params"], row["step_s"], row["layers"], U.T4_TARGETS, h=1)
            + U.reproduce_row(row["n_params"], row["step_s"], row["layers"], U.T4_TARGETS, h=100))
    errs = _errors(pred, row["ddp_gbps"] + row["diloco_h100_gbps"])
    misses = [i for i, e in enumerate(errs) if abs(e) > 0.05]
    assert misses == [1, 4, 8] and all(errs[i] == pytest.approx(-0.171, abs=0.002) for i in misses)
    alt = U.reproduce_row(row["n_params"], row["step_s"], row["layers"], U.T4_TARGETS, h=1, bits=16 * 5 / 6)
    assert [round(e, 3) for e in _errors(alt, row["ddp_gbps"])] == [0.0, 0.0, 0.0, 0.0, -0.171]
    t7 = U.reproduce_row(10e9, 0.8, 48, P["targets"], h=1, bits=16 * 5 / 6)
    assert _errors(t7, P["ddp_gbps"])[1] == pytest.approx(0.207, abs=0.002)


def test_the_fitted_payload_is_pinned_by_the_published_rows():
    """Every row alone allows a narrow payload interval (bits a parameter); together they pin 13.3."""
    rows = []
    for name in ("1B", "100B"):
        r = U.STREAMING_DILOCO_T4[name]
        rows += [(r["n_params"], r["step_s"], r["layers"], U.T4_TARGETS, r["ddp_gbps"], 1),
                 (r["n_params"], r["step_s"], r["layers"], U.T4_TARGETS, r["diloco_h100_gbps"], 100)]
    rows.append((10e9, 0.8, 48, P["targets"], P["ddp_gbps"], 1))  # Table 7's DDP row
    lo, hi = 0.0, math.inf
    for n, t, layers, targets, gbps, h in rows:
        a, b = U.feasible_payload_bits(n, t, layers, targets, gbps, h=h)
        assert a < b
        lo, hi = max(lo, a), min(hi, b)
    assert 13.2 < lo < U.FIT_PAYLOAD_BITS <= hi < 13.4
    # the interval is the exact-readout condition: its edges reproduce the row, just outside does not
    r = U.STREAMING_DILOCO_T4["1B"]
    a, b = U.feasible_payload_bits(r["n_params"], r["step_s"], r["layers"], U.T4_TARGETS, r["diloco_h100_gbps"], h=100)
    for bits, ok in ((0.5 * (a + b), True), (b * 1.01, False), (a * 0.99, False)):
        pred = U.reproduce_row(r["n_params"], r["step_s"], r["layers"], U.T4_TARGETS, h=100, bits=bits)
        assert (max(abs(e) for e in _errors(pred, r["diloco_h100_gbps"])) < 0.02) is ok
    # the source's own 16 bits at the table's step time (the settings of the tests above) stays out of it
    assert not lo <= 16 <= hi


@pytest.mark.parametrize("frac,ok", [(0.5, False), (0.6, False), (2 / 3, True), (0.8, False), (1.0, False)])
def test_only_a_backward_fraction_near_two_thirds_lets_a_payload_print_the_1b_row(frac, ok):
    # one bucket per layer; the DP and the DiLoCo row of Table 4 (1B) must print with the same payload
    r = U.STREAMING_DILOCO_T4["1B"]
    a, b = U.feasible_payload_bits(r["n_params"], r["step_s"], r["layers"], U.T4_TARGETS, r["ddp_gbps"], 1, frac)
    c, d = U.feasible_payload_bits(r["n_params"], r["step_s"], r["layers"], U.T4_TARGETS, r["diloco_h100_gbps"],
                                   100, frac)
    assert bool(max(a, c) < min(b, d)) is ok
