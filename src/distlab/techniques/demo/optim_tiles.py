"""DeMo's tiles: the coefficient layout of its parameters and the per-tile kernels.

What :class:`distlab.techniques.demo.optim.DeMo` is built from: a parameter's DCT coefficients kept in
its own ``(rows, cols)`` layout (:class:`_Member`), parameters of one tile shape grouped
with their scratch buffers (:class:`_TileGroup`), and the kernels on them: the forward
transform fused with the momentum update, the two-stage top-k, the dense and the sparse
inverse transform, and the one-tensor all-gather.  See :mod:`distlab.techniques.demo.optim` for the
algorithm and where its time goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .transforms import dct_matrix

@dataclass
class _Member:
    index: int            # position in the layout's parameter list
    param: torch.Tensor
    group: dict           # its param group (lr, weight_decay)
    rows: int             # the parameter as a (rows, cols) matrix (see transforms.matrix_shape)
    cols: int
    tiles: int            # number of tiles
    start: int            # first tile in the group's tile order
    offset: int           # first element in the group's coefficient buffer
    @property
    def span(self) -> slice:
        """Its elements in the group's flat buffers (coefficients, scratch)."""
        return slice(self.offset, self.offset + self.rows * self.cols)


@dataclass
class _Class:
    """The members of a tile group that share a column count, consecutive in its buffers: their
    ``n1``-row blocks are one batch of ``(n1, cols)`` matrices, so the column side of the transform
    is one batched matmul over all of them, and ``|c|`` goes into the tile layout in one copy.
    The views below are made once per layout; a step builds none of its own."""
    cols: int
    offset: int           # first element in the group's buffers
    elements: int
    start: int            # first tile in the group's tile order
    tiles: int
    members: list[_Member] = field(default_factory=list)
    coeff: torch.Tensor | None = None    # (blocks, n1, cols) views of coeff, work
    work: torch.Tensor | None = None
    d1: torch.Tensor | None = None       # D1 expanded over the blocks (blocks, n1, n1); d1t: its transpose
    d1t: torch.Tensor | None = None
    tiles_of: torch.Tensor | None = None  # coeff as (blocks, cols/n2, n1, n2) tiles (a strided view)
    tiled: torch.Tensor | None = None    # the group's tile-order scratch for these tiles, same shape
    total: torch.Tensor | None = None    # (blocks, n1, cols) view of the group's dense-inverse scratch
    out: torch.Tensor | None = None      # (blocks, n1, cols) view of the group's tile scratch (dense inverse)

    @property
    def span(self) -> slice:
        return slice(self.offset, self.offset + self.elements)


