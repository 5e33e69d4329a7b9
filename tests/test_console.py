"""make reproduce's console (the logger plugin in src/snakemake_logger_plugin_distlab): one line
per finished job with the run's progress, the job's command at the end of its log, a failed job's
rule, log and command, and Snakemake's other messages less the scheduler's chatter."""
from __future__ import annotations

import io
import logging
from types import SimpleNamespace

from snakemake_interface_logger_plugins.common import LogEvent


def _handler(dryrun=False):
    from snakemake_logger_plugin_distlab import LogHandler

    settings = SimpleNamespace(printshellcmds=False, nocolor=True, quiet=set(), debug_dag=False, verbose=False,
                               show_failed_logs=True, stdout=False, dryrun=dryrun)
    h = LogHandler(settings, None)
    h.stream = io.StringIO()
    return h


def _record(msg, level=logging.INFO, **extra):
    r = logging.LogRecord("snakemake", level, __file__, 1, msg, None, None)
    r.__dict__.update(extra)
    return r


def test_snakemake_finds_the_plugin():
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    assert LoggerPluginRegistry().get_plugin("distlab").log_handler.__module__ == "snakemake_logger_plugin_distlab"


def test_one_line_per_finished_job_and_its_command_in_its_log(tmp_path):
    h = _handler()
    log = tmp_path / "prep.log"
    log.write_text("data set ready\n")
    cmd = "python -m distlab prepare-data --spec '{\"name\": \"digits\"}' > prep.log 2>&1"
    h.emit(_record(" Rule: prepare_data, Jobid: 3", event=LogEvent.JOB_INFO, jobid=3, rule_name="prepare_data",
                   wildcards={"dataset": "digits"}, log=str(log)))
    h.emit(_record(f"Shell command: {cmd}", event=LogEvent.SHELLCMD, shellcmd=cmd))
    for chatter in ("Select jobs to execute...", "Execute 1 jobs..."):
        h.emit(_record(chatter))
    h.emit(_record("Finished jobid: 3", event=LogEvent.JOB_FINISHED, job_id=3))
    h.emit(_record(None, event=LogEvent.PROGRESS, done=12, total=311))
    h.emit(_record("Something to know", level=logging.WARNING))
    out = h.stream.getvalue().splitlines()
    assert len(out) == 2, out
    assert out[0].startswith("[ 12/311   3%] prepare_data  dataset=digits  ") and out[0].endswith(" s")
    assert out[1] == "WARNING: Something to know"
    assert log.read_text().endswith(f"# command: {cmd}\n")
    assert "distlab prepare-data" not in h.stream.getvalue()


def test_a_failed_job_names_its_rule_log_and_command():
    h = _handler()
    h.emit(_record("", event=LogEvent.JOB_INFO, jobid=5, rule_name="pgc_train_sim", wildcards={"s": "1"},
                   log=["logs/pgc/s1.log"]))
    h.emit(_record("", event=LogEvent.SHELLCMD, shellcmd="python -m distlab train ..."))
    h.emit(_record("Error in rule", level=logging.ERROR, event=LogEvent.JOB_ERROR, jobid=5,
                   rule_name="pgc_train_sim", wildcards={"s": "1"}, log=["logs/pgc/s1.log"]))
    assert h.stream.getvalue().splitlines() == ["ERROR in rule pgc_train_sim s=1", "    log: logs/pgc/s1.log",
                                                "    command: python -m distlab train ..."]
