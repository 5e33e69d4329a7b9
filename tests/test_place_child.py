"""`distlab place` runs the user's file in a watched child from its first import: a loop at the
file's top level, a factory that swallows the timeout (catching BaseException), os._exit and
a kill by signal are each one line and exit 2, nothing left running and no file written; a
forward that returns no tensor and a complex model are one line too."""

from __future__ import annotations

import re

import pytest

from distlab.cli import main

HEAD = '''
import os
import time
import torch


class Small(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3, dtype=dtype)

    def forward(self, x):
        return torch.relu(self.fc(x.to(self.fc.weight.dtype)))


class Nothing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        self.fc(x)
        return None


def stubborn():
    while True:
        try:
            time.sleep(0.05)
        except BaseException:
            pass


def leaves():
    os._exit(0)


def killed():
    os.kill(os.getpid(), 9)


def nothing():
    return Nothing()


def complex128():
    return Small(torch.complex128)
'''


def _place(capfd, tmp_path, text: str, factory: str, timeout: str = "1"):
    f = tmp_path / "models.py"
    f.write_text(text)
    out = tmp_path / "placement.json"
    rc = main(["place", "--model", f"{f}:{factory}", "--out", str(out), "--repeats", "1",
               "--input-shape", "2,4", "--timeout-s", timeout])
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("distlab: ") and "Traceback" not in err, err
    assert not out.exists()
    return lines[0]


def test_a_loop_at_the_files_top_level_is_stopped_by_the_timeout(capfd, tmp_path):
    line = _place(capfd, tmp_path, "while True:\n    pass\n", "f")
    assert "importing" in line and "ran past 1 s" in line and "top level" in line


def test_a_loop_at_the_top_level_that_swallows_the_timeout_is_killed(capfd, tmp_path):
    text = "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except BaseException:\n        pass\n"
    assert "did not stop when told to" in _place(capfd, tmp_path, text, "f")


@pytest.mark.parametrize("factory,words", [
    ("stubborn", "did not stop when told to"),
    ("leaves", "ended the process (exit status 0, os._exit?)"),
    ("killed", "ended the process (signal 9)"),
    ("nothing", "forward returned None; it must return a tensor"),
    ("complex128", "holds torch.complex128 tensors"),
])
def test_a_factory_that_escapes_or_a_model_that_cannot_be_placed_is_one_line(capfd, tmp_path, factory, words):
    # only the endless factory meets its timeout; the others get time a loaded machine cannot run out of
    assert words in _place(capfd, tmp_path, HEAD, factory, "1" if factory == "stubborn" else "60")


@pytest.mark.parametrize("key", ["link.gbps", "devices.1.peak_gflops"])
def test_an_infinite_or_nan_rate_in_the_pair_is_one_line(key):
    import copy

    from distlab.placement import api

    pair = copy.deepcopy(api.default_pair())
    node = pair
    *head, last = key.split(".")
    for k in head:
        node = node[int(k)] if k.isdigit() else node[k]
    if last not in node:
        pytest.skip(f"the default pair has no {key}")
    node[last] = float("inf")
    with pytest.raises(api.ModelError, match=rf"--pair: {re.escape(key)}: inf is not a finite number"):
        api.check_pair(pair)
