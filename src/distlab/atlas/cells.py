"""How two of the atlas's answers compare and print, shared by the query and the map: whether a
row can reach the leader's time to target, and a step ratio with its interval (or why it has
none)."""

from __future__ import annotations

import numpy as np


def _finite(x) -> bool:
    return x is not None and bool(np.isfinite(float(x)))


def overlaps_leader(r, lead) -> bool:
    """Whether a ranked row's time to target can reach the leader's (``tie``).  MFU and the link's
    achieved fraction are the cluster's, common to every technique: at the clock's fast corner and
    at its slow one, the row's time with its ratio's lower end against the leader's with its
    ratio's upper end.  Without the clock's corners (the replay) the two intervals themselves."""
    if not (bool(r.get("ranked", r.get("valid", True))) and bool(r.get("valid", True))):
        return False
    corners = ("per_step_lo_s", "per_step_hi_s")
    if all(_finite(x.get(c)) for x in (r, lead) for c in corners):
        r_lo = r["ratio_lo"] if _finite(r.get("ratio_lo")) else r["ratio"]
        l_hi = lead["ratio_hi"] if _finite(lead.get("ratio_hi")) else lead["ratio"]
        return any(float(r[c]) * float(r_lo) <= float(lead[c]) * float(l_hi) for c in corners)
    return bool(r["lo_s"] <= lead["hi_s"])


def _fmt(x: float, unit: str = "", digits: int = 3) -> str:
    if x is None or not np.isfinite(x):
        return "never" if x == np.inf else "-"
    return f"{x:.{digits}g}{unit}"


def _ratio_cell(r) -> tuple[str, str]:
    """(ratio, its interval or why it has none) as printed."""
    spread = str(r.get("ratio_spread", "") or "")
    if r.get("basis") in ("none", "-"):
        return "?", "-"
    ratio = _fmt(r.get("ratio", np.nan))
    if spread.startswith("exact"):
        return ratio, "exact"
    if spread.startswith("none: a published"):
        return ratio, "(one run)"
    if spread.startswith("none: given"):
        return ratio, "(given)"
    if not np.isfinite(r.get("ratio_hi", np.nan)):
        return ratio, "-"
    return ratio, f"[{_fmt(r['ratio_lo'])}, {_fmt(r['ratio_hi'])}]"
