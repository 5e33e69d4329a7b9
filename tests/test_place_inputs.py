"""`distlab place` under the error contract: every mistake a user can make with the
command (a factory that raises, exits, loops or returns no module, a wrong or absurd input
shape, an unknown method, a negative budget, an empty pair) is one line on stderr and exit
status 2; the user's factory and forward pass run under --timeout-s."""

from __future__ import annotations

import json
import re

import pytest

from distlab.cli import main

MODELS = '''
import sys
import torch


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Spins(torch.nn.Module):
    def forward(self, x):
        while True:
            pass


def ok():
    return Small()


def raises():
    raise RuntimeError("no weights here")


def forty_two():
    return 42


def exits():
    sys.exit(0)


def loops():
    while True:
        pass


def spins():
    return Spins()
'''


@pytest.fixture()
def models(tmp_path):
    (tmp_path / "models.py").write_text(MODELS)
    return tmp_path / "models.py"


def _place(capfd, tmp_path, models, factory="ok", *extra):
    argv = ["place", "--model", f"{models}:{factory}", "--out", str(tmp_path / "placement.json"),
            "--repeats", "1", *extra]
    if "--input-shape" not in extra:
        argv += ["--input-shape", "2,4"]
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's usage errors exit from inside parse_args
        rc = e.code
    out = capfd.readouterr()
    return rc, out.err


def _one_line(rc, err, *needles):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("distlab: ") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_the_method_list_is_the_help_list_and_names_hsdag_corrected(capfd, tmp_path, models):
    from distlab.placement import api

    with pytest.raises(SystemExit):
        main(["place", "--help"])
    helptext = " ".join(capfd.readouterr().out.split())
    listed = re.search(r"--method METHOD one of ([a-z_, ]+) \(default heft\)", helptext).group(1).split(", ")
    assert tuple(listed) == api.METHODS and "hsdag_corrected" in listed
    assert "(default 300;" in helptext  # the timeout's default is stated
    line = _one_line(*_place(capfd, tmp_path, models, "ok", "--method", "magic"), "magic")
    assert all(m in line for m in api.METHODS)


@pytest.mark.parametrize("factory, needle", [
    ("raises", "the factory failed at"),
    ("forty_two", "returned a int, not a torch.nn.Module"),
    ("exits", "called sys.exit(0)"),
])
def test_a_factory_that_fails_exits_or_returns_no_module_is_one_line(capfd, tmp_path, models, factory, needle):
    line = _one_line(*_place(capfd, tmp_path, models, factory), needle)
    if factory == "raises":
        assert "models.py:" in line and "RuntimeError: no weights here" in line
    assert not (tmp_path / "placement.json").exists()


@pytest.mark.parametrize("factory", ["loops", "spins"])
def test_an_endless_factory_or_forward_is_stopped_by_the_timeout(capfd, tmp_path, models, factory):
    _one_line(*_place(capfd, tmp_path, models, factory, "--timeout-s", "1"), "ran past 1 s and was stopped")


@pytest.mark.parametrize("extra, needle", [
    (("--input-shape", "2,x"), "--input-shape: '2,x' is not a shape"),
    (("--input-shape", "100000000000,4"), "over the limit of 2 GiB"),
    (("--input-shape", "2,0"), "at least 1"),
    (("--input-shape", "2,5"), "forward on inputs of shape 2x5"),
    (("--input-dtype", "magic"), "not a torch dtype"),
    (("--budget", "-5", "--method", "random"), "--budget"),
    (("--pair", '{"devices":[]}'), "--pair: (top level): 'link' is a required property"),
    (("--pair", '{"devices": [], "link": {"gbps": 1, "latency_us": 1}}'), "--pair: devices: [] is too short"),
    (("--pair", '{"devices": 3'), "--pair"),
    (("--timeout-s", "-1"), "--timeout-s"),
])
def test_bad_inputs_are_one_line_and_exit_2(capfd, tmp_path, models, extra, needle):
    _one_line(*_place(capfd, tmp_path, models, "ok", *extra), needle)


def test_a_pair_that_breaks_a_placement_rule_is_one_line(capfd, tmp_path, models):
    pair = {"devices": [{"name": "gpu", "kind": "roofline", "peak_gflops": 1.0, "mem_gbps": 1.0},
                        {"name": "cpu", "kind": "profiled"}], "link": {"gbps": 1.0, "latency_us": 1.0}}
    _one_line(*_place(capfd, tmp_path, models, "ok", "--pair", json.dumps(pair)), "devices[0]")


def test_the_api_refuses_the_same_values(models):
    import torch

    from distlab.placement import api

    with pytest.raises(api.ModelError, match="--method"):
        api.place(torch.nn.Linear(4, 3), (torch.zeros(2, 4),), method="magic")
    with pytest.raises(api.ModelError, match="--budget"):
        api.place(torch.nn.Linear(4, 3), (torch.zeros(2, 4),), method="random", budget=-5)
    with pytest.raises(api.ModelError, match="--pair"):
        api.place(torch.nn.Linear(4, 3), (torch.zeros(2, 4),), pair={"devices": []})


def test_a_good_model_still_places(capfd, tmp_path, models):
    rc, err = _place(capfd, tmp_path, models, "ok")
    assert rc == 0, err
    assert json.loads((tmp_path / "placement.json").read_text())["method"] == "heft"
