"""distlab.runtime.entry: the dispatcher hands its command line down to the runtime (which
forks ranks that run it in-process) instead of the runtime importing the dispatcher."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

ENV = {"PYTHONPATH": f"{ROOT}/src", "PATH": "/usr/bin:/bin"}


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=ENV)


def test_without_the_dispatcher_the_runtime_has_no_entry_and_says_so():
    r = _py("from distlab.runtime import entry\n"
            "assert not entry.registered()\n"
            "entry.preload(['train'])\n")
    assert r.returncode == 1
    assert "RuntimeError: no distlab command line is registered in this process: import distlab.cli" in r.stderr


def test_the_dispatcher_registers_its_main_when_imported():
    r = _py("import sys\n"
            "import distlab.cli\n"
            "from distlab.runtime import entry\n"
            "assert entry.registered()\n"
            "sys.exit(entry.main(['check-config', '--no-such-option']))\n")
    assert r.returncode == 2, r.stderr  # the CLI's own usage error: the dispatcher's main ran
    # the CLI's one-line usage error (no usage block), naming the verb: the dispatcher's main ran
    assert r.stderr.startswith("distlab: check-config: ") and r.stderr.count("\n") == 1, r.stderr