@dataclass
class _TileGroup:
    n1: int
    n2: int
    dtype: torch.dtype
    device: torch.device
    k: int
    members: list[_Member] = field(default_factory=list)
    tiles: int = 0
    elements: int = 0
    idx_off: int = 0      # byte offsets in the payload
    idx_len: int = 0
    val_off: int = 0
    val_len: int = 0
    coeff: torch.Tensor | None = None   # (elements,): every member's momentum as DCT coefficients, each in
                                        # its parameter's matrix layout (tile (a, b) at rows a*n1.., cols b*n2..)
    work: torch.Tensor | None = None    # (elements,) scratch: the half-transformed gradient / mean
                                        # (n1 > 1 only: a (1, n2) tile needs one product a side)
    tiled: torch.Tensor | None = None   # (tiles, n1*n2) scratch: |coefficients| tile by tile; apply's output
    total: torch.Tensor | None = None   # (elements,) apply's scratch (dense inverse), zero between steps: the
                                        # mean's coefficients
    hits: torch.Tensor | None = None    # (tiles, n1*n2) apply's scratch (N > 1), zero between steps: senders
                                        # per position
    base: torch.Tensor | None = None    # (tiles, 1) int64: element offset of each tile's corner in ``coeff``
    stride: torch.Tensor | None = None  # (tiles, 1) int64: row stride (its member's cols) of each tile
    owner: torch.Tensor | None = None   # (tiles,) int64: the member index (payload mask bit) of each tile
    basis1: torch.Tensor | None = None  # (chunk, E, n1) apply's scratch (sparse inverse), reused chunk after
    basis2: torch.Tensor | None = None  # (chunk, E, n2) chunk of tiles: D1's, D2's row of each entry
    sparse_key: tuple = ()              # (chunk, E) the views below were made for
    sparse_views: list = field(default_factory=list)  # per chunk: views of basis1/2 and of the output
    segment: int = 0                    # the top-k's segment length (see _top_k; 0: one plain topk)
    d2t: torch.Tensor | None = None     # D2 transposed, contiguous (the row product runs ~4 % faster than on
                                        # the transposed view)
    classes: list[_Class] = field(default_factory=list)  # n1 > 1: members by column count (see _Class)
    grads: list[torch.Tensor] = field(default_factory=list)  # per member: a view of ``tiled`` in the
                                        # parameter's shape, where a step stages its gradient (one
                                        # ``_foreach_copy_`` for every parameter of the optimizer)
    lrwd: tuple = ()                    # the (lr * weight_decay) per decayed member the device copy holds
    lrwd_t: torch.Tensor | None = None  # (decayed members,) lr * weight_decay on the device
    decayed_at: torch.Tensor | None = None  # (decayed members,) their member indices, on the device
    updates: dict = field(default_factory=dict)  # "tiled" / "matrix": per member (param view, update view)

    @property
    def numel(self) -> int:
        return self.n1 * self.n2

    def row_col(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Within-tile positions -> (row, column) in the tile: a shift and a mask when ``n2`` is a
        power of two (the usual 64; integer division is several times slower)."""
        if self.n2 & (self.n2 - 1) == 0:
            return idx >> (self.n2.bit_length() - 1), idx & (self.n2 - 1)
        row = torch.div(idx, self.n2, rounding_mode="floor")
        return row, idx - row * self.n2

    def flat_index(self, idx: torch.Tensor) -> torch.Tensor:
        """Within-tile positions ``(tiles, m)`` -> element offsets in ``coeff``."""
        row, col = self.row_col(idx)
        return self.base + row * self.stride + col


_ORDER_AS = {torch.float32: torch.int32, torch.float64: torch.int64,
             torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _as_matrix_layout(delta: torch.Tensor, m: _Member, tg: _TileGroup) -> torch.Tensor:
    """A stored momentum as the member's (rows, cols) coefficient matrix.  Checkpoints written
    before the coefficients were kept in the parameter's layout hold them tile by tile,
    ``(tiles, n1, n2)``; those are rearranged."""
    if delta.dim() == 3:  # (tiles, n1, n2); the current layout is 2-D
        return delta.reshape(m.rows // tg.n1, m.cols // tg.n2, tg.n1, tg.n2).permute(0, 2, 1, 3) \
            .reshape(m.rows, m.cols)
    return delta.reshape(m.rows, m.cols)


def _forward(tg: _TileGroup, decay: float, lr: float) -> None:
    """``coeff <- decay * coeff + lr * DCT(g)`` for every member of the group at once, ``g`` the
    gradients staged in ``tg.tiled`` (each in its parameter's (rows, cols) layout, as ``coeff``):
    the row side is one matmul over all (.., n2) rows of the group, the column side one batched
    matmul a column class (:class:`_Class`) over its blocks of n1 rows, fused with the momentum
    update (no copy into a tile layout).  One-row tiles (``n1 == 1``) take one product in all.
    ``lr`` is the rate of every member, or 1 where the staged gradients were scaled by their own."""
    g = tg.tiled.view(-1, tg.n2)
    if tg.n1 == 1:
        tg.coeff.view(-1, tg.n2).addmm_(g, tg.d2t, beta=decay, alpha=lr)
        return
    torch.mm(g, tg.d2t, out=tg.work.view(-1, tg.n2))
    for cl in tg.classes:
        cl.coeff.baddbmm_(cl.d1, cl.work, beta=decay, alpha=lr)


def _inverse(c: torch.Tensor, out: torch.Tensor, work: torch.Tensor | None, m: _Member, tg: _TileGroup) -> None:
    """``out <- IDCT(c)`` tile by tile, both in the parameter's (rows, cols) layout."""
    d2 = dct_matrix(tg.n2, tg.dtype, tg.device)
    if tg.n1 == 1:
        torch.mm(c.view(-1, tg.n2), d2, out=out.view(-1, tg.n2))
        return
    b = m.rows // tg.n1
    torch.mm(c.view(-1, tg.n2), d2, out=work.view(-1, tg.n2))
    d1 = dct_matrix(tg.n1, tg.dtype, tg.device)
    torch.bmm(d1.T.expand(b, tg.n1, tg.n1), work.view(b, tg.n1, m.cols), out=out.view(b, tg.n1, m.cols))


def _segment_length(numel: int, k: int) -> int:
    """The group size of :func:`_top_k` for tiles of ``numel`` coefficients keeping ``k``: 8 where
    ``numel >= 64 k``, else 0 (one plain ``topk``).  That is where ``torch.topk`` on the CPU keeps a
    heap and returns the k largest largest-first, so the two stages can give its very positions
    in its order; with fewer values a tile it selects in place and returns them in no set order.
    On 64 x 64 tiles at k = 32: 512 groups of 8, 256 candidates a tile."""
    return 8 if numel % 8 == 0 and numel >= 64 * k else 0


def _top_k(keys: torch.Tensor, k: int, length: int) -> torch.Tensor:
    """Positions of the ``k`` largest of each row of ``keys`` ``(tiles, numel)``, largest first.

    In two stages over ``per = numel / length`` groups of ``length`` values (group ``g`` holds
    positions ``g, g + per, g + 2 per, ...``, so the group maxima are one vectorised reduction
    over rows of the tile): the ``k`` groups with the largest maxima, then the ``k`` largest of
    their ``k * length`` values.  Every one of the row's ``k`` largest lies in such a group (a
    group left out has ``k`` groups whose maxima are at least its own, so ``k`` values at least as
    large as any of its values), so the values kept are exactly the row's ``k`` largest.  Where
    those values are distinct from each other and from the rest, the positions are
    ``torch.topk``'s too, in its order (largest first; tested).  Among equal values it may keep
    other positions than ``torch.topk`` on the CPU would; that choice is the CPU kernel's, not
    the method's (the GPU's kernel breaks such ties its own way).  ``torch.topk`` runs a heap
    over every value of a row; here the two ``topk`` calls see ``per + k * length`` values (768 of
    4,096 on 64 x 64 tiles at k = 32): 0.69x its time there, measured.  ``length`` 0: one plain
    ``topk``."""
    if not length:
        return keys.topk(k, dim=-1, sorted=False).indices
    tiles, numel = keys.shape
    per = numel // length
    v = keys.view(tiles, length, per)
    best = v.amax(1).topk(k, dim=-1, sorted=False).indices                 # (tiles, k) groups
    cand = v.gather(2, best.unsqueeze(1).expand(tiles, length, k))          # (tiles, length, k)
    j = cand.view(tiles, length * k).topk(k, dim=-1, sorted=True).indices   # largest first
    if k & (k - 1) == 0:
        i, col = j >> (k.bit_length() - 1), j & (k - 1)
    else:
        i = torch.div(j, k, rounding_mode="floor")
        col = j - i * k
    return best.gather(1, col) + i * per


def _sparse_pays(tg: _TileGroup, entries: int) -> bool:
    """Whether apply's inverse DCT is cheaper summed entry by entry than as two dense products.

    ``entries`` coefficients a tile were received (N workers' k).  The dense inverse of a tile
    costs ``n1 * n2 * (n1 + n2)`` multiply-adds (``n1 * n2 * n2`` for one-row tiles), the sum of
    ``entries`` scaled outer products of basis rows ``n1 * n2 * entries`` (one small-K batched
    matmul, plus gathering the basis rows): sparse when it has no more products than the dense
    one (apply's time on 64 x 64 tiles, k = 32, one thread, against the dense path: about 0.55x
    at N = 1, 0.75x at N = 2, 0.9x at N = 3, 0.97x at N = 4).
    """
    dense = tg.n2 + (tg.n1 if tg.n1 > 1 else 0)
    return entries <= dense


_SPARSE_CHUNKS = 8                    # the sparse inverse runs in min(tiles, this) chunks of tiles, whatever
                                      # the size: the ops a step dispatches do not grow with the tiles
_SPARSE_CHUNK_BYTES: int | None = None  # a cap on one chunk's gathered basis rows, in bytes (None: none; a
                                        # test sets 1 for one tile a chunk)


def sparse_scratch(tg: _TileGroup, e: int, out: torch.Tensor) -> int:
    """:func:`_inverse_sparse`'s scratch and every chunk's views for ``e`` entries a tile, made
    once per (chunk, entries) (``out`` is the group's tile scratch, ``tg.tiled``, whose views are
    kept); returns the chunk (tiles a batched product).  Made ahead by ``DeMo.prepare`` so that a
    compiled step does not make it inside its first call and compile again on its second."""
    chunk = -(-tg.tiles // _SPARSE_CHUNKS)
    if _SPARSE_CHUNK_BYTES is not None:
        chunk = max(1, min(chunk, _SPARSE_CHUNK_BYTES // (e * (tg.n1 + tg.n2) * tg.coeff.element_size())))
    key = (chunk, e)
    if tg.sparse_key != key:
        tg.sparse_key = key
        tg.basis1 = torch.empty((chunk, e, tg.n1), dtype=tg.dtype, device=tg.device)
        tg.basis2 = torch.empty((chunk, e, tg.n2), dtype=tg.dtype, device=tg.device)
        tg.sparse_views = []
        for o in out.view(tg.tiles, tg.n1, tg.n2).split(chunk):
            b1, b2 = tg.basis1[:o.shape[0]], tg.basis2[:o.shape[0]]
            tg.sparse_views.append((b1.view(-1, tg.n1), b2.view(-1, tg.n2), b1 if tg.n1 <= tg.n2 else b2,
                                    b1.transpose(1, 2), b2, o))
    return chunk


def _inverse_sparse(tg: _TileGroup, idx: torch.Tensor, share: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` (tiles, n1*n2) <- the sign of each tile's IDCT of its received coefficients, tile by
    tile, the IDCT as the sum over the tile's entries of ``share * outer(D1[row], D2[col])``: one
    batched matmul ``(n1, E) @ (E, n2)`` a tile over the gathered basis rows, never the dense
    ``(n1, n2)`` sums.  An index sent by several workers appears once per worker; the sum is
    linear, so that is the inverse of the per-index total.  Done in ``min(tiles, 8)`` chunks of
    tiles (a fixed number, so the ops do not grow with the model; one chunk's basis rows are an
    eighth of the whole), gathered into one reused scratch; every chunk's views are made once."""
    e = idx.shape[1]
    chunk = sparse_scratch(tg, e, out)
    d1, d2 = dct_matrix(tg.n1, tg.dtype, tg.device), dct_matrix(tg.n2, tg.dtype, tg.device)
    row, col = tg.row_col(idx)
    rows, cols = row.reshape(-1).split(chunk * e), col.reshape(-1).split(chunk * e)
    shares = share.unsqueeze(-1).split(chunk)
    for r, c, s, (f1, f2, shorter, b1t, b2, o) in zip(rows, cols, shares, tg.sparse_views):
        torch.index_select(d1, 0, r, out=f1)
        torch.index_select(d2, 0, c, out=f2)
        shorter.mul_(s)  # the shorter basis row
        torch.bmm(b1t, b2, out=o).sign_()


def _inverse_dense(tg: _TileGroup, idx: torch.Tensor, share: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` <- the IDCT of the received coefficients, in each parameter's (rows, cols) layout
    (``out`` viewed flat, as ``coeff``): the shares summed per index into a scratch buffer that
    is zero between steps (only the touched positions are written and reset), then two products
    (the row side one matmul over the group, the column side one batched matmul a column class)."""
    if tg.total is None:
        tg.total = torch.zeros(tg.elements, dtype=tg.dtype, device=tg.device)
        for cl in tg.classes:
            b = cl.elements // (tg.n1 * cl.cols)
            cl.total = tg.total[cl.span].view(b, tg.n1, cl.cols)
    flat = tg.flat_index(idx).reshape(-1)
    tg.total.scatter_add_(0, flat, share.reshape(-1))
    d2 = dct_matrix(tg.n2, tg.dtype, tg.device)
    if tg.n1 == 1:  # one product over the whole group
        torch.mm(tg.total.view(-1, tg.n2), d2, out=out.view(-1, tg.n2))
    else:
        torch.mm(tg.total.view(-1, tg.n2), d2, out=tg.work.view(-1, tg.n2))
        for cl in tg.classes:
            torch.bmm(cl.d1t, cl.work, out=cl.out)
    tg.total.index_fill_(0, flat, 0.0)


def _tiles_of(x: torch.Tensor, m: _Member, tg: _TileGroup) -> torch.Tensor:
    """A view of a member's (rows, cols) buffer as ``(rows/n1, cols/n2, n1, n2)`` tiles."""
    return x.view(m.rows // tg.n1, tg.n1, m.cols // tg.n2, tg.n2).permute(0, 2, 1, 3)


def _gather_into(out: torch.Tensor, part: torch.Tensor, group) -> None:
    """All-gather ``part`` of every rank into the rows of ``out`` ``(world, n)``: one
    collective into one tensor (``all_gather_single``, torch's new name for
    ``all_gather_into_tensor``): no list of buffers, no stacking copy."""
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out.view(-1), part, group=group)


def _column_classes(tg: _TileGroup, flat_tiled: torch.Tensor) -> list[_Class]:
    """A tile group's members of one column count, consecutive in its buffers: each class is one
    batch of (n1, cols) blocks for the column side of the transform, with its views."""
    classes: list[_Class] = []
    d1 = dct_matrix(tg.n1, tg.dtype, tg.device)
    for m in tg.members:
        if not classes or classes[-1].cols != m.cols:
            classes.append(_Class(m.cols, m.offset, 0, m.start, 0))
        cl = classes[-1]
        cl.members.append(m)
        cl.elements += m.rows * m.cols
        cl.tiles += m.tiles
    for cl in classes:
        blocks = cl.elements // (tg.n1 * cl.cols)
        cl.coeff = tg.coeff[cl.span].view(blocks, tg.n1, cl.cols)
        cl.work = tg.work[cl.span].view(blocks, tg.n1, cl.cols)
        cl.d1 = d1.expand(blocks, tg.n1, tg.n1)
        cl.d1t = d1.T.expand(blocks, tg.n1, tg.n1)
        cl.tiles_of = tg.coeff[cl.span].view(blocks, tg.n1, cl.cols // tg.n2, tg.n2).permute(0, 2, 1, 3)
        cl.tiled = tg.tiled[cl.start:cl.start + cl.tiles].view(blocks, cl.cols // tg.n2, tg.n1, tg.n2)
        cl.out = flat_tiled[cl.span].view(blocks, tg.n1, cl.cols)
    return classes
