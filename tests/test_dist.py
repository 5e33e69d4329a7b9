"""The real backend under both launchers (forked ranks, torchrun): gloo jobs of
2-5 processes on this machine.

Each job runs a script of tests/dist_scripts that writes its findings to a
JSON file; the tests assert on it, on the job's exit and duration, and that
no process of the job is left behind.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

from distlab.runtime.launch import run_forked, run_torchrun, torchrun_command

SCRIPTS = Path(__file__).parent / "dist_scripts"
GATHER_TIMEOUT_S = 3.0


def _script(path: Path, argv: list[str]):
    """A forked rank's target: run ``path`` as __main__ with ``argv``."""
    def run() -> None:
        import runpy

        sys.argv = [str(path), *argv]
        runpy.run_path(str(path), run_name="__main__")
    return run


def _launch(tmp_path: Path, script: str, nprocs: int, *args: str, timeout_s: float = 60,
            launcher: str = "fork") -> tuple[float, Path]:
    """Run the script on ``nprocs`` ranks; return (wall seconds, its JSON path)."""
    out = tmp_path / "out.json"
    t0 = time.perf_counter()
    with (tmp_path / "job.log").open("w") as log:
        if launcher == "torchrun":
            run_torchrun([str(out), *args], nprocs, threads=2, timeout_s=timeout_s,
                         script=SCRIPTS / script, stream=log)
        else:
            run_forked(_script(SCRIPTS / script, [str(out), *args]), nprocs, threads=2,
                       timeout_s=timeout_s, stream=log)
    return time.perf_counter() - t0, out


def _leftovers(marker: Path, pids: Sequence[int] = ()) -> list[psutil.Process]:
    """Live processes whose command line mentions ``marker`` or whose pid is listed."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if p.info["pid"] in pids or any(str(marker) in a for a in p.info["cmdline"] or ()):
            found.append(p)
    return found


def test_torchrun_command_shape():
    assert torchrun_command(["train", "--x"], 3, threads=4) == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
        "--nproc_per_node=3", "-m", "distlab", "train", "--x"]
    cmd = torchrun_command(["a"], 2, None, script="s.py")
    assert cmd[-2:] == ["s.py", "a"] and "-m" not in cmd[3:]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["fork", "torchrun"])
def test_spmd_collectives(tmp_path, launcher):
    _, out = _launch(tmp_path, "spmd_check.py", 4, launcher=launcher)
    report = json.loads(out.read_text())
    n = report["world_size"]
    assert n == 4
    for r in report["ranks"]:
        assert r["mean_exact"], r
        assert r["all_reduce_bytes"] == 2 * (n - 1) / n * r["buffer_bytes"]
        assert r["gathered"] == [0, 10, 20, 30]
        assert r["diff_before"] > 0 and r["diff_after"] == 0.0
    assert not _leftovers(tmp_path, [r["pid"] for r in report["ranks"]])


@pytest.mark.slow
def test_master_worker_quorum_survives_dead_and_late_workers(tmp_path):
    # 4 workers, worker 3 dead, worker 2 slow at step 1; each step waits for 2.
    _, out = _launch(tmp_path, "master_worker_check.py", 5, "2", str(GATHER_TIMEOUT_S))
    report = json.loads(out.read_text())
    assert report["error"] is None
    assert len(report["steps"]) == 5
    for step, arrivals in enumerate(report["steps"], start=1):
        assert len(arrivals) == 2
        assert all(a["step"] == step and a["payload_ok"] for a in arrivals), arrivals
        assert all(a["meta"] == [step, 100 + a["worker"], 0, 0] for a in arrivals)
        assert 3 not in {a["worker"] for a in arrivals}
    assert report["late_messages"] >= 1  # worker 2's step-1 message, discarded
    assert report["unacknowledged"] == []  # every worker, the dead one too, got the stop
    # the dead worker was stopped: the job ended and said so (its cause, not a wall clock, decides)
    assert not _leftovers(tmp_path, report["pids"])


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["fork", "torchrun"])
def test_master_worker_waiting_for_all_names_the_dead_worker(tmp_path, launcher):
    with pytest.raises(RuntimeError, match="rank 0 failed first .*exit code 1"):
        _launch(tmp_path, "master_worker_check.py", 5, "4", str(GATHER_TIMEOUT_S), launcher=launcher)
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["error"].startswith("step 1: waited 3.0 s, got 3 of 4 workers; worker 3 never answered")
    assert GATHER_TIMEOUT_S <= report["elapsed_s"]  # it waited its timeout (a loaded machine only adds)
    assert "StragglerTimeout" in (tmp_path / "job.log").read_text()
    assert not _leftovers(tmp_path, report["pids"])


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["fork", "torchrun"])
def test_a_job_past_its_timeout_is_killed_whole(tmp_path, launcher):
    # Waits for all 4 workers with a 60 s gather timeout: only the wall-clock limit ends it.
    pids_before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(RuntimeError, match="ran past 8 s and was killed"):
        _launch(tmp_path, "master_worker_check.py", 5, "4", "60", timeout_s=8, launcher=launcher)
    assert not _leftovers(tmp_path)
    left = [p for p in psutil.Process().children(recursive=True)
            if p.pid not in pids_before and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, left


def test_a_forked_rank_that_raises_is_named_first_and_its_peers_are_stopped(tmp_path):
    """A rank's exception ends the job: the rank and its error come first, a peer
    blocked forever is stopped, and each rank's output carries its prefix."""
    marker = tmp_path / "started"

    def target() -> None:
        import os

        rank = int(os.environ["RANK"])
        print(f"hello from {rank} of {os.environ['WORLD_SIZE']}", flush=True)
        (tmp_path / f"pid{rank}").write_text(str(os.getpid()))
        if rank == 1:
            while not marker.exists():
                time.sleep(0.01)
            raise ValueError("rank one gives up")
        marker.touch()
        time.sleep(600)  # only the launcher can end this rank

    log = tmp_path / "job.log"
    with log.open("w") as f, pytest.raises(RuntimeError) as err:
        run_forked(target, 3, threads=2, timeout_s=600, stream=f)  # the failure, not this limit, ends it
    lines = str(err.value).splitlines()
    assert lines[0] == "rank 1 failed first (exit code 1)"
    assert lines[1] == "rank 1: ValueError: rank one gives up"
    text = log.read_text()
    for r in range(3):
        assert f"[rank{r}]: hello from {r} of 3" in text
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(3)]
    assert not _leftovers(tmp_path, pids)


def test_a_forked_rank_killed_by_a_signal_is_named():
    import os
    import signal

    def target() -> None:
        if os.environ["RANK"] == "2":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)

    with pytest.raises(RuntimeError, match=r"^rank 2 failed first \(signal 9 \(SIGKILL\)\)"):
        run_forked(target, 3, threads=2, timeout_s=120)


@pytest.mark.slow
def test_shutdown_with_a_worker_busy_past_the_grace_still_ends_cleanly(tmp_path):
    _, out = _launch(tmp_path, "busy_worker_stop.py", 2)  # raises unless every rank exits 0
    report = json.loads(out.read_text())
    assert report["steps"] == [0]
    assert report["unacknowledged"] == [0]
    assert 1.0 <= report["shutdown_s"] < 2.0
