"""Gradient-coding schemes (and IS-SGD, IS-GC) for straggler-tolerant data-parallel SGD.

Written once here; the PGC paper (:mod:`distlab.pgc`, its name for this module is
``distlab.pgc.coding``) and the atlas use it.

Setting (Su & Li, "Pipelined Gradient Coding"): a master and ``n`` workers; the
training set is cut into ``n`` partitions ``0..n-1``; up to ``s`` workers may
straggle.  Every scheme below says (i) which partitions each worker holds
(*placement*), (ii) which partition gradients a worker computes at a step, (iii)
how a worker combines them into its single message (*encoding*), and (iv) how
the master turns the messages that arrived into an estimate of the mean
gradient ``1/n * sum_j g_j`` (*decoding*).

Schemes (the strings are the config values):

``dgd``
    Plain synchronous data parallelism: worker ``k`` holds partition ``k`` and
    the master waits for all ``n`` messages and averages them.
``gc-fr``
    Fractional repetition: workers form ``n/(s+1)`` groups of ``s+1``; all
    members of group ``g`` hold partitions ``g(s+1) .. g(s+1)+s`` and send the
    sum of their gradients.  With ``n-s`` arrivals every group has a survivor,
    so taking the first-arrived member of each group gives the exact sum.
``gc-cr``
    Cyclic repetition (Tandon et al., 2017): worker ``k`` holds ``k..k+s``
    (mod n) and sends a fixed linear combination (row ``k`` of ``B``, see
    :func:`tandon_B`).  Any ``n-s`` rows of ``B`` span the all-ones vector, so
    solving ``B[R].T a = 1`` gives decoding weights for the exact sum.
``pgc-fr``, ``pgc-cr``
    Pipelined gradient coding (the paper's method).  Placement is FR / CR with
    ``s+1`` partitions per worker, but a worker recomputes only ONE of them per
    step (round-robin, :meth:`Scheme.pgc_partition`) at the current model and
    reuses its latest gradient of the others; at step 0 it computes all of them.
    It sends the plain sum of its ``s+1`` latest gradients, whose staleness is at
    most ``s`` (:func:`pgc_staleness`).  For FR every member of a group uses the
    same round-robin index (the choice of the authors' code), so members of a
    group hold identical gradient state and send identical messages: the group's
    messages are interchangeable, which is what lets any ``n-s`` arrivals decode
    the pipelined gradient exactly as in ``gc-fr``.  For CR worker ``k`` recomputes
    ``k + (step mod (s+1))``, so every partition is refreshed by exactly one
    worker per step; the master scales the sum of the arrived messages by
    ``n/(|R|(s+1))`` -- an unbiased approximation, not an exact decode.  With
    ``s = 0`` both reduce exactly to ``dgd``.
``is-sgd``
    Ignore stragglers: like ``dgd`` but the master averages the fastest ``n-s``.
``is-gc-fr``, ``is-gc-cr``
    Ignore-straggler gradient coding: ``c`` partitions per worker (default 2,
    independent of ``s``) placed FR / CR, plain sums sent; the master waits for
    the fastest ``n-s`` and keeps the largest set of arrived workers whose
    partitions are pairwise disjoint, averaging over the ``c|D|`` partitions
    recovered.

Everything here is pure numpy; the training runtime owns the gradient state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

SCHEMES: tuple[str, ...] = ("dgd", "gc-fr", "gc-cr", "pgc-fr", "pgc-cr", "is-sgd", "is-gc-fr", "is-gc-cr")

Placement = tuple[tuple[int, ...], ...]


class CodingError(ValueError):
    """Invalid scheme parameters or an undecodable set of received workers."""


def _check_c(n: int, c: int) -> None:
    if not 1 <= c <= n:
        raise CodingError(f"need 1 <= c <= n partitions per worker, got c={c}, n={n}")


def fr_placement(n: int, c: int) -> Placement:
    """Fractional repetition: worker ``k`` holds the ``c`` partitions of group ``k // c``."""
    _check_c(n, c)
    if n % c:
        raise CodingError(f"fractional repetition needs n divisible by c: n={n}, c={c}")
    return tuple(tuple(range((k // c) * c, (k // c) * c + c)) for k in range(n))


def cr_placement(n: int, c: int) -> Placement:
    """Cyclic repetition: worker ``k`` holds ``k, k+1, ..., k+c-1`` (mod ``n``)."""
    _check_c(n, c)
    return tuple(tuple((k + t) % n for t in range(c)) for k in range(n))


def tandon_B(n: int, s: int, seed: int = 0, draws: int = 16) -> np.ndarray:
    """Cyclic-repetition encoding matrix of Tandon et al. (2017), ``n x n``.

    ``H`` (``s x n``) is a seeded random matrix with zero row sums (``s`` rows of
    a random orthogonal ``(n-1) x (n-1)`` matrix, plus a last column equal to
    minus the row sum), so ``H 1 = 0``.  Row ``i`` of ``B`` is supported on
    ``i..i+s`` (mod n) with ``B[i, i] = 1`` and the remaining ``s`` entries
    chosen so that ``H b_i = 0``.  The rows of ``B`` then lie in the null space
    of ``H`` (dimension ``n-s``, containing ``1``), and for generic ``H`` any
    ``n-s`` of them are independent, hence span ``1``.  ``s = 0`` gives ``I``.

    A single draw can make some ``s x s`` block of ``H`` nearly singular, giving
    huge coefficients and a loss of decoding accuracy (e.g. ``n=11, s=1`` with
    one draw: entries ~1e3, decode error ~5e-10).  We therefore take ``draws``
    candidates from the seeded generator and keep the one with the smallest
    largest coefficient; the result is still a deterministic function of ``seed``.
    """
    if not 0 <= s < n:
        raise CodingError(f"need 0 <= s < n, got n={n}, s={s}")
    if s == 0:
        return np.eye(n)
    rng = np.random.default_rng(seed)
    return min((_tandon_draw(rng, n, s) for _ in range(draws)), key=lambda B: float(np.abs(B).max()))


def _tandon_draw(rng: np.random.Generator, n: int, s: int) -> np.ndarray:
    """One Tandon matrix from one random zero-row-sum ``H`` (see :func:`tandon_B`)."""
    Q, _ = np.linalg.qr(rng.standard_normal((n - 1, n - 1)))
    H = np.hstack([Q[:s], -Q[:s].sum(axis=1, keepdims=True)])
    B = np.eye(n)
    for i in range(n):
        S = [(i + 1 + t) % n for t in range(s)]
        B[i, S] = np.linalg.solve(H[:, S], -H[:, i])
    return B


@dataclass(frozen=True)
class Scheme:
    """A fully specified coding scheme; build it with :func:`make_scheme`.

    ``B[k, j]`` is the coefficient of partition ``j`` in worker ``k``'s message
    (1 on the support for plain-sum schemes, Tandon's matrix for ``gc-cr``).
    """

    name: str
    n: int
    s: int
    c: int
    placement: Placement
    wait_for: int
    B: np.ndarray = field(compare=False, repr=False)
    pipelined: bool

    def pgc_partition(self, worker: int, step: int) -> int:
        """Partition a pipelined worker refreshes at ``step`` (>0): local index ``step mod (s+1)``."""
        if not self.pipelined:
            raise CodingError(f"{self.name} is not a pipelined scheme")
        return self.placement[worker][step % (self.s + 1)]

    def partitions_to_compute(self, worker: int, step: int) -> tuple[int, ...]:
        """Partitions whose gradient ``worker`` computes at the current model at ``step``."""
        if step < 0:
            raise CodingError(f"step must be >= 0, got {step}")
        if self.pipelined and step > 0:
            return (self.pgc_partition(worker, step),)
        return self.placement[worker]

    def encode_coefficients(self, worker: int) -> dict[int, float]:
        """Partition -> coefficient of its (latest) gradient in ``worker``'s message."""
        return {j: float(self.B[worker, j]) for j in self.placement[worker]}

    def _first_per_group(self, received: Sequence[int]) -> list[int]:
        """First-arrived worker of each FR group present in ``received``."""
        seen: dict[int, int] = {}
        for k in received:
            seen.setdefault(k // self.c, k)
        return list(seen.values())

    def _max_disjoint(self, received: Sequence[int]) -> list[int]:
        """A largest subset of ``received`` with pairwise disjoint partitions."""
        if self.name.endswith("-fr"):
            return self._first_per_group(received)
        # CR arcs of equal length c on a circle: some arc `a` is in an optimum; cutting the
        # circle at a's start leaves interval scheduling on a line, where greedy by start
        # (= by end, all lengths equal) is optimal.  Trying every `a` is therefore exact.
        n, c, best = self.n, self.c, []
        for a in received:
            chosen, free = [a], c
            for d, k in sorted(((k - a) % n, k) for k in received if k != a):
                if d >= free and d + c <= n:
                    chosen.append(k)
                    free = d + c
            if len(chosen) > len(best):
                best = chosen
        return best

    def decode_weights(self, received: Sequence[int]) -> dict[int, float]:
        """Weight per received worker (arrival order) so ``sum w_i m_i`` estimates the mean gradient."""
        received = [int(k) for k in received]
        if len(set(received)) != len(received) or not all(0 <= k < self.n for k in received):
            raise CodingError(f"received must be distinct workers in 0..{self.n - 1}, got {received}")
        if len(received) < self.wait_for:
            raise CodingError(f"{self.name} needs {self.wait_for} of n={self.n} workers, got {len(received)}")
        n, s = self.n, self.s
        w = dict.fromkeys(received, 0.0)
        if self.name in ("dgd", "is-sgd"):
            w = dict.fromkeys(received, 1.0 / len(received))
        elif self.name in ("gc-fr", "pgc-fr"):
            first = self._first_per_group(received)
            if len(first) != n // self.c:
                raise CodingError(f"{self.name}: some group has no received worker in {received}")
            w.update(dict.fromkeys(first, 1.0 / n))
        elif self.name == "gc-cr":
            BR = self.B[received].T
            a = np.linalg.lstsq(BR, np.ones(n), rcond=None)[0]
            if np.abs(BR @ a - 1.0).max() > 1e-8:
                raise CodingError(f"gc-cr: workers {received} do not span the all-ones vector")
            w = {k: float(ak) / n for k, ak in zip(received, a)}
        elif self.name == "pgc-cr":
            w = dict.fromkeys(received, 1.0 / (len(received) * (s + 1)))
        else:  # is-gc-fr, is-gc-cr
            D = self._max_disjoint(received)
            w.update(dict.fromkeys(D, 1.0 / (self.c * len(D))))
        return w

    def partition_weights(self, received: Sequence[int]) -> np.ndarray:
        """Effective weight on each partition's gradient: ``sum_i w_i B[i, :]`` (length ``n``)."""
        w = self.decode_weights(received)
        return sum((wk * self.B[k] for k, wk in w.items()), start=np.zeros(self.n))

    def ready(self, received: Sequence[int]) -> bool:
        """Whether the master has all it waits for (``wait_for`` distinct arrivals)."""
        return len(set(received)) >= self.wait_for


def implied_c(name: str, s: int) -> int:
    """Partitions a worker holds: 1 for the uncoded schemes, ``s + 1`` for the exact codes, 2
    by default for ignore-straggler codes (free for them: :func:`make_scheme`'s ``c``)."""
    if name not in SCHEMES:
        raise CodingError(f"unknown scheme {name!r}; expected one of {', '.join(SCHEMES)}")
    return 2 if name.startswith("is-gc") else {"dgd": 1, "is-sgd": 1}.get(name, s + 1)


def passes_per_step(name: str, s: int) -> int:
    """Partition gradients a worker computes at a step after the first: one for a pipelined
    scheme (it refreshes one partition a step), each partition it holds for the others."""
    return 1 if name.startswith("pgc") else implied_c(name, s)


def make_scheme(name: str, n: int, s: int, seed: int = 0, c: int | None = None) -> Scheme:
    """Validate parameters and build scheme ``name`` for ``n`` workers tolerating ``s`` stragglers.

    ``c`` (partitions per worker) is free only for ``is-gc-*`` (default 2); for the
    other schemes it is implied (1 or ``s+1``) and a different value is an error.
    ``seed`` drives Tandon's random matrix for ``gc-cr``.
    """
    if name not in SCHEMES:
        raise CodingError(f"unknown scheme {name!r}; expected one of {', '.join(SCHEMES)}")
    if n < 1:
        raise CodingError(f"need n >= 1 workers, got n={n}")
    if not 0 <= s < n:
        raise CodingError(f"need 0 <= s < n stragglers, got n={n}, s={s}")
    implied = implied_c(name, s) if c is None or not name.startswith("is-gc") else c
    if c is not None and c != implied:
        raise CodingError(f"{name} uses c={implied} partitions per worker (n={n}, s={s}), got c={c}")
    c = implied
    _check_c(n, c)
    if name.endswith("-fr") and n % c:
        what = "c" if name.startswith("is-gc") else "s+1"
        raise CodingError(f"{name} needs n divisible by {what}: n={n}, s={s}, {what}={c}")
    placement = fr_placement(n, c) if name.endswith("-fr") else cr_placement(n, c)
    if name == "gc-cr":
        B = tandon_B(n, s, seed)
    else:
        B = np.zeros((n, n))
        for k, parts in enumerate(placement):
            B[k, list(parts)] = 1.0
    B.setflags(write=False)
    return Scheme(
        name=name,
        n=n,
        s=s,
        c=c,
        placement=placement,
        wait_for=n if name == "dgd" else n - s,
        B=B,
        pipelined=name.startswith("pgc"),
    )


def encode(scheme: Scheme, worker: int, grads: Mapping[int, np.ndarray]) -> np.ndarray:
    """Worker message ``sum_j coef_j * grads[j]`` over the worker's partitions."""
    terms = [coef * np.asarray(grads[j]) for j, coef in scheme.encode_coefficients(worker).items()]
    return sum(terms[1:], start=terms[0])


def decode(
    scheme: Scheme, messages: Mapping[int, np.ndarray] | Sequence[tuple[int, np.ndarray]]
) -> np.ndarray:
    """Estimate of the mean gradient from ``{worker: msg}`` or ``[(worker, msg), ...]`` in arrival order."""
    pairs = list(messages.items()) if isinstance(messages, Mapping) else list(messages)
    w = scheme.decode_weights([k for k, _ in pairs])
    terms = [w[k] * np.asarray(m) for k, m in pairs if w[k] != 0.0]
    return sum(terms[1:], start=terms[0])


def pgc_staleness(scheme: Scheme, worker: int, step: int) -> dict[int, int]:
    """Age in steps of each held partition's latest gradient at ``step`` (worker computed every step).

    Local index ``l`` was last refreshed at the latest ``t' <= step`` with
    ``t' = l (mod s+1)``, or at step 0 (start-up computes everything), so the age is
    ``min(step, (step - l) mod (s+1)) <= s``.  Non-pipelined schemes are always fresh (0).
    """
    if step < 0:
        raise CodingError(f"step must be >= 0, got {step}")
    parts = scheme.placement[worker]
    if not scheme.pipelined:
        return dict.fromkeys(parts, 0)
    return {j: min(step, (step - l) % (scheme.s + 1)) for l, j in enumerate(parts)}
