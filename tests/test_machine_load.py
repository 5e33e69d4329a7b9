"""A timed job alone on its cores: the threads its rule holds, the load and CPU time its run
keeps, and the mark for a run that saw a load above its cores."""

from __future__ import annotations

from types import SimpleNamespace

from distlab.runtime.machine_load import LoadWatch, exclusive_threads, own_threads, saw_load_above_cores


def test_a_run_keeps_its_load_and_cpu_time():
    watch = LoadWatch()
    sum(i * i for i in range(200_000))  # some CPU work of this process
    got = watch.summary()
    assert set(got) == {"cores", "load_start", "load_end", "load_window_min", "cpu_s", "wall_s", "cpu_per_wall",
                        "others_cpu_per_wall"}
    assert got["load_window_min"] == 1          # a run this short reads the 1-minute average
    assert got["cpu_s"] > 0 and got["load_start"] >= 0 and got["load_end"] >= 0
    assert 0 <= got["others_cpu_per_wall"] <= got["cores"] + 1


def test_other_processes_cpu_is_the_machines_busy_time_less_the_jobs_own(tmp_path, monkeypatch):
    """``others_cpu_per_wall``: /proc/stat's busy time over the run less the job's own CPU time,
    a second of the run; the busy time is user + nice + system + irq + softirq + steal."""
    from distlab.runtime import machine_load as ml

    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 9999 7 0 0 0 0 0\ncpu0 1 2 3\n")
    assert ml.machine_busy_s(str(stat)) == 150 / ml.os.sysconf("SC_CLK_TCK")
    assert ml.machine_busy_s(str(tmp_path / "none")) is None
    clock = iter([0.0, 10.0])
    busy = iter([100.0, 130.0])   # the machine: 30 CPU-seconds over the run
    own = iter([5.0, 25.0])       # the job: 20 of them
    monkeypatch.setattr(ml.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(ml, "machine_busy_s", lambda: next(busy))
    monkeypatch.setattr(ml, "_cpu_s", lambda: next(own))
    got = ml.LoadWatch().summary()
    assert got["others_cpu_per_wall"] == 1.0 and got["cpu_per_wall"] == 2.0
    assert saw_load_above_cores(got)


def test_a_run_is_marked_when_other_processes_took_cpu_not_for_its_own_processes():
    # three runnable processes of its own on 2 cores read a load of 3, alone
    alone = {"cores": 2, "load_start": 2.9, "load_end": 3.1, "others_cpu_per_wall": 0.04}
    assert not saw_load_above_cores(alone) and not saw_load_above_cores(alone, 2)
    assert saw_load_above_cores({**alone, "others_cpu_per_wall": 0.6})
    assert not saw_load_above_cores({**alone, "load_end": 9.0, "others_cpu_per_wall": 0.25})


def test_a_run_above_its_cores_is_marked():
    """A record without ``others_cpu_per_wall`` (kept before it was): the load average."""
    assert saw_load_above_cores({"load_start": 1.2, "load_end": 2.6}, 2)
    assert saw_load_above_cores({"load_start": 3.1, "load_end": 1.0}, 2)
    assert not saw_load_above_cores({"load_start": 1.9, "load_end": 2.0}, 2)  # its own 2 threads
    assert not saw_load_above_cores(None, 2)                                 # no record kept
    assert saw_load_above_cores({"cores": 2, "load_start": 2.5, "load_end": 2.0})   # the record's cores
    assert not saw_load_above_cores({"cores": 4, "load_start": 2.5, "load_end": 2.0})


def _workflow(cores, plugin="local"):
    return SimpleNamespace(cores=cores, executor_plugin=SimpleNamespace(name=plugin))


class _NoCores:
    executor_plugin = None

    @property
    def cores(self):
        raise RuntimeError("Workflow requires a total number of cores to be defined")


def test_a_timed_rule_holds_every_core_on_one_machine():
    assert exclusive_threads(_workflow(2), 1) == 2
    assert exclusive_threads(_workflow(8), 2) == 8
    assert exclusive_threads(_workflow(1), 2) == 2        # never fewer than its own threads
    assert exclusive_threads(_workflow(64, "slurm"), 2) == 2  # a cluster job: its own node slice
    assert exclusive_threads(_NoCores(), 2) == 2          # no --cores (a lint): its threads


def test_a_timed_job_runs_its_own_threads_at_most_cores():
    assert own_threads(_workflow(8), 2) == 2
    assert own_threads(_workflow(1), 2) == 1              # as Snakemake scales threads down
    assert own_threads(_workflow(64, "slurm"), 2) == 2
    assert own_threads(_NoCores(), 2) == 2


def test_a_p3_run_keeps_its_load_in_its_manifest(tmp_path):
    import json

    from distlab.data import prepare_dataset
    from distlab.local import workflow
    from distlab.local.train import run_simulated
    from test_local_workflow import tiny_section

    data = tmp_path / "pydoc"
    prepare_dataset({"name": "pydoc", "kind": "text", "source": "pydoc_topics",
                     "val_fraction": 0.05, "test_fraction": 0.05}, data, seed=0)
    run_simulated(workflow.spec(tiny_section(), "rc", "bp", 0), data, tmp_path / "run", {"timeout_s": 60})
    load = json.loads((tmp_path / "run/manifest.json").read_text())["load"]
    assert load["cpu_s"] > 0 and load["load_window_min"] in (1, 5, 15) and load["others_cpu_per_wall"] >= 0
    assert saw_load_above_cores(load) is (load["others_cpu_per_wall"] > 0.25)
