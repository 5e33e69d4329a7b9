"""Tests for distlab.pgc.coding: placements, exact GC decoding, PGC and IS-GC decoders."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from distlab.pgc.coding import (
    SCHEMES,
    CodingError,
    Scheme,
    cr_placement,
    tandon_B,
    decode,
    encode,
    fr_placement,
    make_scheme,
    pgc_staleness,
)

SMALL = [(n, s) for n in range(1, 13) for s in range(min(3, n - 1) + 1)]


def _messages(scheme: Scheme, grads: np.ndarray) -> dict[int, np.ndarray]:
    parts = dict(enumerate(grads))
    return {k: encode(scheme, k, parts) for k in range(scheme.n)}


def test_gc_decodes_exact_mean_for_every_straggler_set() -> None:
    rng = np.random.default_rng(0)
    worst = {"gc-fr": 0.0, "gc-cr": 0.0}
    for (n, s), name in itertools.product(SMALL, worst):
        if name == "gc-fr" and n % (s + 1):
            continue
        scheme = make_scheme(name, n, s)  # default seed, as used in experiments
        grads = rng.standard_normal((n, 5))
        msgs, target = _messages(scheme, grads), grads.mean(axis=0)
        for R in itertools.combinations(range(n), n - s):
            if name == "gc-fr":  # arrival order matters for FR: all orders when small, else a few random ones
                orders = itertools.permutations(R) if n <= 6 else (rng.permutation(R) for _ in range(4))
            else:
                orders = iter([R])
            for order in orders:
                got = decode(scheme, [(int(k), msgs[int(k)]) for k in order])
                worst[name] = max(worst[name], float(np.abs(got - target).max()))
                assert np.allclose(scheme.partition_weights(order), 1.0 / n, atol=1e-9)
        # extra arrivals beyond n - s still decode exactly
        assert np.abs(decode(scheme, msgs) - target).max() < 1e-9
    print(f"\nworst fp64 GC decode error: gc-fr {worst['gc-fr']:.3e}, gc-cr {worst['gc-cr']:.3e}")
    assert max(worst.values()) < 1e-9


def test_tandon_B_structure_and_seeding() -> None:
    for n, s in SMALL:
        B = tandon_B(n, s)
        assert np.array_equal(B, tandon_B(n, s, seed=0)) and np.array_equal(np.diag(B), np.ones(n))
        assert np.array_equal(B, make_scheme("gc-cr", n, s).B)
        assert np.array_equal(B != 0, make_scheme("pgc-cr", n, s).B != 0)  # support = CR placement
        assert np.abs(B).max() < 100  # best-of-draws keeps coefficients moderate
    assert not np.allclose(tandon_B(8, 2, seed=0), tandon_B(8, 2, seed=1))
    assert np.array_equal(tandon_B(5, 0), np.eye(5))


def test_gc_fr_uses_first_arrived_member_of_each_group() -> None:
    scheme = make_scheme("gc-fr", 6, 2)
    w = scheme.decode_weights([4, 1, 0, 5])
    assert w == {4: 1 / 6, 1: 1 / 6, 0: 0.0, 5: 0.0}


def test_placements_valid() -> None:
    for n in range(1, 13):
        for c in range(1, n + 1):
            cr = cr_placement(n, c)
            assert all(len(set(p)) == c for p in cr)
            assert np.bincount(np.concatenate(cr), minlength=n).tolist() == [c] * n
            if n % c == 0:
                fr = fr_placement(n, c)
                for k, p in enumerate(fr):
                    g = k // c
                    assert p == tuple(range(g * c, g * c + c))
                    assert [i for i in range(n) if set(fr[i]) & set(p)] == list(range(g * c, g * c + c))
    scheme = make_scheme("pgc-cr", 7, 2)
    assert scheme.c == 3 and scheme.placement[6] == (6, 0, 1) and scheme.wait_for == 5


@pytest.mark.parametrize(
    ("args", "numbers"),
    [
        (("gc-fr", 10, 2), ["10", "2", "3"]),
        (("pgc-fr", 7, 1), ["7", "1"]),
        (("gc-cr", 4, 4), ["4"]),
        (("dgd", 4, -1), ["4", "-1"]),
        (("is-gc-cr", 3, 0, 0, 5), ["5", "3"]),
        (("is-gc-fr", 7, 1, 0, 2), ["7", "2"]),
        (("gc-cr", 0, 0), ["0"]),
        (("pgc-cr", 6, 1, 0, 3), ["3", "2"]),
    ],
)
def test_invalid_parameters(args: tuple, numbers: list[str]) -> None:
    with pytest.raises(CodingError) as err:
        make_scheme(*args)
    assert all(x in str(err.value) for x in numbers)


def test_unknown_scheme_and_undecodable_sets() -> None:
    with pytest.raises(CodingError, match="gc-cr.*is-gc-cr"):
        make_scheme("gc", 4, 1)
    for name in SCHEMES:
        scheme = make_scheme(name, 6, 1)
        assert not scheme.ready([0, 1, 2, 3]) and scheme.ready(range(6))
        with pytest.raises(CodingError):
            scheme.decode_weights([0, 1, 2, 3])
        with pytest.raises(CodingError):
            scheme.decode_weights([0, 0, 1, 2, 3, 4])


def test_pgc_cr_partition_weights_sum_to_n_and_unbiased() -> None:
    for n, s in SMALL:
        scheme = make_scheme("pgc-cr", n, s)
        mean = np.zeros(n)
        sets = list(itertools.combinations(range(n), n - s))
        for R in sets:
            pw = scheme.partition_weights(R)
            assert abs(n * pw.sum() - n) < 1e-12
            mean += pw / len(sets)
        assert np.allclose(mean, 1.0 / n)  # unbiased over uniformly random straggler sets


@pytest.mark.parametrize("name", ["pgc-fr", "pgc-cr"])
def test_pgc_staleness_and_refresh(name: str) -> None:
    for n, s in SMALL:
        if name == "pgc-fr" and n % (s + 1):
            continue
        scheme = make_scheme(name, n, s)
        last = {k: {} for k in range(n)}  # worker -> partition -> step of latest gradient
        for step in range(5 * (s + 1) + 1):
            fresh: set[int] = set()
            for k in range(n):
                computed = scheme.partitions_to_compute(k, step)
                fresh.update(computed)
                last[k].update(dict.fromkeys(computed, step))
                ages = pgc_staleness(scheme, k, step)
                assert ages == {j: step - t for j, t in last[k].items()}
                assert max(ages.values()) <= s
            if name == "pgc-cr":
                assert fresh == set(range(n))
                if step > 0:
                    assert sorted(scheme.pgc_partition(k, step) for k in range(n)) == list(range(n))


def test_pgc_fr_decodes_pipelined_gradient_for_any_arrivals() -> None:
    """Group members hold identical state, so any n - s arrivals give the same pipelined mean."""
    rng = np.random.default_rng(1)
    n, s = 6, 2
    scheme = make_scheme("pgc-fr", n, s)
    latest = {k: {} for k in range(n)}
    for step in range(7):
        g = rng.standard_normal((n, 3))  # partition gradients at this step's model
        for k in range(n):
            latest[k].update({j: g[j] for j in scheme.partitions_to_compute(k, step)})
        msgs = {k: encode(scheme, k, latest[k]) for k in range(n)}
        target = sum(latest[(j // (s + 1)) * (s + 1)][j] for j in range(n)) / n
        for R in itertools.combinations(range(n), n - s):
            assert np.allclose(decode(scheme, [(k, msgs[k]) for k in R[::-1]]), target)


@pytest.mark.parametrize("fam", ["fr", "cr"])
def test_s0_pipelined_equals_dgd(fam: str) -> None:
    for n in range(1, 9):
        dgd, pgc = make_scheme("dgd", n, 0), make_scheme(f"pgc-{fam}", n, 0)
        assert pgc.placement == dgd.placement and pgc.wait_for == n
        assert np.array_equal(pgc.B, dgd.B)
        for k, step in itertools.product(range(n), range(4)):
            assert pgc.partitions_to_compute(k, step) == dgd.partitions_to_compute(k, step) == (k,)
            assert pgc.encode_coefficients(k) == dgd.encode_coefficients(k)
        assert pgc.decode_weights(range(n)) == dgd.decode_weights(range(n))


def _brute_max_disjoint(placement: tuple[tuple[int, ...], ...], R: tuple[int, ...]) -> int:
    masks = [sum(1 << j for j in placement[k]) for k in R]
    best = 0
    for sub in range(1, 1 << len(R)):
        union, size = 0, 0
        for i, m in enumerate(masks):
            if sub >> i & 1:
                union, size = union | m, size + len(placement[R[i]])
        if union.bit_count() == size:
            best = max(best, sub.bit_count())
    return best


@pytest.mark.parametrize(("fam", "c"), [("cr", 2), ("cr", 3), ("fr", 2)])
def test_is_gc_max_disjoint_matches_brute_force(fam: str, c: int) -> None:
    rng = np.random.default_rng(2)
    for n in range(c, 11):
        if fam == "fr" and n % c:
            continue
        scheme = make_scheme(f"is-gc-{fam}", n, n - 1, c=c)  # s = n-1: every non-empty set decodes
        for r in range(1, n + 1):
            for R in itertools.combinations(range(n), r):
                if n == 10 and rng.random() > 0.25:
                    continue
                order = tuple(int(k) for k in rng.permutation(R))
                w = scheme.decode_weights(order)
                D = [k for k, wk in w.items() if wk > 0]
                parts = [j for k in D for j in scheme.placement[k]]
                assert len(parts) == len(set(parts)) == c * len(D)
                assert len(D) == _brute_max_disjoint(scheme.placement, order)
                assert all(wk == pytest.approx(1 / (c * len(D))) for k, wk in w.items() if k in D)
                assert abs(scheme.partition_weights(order).sum() - 1.0) < 1e-12


def test_is_sgd_and_dgd_weights() -> None:
    dgd, is_sgd = make_scheme("dgd", 5, 2), make_scheme("is-sgd", 5, 2)
    assert dgd.wait_for == 5 and is_sgd.wait_for == 3
    assert dgd.decode_weights(range(5)) == dict.fromkeys(range(5), 0.2)
    assert is_sgd.decode_weights([4, 0, 2]) == dict.fromkeys([4, 0, 2], 1 / 3)
    assert is_sgd.decode_weights([4, 0, 2, 1]) == dict.fromkeys([4, 0, 2, 1], 0.25)
    assert np.allclose(is_sgd.partition_weights([4, 0, 2]), [1 / 3, 0, 1 / 3, 0, 1 / 3])
    g = np.arange(10.0).reshape(5, 2)
    assert np.allclose(decode(is_sgd, {k: g[k] for k in (1, 3, 4)}), g[[1, 3, 4]].mean(axis=0))
