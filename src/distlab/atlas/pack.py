"""The atlas's recordings in one small file: what ``distlab atlas query`` reads, nothing more.

``results/atlas/techniques/`` holds every run's whole recording (about 40 MB for the default
atlas: every step's measured compute, losses, clock).  The query reads, of each run named in a
technique's ``done.json``: its header (technique, kind, N, seed, FLOPs per pass, straggler
model), its manifest's parameter count and spec (the model and batch the stored compute
profile is looked up by, DiLoCo's H, the trend flag), its validation curve, and per step what
the replay re-times (passes, collectives, master messages, who was waited for).  The pack keeps
exactly that, the steps run-length encoded (a run of identical steps stored once with its
count), gzip-compressed: about 140 kB for the default atlas, small enough for the results
snapshot to carry (``paper/atlas/query_pack.json.gz``), so the shipped atlas can be
queried without ``make reproduce``::

    python -m distlab atlas query --runs paper/atlas/query_pack.json.gz --params 1e9 ...

With ``atlas.compute: stored`` (the default) the recorded compute seconds are not kept: the
query charges the stored profile's from each step's passes (:func:`distlab.atlas.profile.apply`),
as it does for the runs folder; with ``measured`` they are kept.  A pack read back gives the same
recordings, field for field, as the runs folder (``tests/test_atlas_pack.py``).

Checked as the project's readers check a table: beside its runs the pack has a record
(``<pack>.record.json``: checksum and the run folders it was made from,
:func:`distlab.results.tables.write_table_record`), which the snapshot checks before copying it;
inside, the SHA-256 of its content, which the reader checks (a pack edited or cut short is
refused, one line).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pandas as pd

from ..config.specs import SpecError
from ..config.yamlio import YamlLimitError, loads_json_bounded
from .record import Recording

FORMAT = "distlab atlas query pack"
VERSION = 1
HEADER = ("technique", "kind", "n", "seed", "flops_per_pass", "straggler", "network")
# per step, what the replay and the query read (the clock's inputs); compute only when measured
STEP_KEYS = ("passes", "colls", "msg_bytes", "bcast_bytes", "wait_for", "received")
MEASURED_KEYS = ("compute_s", "master_s")


class PackError(SpecError):
    """A pack that is unreadable, edited, cut short or of another format; one line naming it."""


def is_pack(path) -> bool:
    return str(path).endswith(".json.gz")


def _entry(run_dir: str, measured: bool) -> dict:
    d = Path(run_dir)
    rec = json.loads((d / "record.json").read_text())
    man = json.loads((d / "manifest.json").read_text())
    from ..results.runs import check_sealed

    check_sealed(d, man)  # the pack carries a run only as it was written
    keys = STEP_KEYS + (MEASURED_KEYS if measured else ())
    rle: list[list] = []
    prev = None
    for i, s in enumerate(rec["steps"]):
        if int(s["step"]) != i:
            raise PackError(f"{d}/record.json: step {i} is numbered {s['step']}; the pack needs steps 0, 1, ...")
        body = {k: s[k] for k in keys if k in s}
        if body == prev:
            rle[-1][0] += 1
        else:
            rle.append([1, body])
            prev = body
    curve = [[int(s["step"]), float(s["val_loss"])] for s in rec["steps"] if s.get("val_loss") is not None]
    return {"dir": str(run_dir), **{k: rec[k] for k in HEADER}, "n_params": int(man.get("n_params", 0)),
            "spec": man.get("spec"), "curve": curve, "steps": rle}


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_pack(done_files, out, compute: str = "stored") -> dict:
    """Pack every run the technique jobs' ``done.json`` name into ``out`` (``.json.gz``) and its
    record; returns the pack's summary (runs, bytes)."""
    from ..results.tables import atomic_output, write_table_record

    if compute not in ("stored", "measured"):
        raise PackError(f"atlas.compute: {compute!r}; use stored or measured")
    techniques, runs = [], []
    for f in done_files:
        done = json.loads(Path(f).read_text())
        t = Path(f).parent.name
        techniques.append(t)
        runs += [{**_entry(d, compute == "measured"), "job": t} for d in done["runs"]]
    body = {"techniques": techniques, "compute": compute, "runs": runs}
    doc = {"format": FORMAT, "version": VERSION, "sha256": _digest(body), **body}
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    with atomic_output(out) as tmp:
        with open(tmp, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
            gz.write(raw)
    table = pd.DataFrame([{"technique": r["technique"], "dir": r["dir"]} for r in runs])
    write_table_record(out, table, [r["dir"] for r in runs])
    return {"runs": len(runs), "techniques": len(techniques), "bytes": Path(out).stat().st_size}


# bounds on what a pack may unfold to (a crafted pack carries a valid checksum too): the default
# atlas's pack is ~0.1 MB and its longest run 600 steps
MAX_BYTES = 64 * 2**20    # decompressed JSON (the default's: 2.7 MB)
MAX_NODES = 10**7         # its values (the default's: 404,191)
MAX_STEPS = 10**5         # steps of one run, after the run-length expansion
# the pack as a whole (the default's: 204 runs, 61,200 steps): its runs and their steps together,
# checked before any run is expanded, so a pack of many long runs is refused, not held in memory
MAX_RUNS = 10_000
MAX_TOTAL_STEPS = 10**6
MAX_MESSAGE_BYTES = 2**50   # a message of one step: a PiB is past any model
MAX_WORKERS = 10_000        # a run's workers (atlas.projection.MAX_WORKERS)


def _finite(x, least: float, most: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and least <= x <= most  # NaN fails both


def _check_body(body: dict, n: int, where: str) -> None:
    """One run-length body of a run's steps: its byte counts finite and in [0, 1 PiB], its
    passes and received workers whole numbers for ``n`` workers; ValueError naming the key."""
    for k in ("msg_bytes", "bcast_bytes"):
        if k in body and not _finite(body[k], 0, MAX_MESSAGE_BYTES):
            raise ValueError(f"{where}: {k} = {body[k]!r}, not a byte count in [0, {MAX_MESSAGE_BYTES:.3g}]")
    for c in body.get("colls") or []:
        if not (isinstance(c, list) and len(c) == 2 and _finite(c[1], 0, MAX_MESSAGE_BYTES)):
            raise ValueError(f"{where}: colls entry {c!r} is not [kind, bytes in [0, {MAX_MESSAGE_BYTES:.3g}]]")
    for k in ("compute_s", "master_s"):
        v = body.get(k)
        vals = v if isinstance(v, list) else [] if v is None else [v]
        if not all(_finite(x, 0, 1e9) for x in vals):
            raise ValueError(f"{where}: {k} holds {v!r}, not seconds in [0, 1e9]")
    for k, most in (("passes", 10**6), ("received", n - 1), ("wait_for", n)):
        v = body.get(k)
        vals = v if isinstance(v, list) else [] if v is None else [v]
        if not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= most for x in vals):
            raise ValueError(f"{where}: {k} = {v!r}, not whole numbers in [0, {most}]")


def check_runs(runs) -> None:
    """The pack's runs as a whole before any is expanded: how many, their steps together, and
    each run's header, losses and step bodies; ValueError naming the run and the key."""
    if not isinstance(runs, list) or len(runs) > MAX_RUNS:
        raise ValueError(f"runs: {len(runs) if isinstance(runs, list) else runs!r}, not a list of at most "
                         f"{MAX_RUNS:,} runs")
    total = 0
    for i, e in enumerate(runs):
        where = f"run {i} ({str(e.get('dir', '?'))[-60:]})" if isinstance(e, dict) else f"run {i}"
        counts = [c for c, _ in e["steps"]]
        if not all(isinstance(c, int) and not isinstance(c, bool) and 0 < c <= MAX_STEPS for c in counts):
            raise ValueError(f"{where}: a step count outside 1 .. {MAX_STEPS:,}")
        steps = sum(counts)
        total += steps
        if steps > MAX_STEPS or total > MAX_TOTAL_STEPS:
            raise ValueError(f"{where}: more than {MAX_STEPS:,} steps a run or {MAX_TOTAL_STEPS:,} in the pack")
        n = e["n"]
        if not (isinstance(n, int) and 1 <= n <= MAX_WORKERS):
            raise ValueError(f"{where}: n = {n!r}, not a worker count in 1 .. {MAX_WORKERS:,}")
        if not _finite(e["flops_per_pass"], 0, 1e30) or not _finite(e["n_params"], 0, 1e15):
            raise ValueError(f"{where}: flops_per_pass or n_params is not a finite count")
        for s, v in e["curve"]:
            if not (isinstance(s, int) and 0 <= s < steps and _finite(v, 0, 1e6)):
                raise ValueError(f"{where}: val_loss {v!r} at step {s!r} (a loss is finite and >= 0, "
                                 f"at a step of the run)")
        for _, body in e["steps"]:
            _check_body(body, n, where)


def _recording(e: dict) -> Recording:
    steps = []
    val = {s: v for s, v in e["curve"]}
    for count, body in e["steps"]:
        for _ in range(int(count)):
            i = len(steps)
            steps.append({"step": i, "val_loss": val.get(i), **body})
    return Recording(technique=e["technique"], kind=e["kind"], n=int(e["n"]), seed=int(e["seed"]),
                     flops_per_pass=float(e["flops_per_pass"]), straggler=e["straggler"], network=e["network"],
                     steps=steps, n_params=int(e["n_params"]), spec=e["spec"], path=e["dir"])


def read_pack(path) -> tuple[dict, dict[str, list[Recording]]]:
    """(the pack's header: format, compute, techniques; technique job -> its recordings), after
    checking the format and the content's checksum; :class:`PackError` (one line) otherwise."""
    p = Path(path)
    hint = "make it again (snakemake atlas_query_pack; make reproduce puts it in paper/atlas/)"
    try:
        with gzip.open(p, "rb") as gz:
            raw = gz.read(MAX_BYTES + 1)  # a bounded read: a small file may unfold without end
        big = len(raw) > MAX_BYTES
        doc = None if big else loads_json_bounded(raw.decode("utf-8"), str(p), allow_nonfinite=True,
                                                  max_chars=MAX_BYTES, max_nodes=MAX_NODES)
    except YamlLimitError as e:  # nested too deep, an integer too long, not JSON: one line
        raise PackError(f"{e}; {hint}") from None
    except FileNotFoundError:
        raise PackError(f"{p}: missing; {hint}") from None
    except (OSError, EOFError, ValueError) as e:  # not gzip, cut short (gzip's CRC), not JSON
        raise PackError(f"{p}: unreadable ({type(e).__name__}: {' '.join(str(e).split())[:120]}); {hint}") from None
    if big:
        raise PackError(f"{p}: unfolds to more than {MAX_BYTES // 2**20} MiB: not an atlas query pack; {hint}")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PackError(f"{p}: not an atlas query pack; {hint}")
    if doc.get("version") != VERSION:
        raise PackError(f"{p}: pack version {doc.get('version')!r}, this code reads {VERSION}; {hint}")
    body = {k: doc.get(k) for k in ("techniques", "compute", "runs")}
    if _digest(body) != doc.get("sha256"):
        raise PackError(f"{p}: its content is not what was written (checksum differs: edited); {hint}")
    by_job: dict[str, list[Recording]] = {t: [] for t in body["techniques"]}
    try:
        check_runs(body["runs"])
        for e in body["runs"]:
            by_job.setdefault(e["job"], []).append(_recording(e))
    except (KeyError, TypeError) as e:
        raise PackError(f"{p}: a run entry lacks or misstates {e}; {hint}") from None
    except ValueError as e:  # a bound or a value out of range, named
        raise PackError(f"{p}: {e}; {hint}") from None
    return {"compute": body["compute"], "techniques": body["techniques"]}, by_job
