"""The README's snakemake command lines: targets before --configfile, and the report
command named as it must be after a partial run."""

from __future__ import annotations

import re
import shlex

from conftest import ROOT

README = (ROOT / "README.md").read_text()


def _commands():
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("snakemake"):
                yield shlex.split(line)


def test_targets_come_before_configfile_in_every_readme_command():
    seen = 0
    for argv in _commands():
        if "--configfile" not in argv:
            continue
        seen += 1
        after = argv[argv.index("--configfile") + 2:]
        # after --configfile FILE only options (and their values) may follow, never a target
        i = 0
        while i < len(after):
            assert after[i].startswith("-"), (argv, after[i])
            i += 1 if "=" in after[i] or after[i] in ("-n", "-p") else 2
    assert seen >= 2
    assert "Targets come before `--configfile`" in README


def test_the_readme_names_a_target_for_the_report():
    reports = [a for a in _commands() if "--report" in a]
    assert reports and all(any(not t.startswith("-") and not t.endswith(".html") for t in a[1:]) for a in reports)
    assert "manifest.json" in README and "key `spec`" in README
