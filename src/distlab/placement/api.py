"""Place a user's own model: any ``nn.Module`` that ``torch.fx`` can trace.

    from distlab.placement.api import place
    placed = place(model, (x,), method="heft")        # or "random", "hsdag_corrected", ...
    placed.placement                                  # {fx node name: device name}
    placed.save("placement.json")
    y = placed.module(x)                              # runs each operator on its torch device

or from the command line::

    python -m distlab place --model package.module:factory --input-shape 1,3,224,224 \\
        --method heft --out placement.json

Steps: trace (``graphs.extract_module``; weights are not nodes), profile every operator on
this CPU (one thread, median of interleaved rounds), build the device pair of the config
(device 0 profiled, the others *modelled* rooflines), search, and return the placement as a
name -> device mapping with a module that runs it.  The placed module is a
``torch.fx.GraphModule`` interpreted node by node: each operator runs on the torch device of
its placed device (``torch_devices``: the host is ``cpu``; a second device is ``cuda`` when a
GPU is there, else ``cpu``), its inputs moved there first, each module's weights copied to
every device that runs it, and the outputs moved back to the host.
"""

from __future__ import annotations

import copy
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import fx

from . import costs, graphs
from .problem import Problem

SEARCHED = ("random", "rnn", "placeto", "hsdag", "hsdag_corrected")


def default_pair() -> dict[str, Any]:
    """The default config's paper-like pair (CPU + a modelled integrated GPU)."""
    from distlab.config.yamlio import load_yaml_strict as load_yaml

    root = Path(__file__).resolve().parents[3]
    cfg = load_yaml(root / "config" / "config.yaml")["placement"]
    return cfg["pairs"][cfg["default_pair"]]


def torch_devices(pair: dict[str, Any], cuda_available: bool | None = None) -> list[str]:
    """The torch device that runs each device of a pair: the host on ``cpu``; any other
    device on ``cuda:<i>`` when GPUs are there (one each, wrapping around), else on ``cpu``."""
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    n_gpu = torch.cuda.device_count() if cuda_available else 0
    out = []
    for i, _ in enumerate(pair["devices"]):
        out.append("cpu" if i == 0 or not cuda_available or n_gpu == 0 else f"cuda:{(i - 1) % n_gpu}")
    return out


class PlacedModule(torch.nn.Module):
    """A traced module that runs every operator on its placed torch device."""

    def __init__(self, gm: fx.GraphModule, node_device: dict[str, str], host: str = "cpu"):
        super().__init__()
        self.gm, self.node_device, self.host = gm, dict(node_device), host
        self._mods: dict[tuple[str, str], torch.nn.Module] = {}
        for node in gm.graph.nodes:
            if node.op == "call_module":
                dev = node_device[node.name]
                key = (node.target, dev)
                if key not in self._mods:
                    self._mods[key] = copy.deepcopy(gm.get_submodule(node.target)).to(dev)

    def forward(self, *inputs):
        env: dict[str, Any] = {}
        it = iter(inputs)

        def on(x, dev):
            return x.to(dev) if isinstance(x, torch.Tensor) else x

        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                env[node.name] = next(it)
                continue
            if node.op == "get_attr":
                env[node.name] = graphs._fetch_attr(self.gm, node.target)
                continue
            if node.op == "output":
                out = fx.node.map_arg(node.args[0], lambda n: env[n.name])
                return torch.utils._pytree.tree_map(lambda x: on(x, self.host), out)
            dev = self.node_device[node.name]
            args = torch.utils._pytree.tree_map(lambda x: on(x, dev),
                                                fx.node.map_arg(node.args, lambda n: env[n.name]))
            kwargs = torch.utils._pytree.tree_map(lambda x: on(x, dev),
                                                  fx.node.map_arg(node.kwargs, lambda n: env[n.name]))
            if node.op == "call_module":
                env[node.name] = self._mods[(node.target, dev)](*args, **kwargs)
            else:
                env[node.name] = graphs.node_callable(self.gm, node)(*args, **kwargs)
        raise RuntimeError("the traced graph has no output")


@dataclass
class Placed:
    placement: dict[str, str]          # fx node name -> device name of the pair
    module: PlacedModule
    latency_s: float                   # simulated latency of the placement
    method: str
    pair: dict[str, Any]
    torch_devices: dict[str, str]      # device name -> torch device
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"placement": self.placement, "simulated_latency_s": self.latency_s, "method": self.method,
                "clock": "simulated", "devices": [d["name"] for d in self.pair["devices"]],
                "modelled": [d["name"] for d in self.pair["devices"] if d.get("kind") == "roofline"],
                "torch_devices": self.torch_devices, **self.info}

    def save(self, path: str | Path) -> Path:
        from distlab.results.tables import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_json(), indent=1))
        return Path(path)


def place(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], method: str = "heft",
          pair: dict[str, Any] | None = None, budget: int = 200, seed: int = 0,
          options: dict[str, Any] | None = None, repeats: int = 5, order: str = "rank",
          cuda_available: bool | None = None) -> Placed:
    """Place ``model`` (evaluated on ``example_inputs``) on a device pair with ``method``
    (``cpu_only``, ``gpu_only``, ``heft`` or a searched method with ``budget`` simulator
    evaluations; a learner takes ``options``, defaulting to the config's)."""
    model = model.eval()
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    pair = pair or default_pair()
    gm = trace(model)
    with torch.no_grad():
        graph = graphs.extract_module(gm, example_inputs, {"name": type(model).__name__})
        prof = costs.profile_module(gm, example_inputs, repeats=repeats, warmup=1)
    det = method in ("cpu_only", "gpu_only", "heft")
    problem = Problem.build(graph, pair, np.asarray(prof["seconds"]), 1 if det else budget, order=order)
    spec = {"algo": "hsdag" if method.startswith("hsdag") else method, "options": _options(method, options),
            "pair_name": "user", "model_name": graph["model"]["name"], "method": method}
    from .train import run_seed

    row = run_seed(problem, spec, seed)
    names = [n["name"] for n in graph["nodes"]]
    dev_names = [d["name"] for d in pair["devices"]]
    placement = {nm: dev_names[int(d)] for nm, d in zip(names, row["placement"])}
    tdev = torch_devices(pair, cuda_available)
    node_device = {nm: tdev[int(d)] for nm, d in zip(names, row["placement"])}
    return Placed(placement, PlacedModule(gm, node_device, tdev[0]), row["latency_s"], method, pair,
                  dict(zip(dev_names, tdev)), {"evaluations": row["evaluations"], "n_nodes": graph["n_nodes"]})


def _options(method: str, options: dict[str, Any] | None) -> dict[str, Any]:
    if options is not None or method not in ("rnn", "placeto", "hsdag", "hsdag_corrected"):
        return dict(options or {})
    from distlab.config.yamlio import load_yaml_strict as load_yaml

    root = Path(__file__).resolve().parents[3]
    return dict(load_yaml(root / "config" / "config.yaml")["placement"][method])


class ModelError(ValueError):
    """The user's model cannot be loaded or traced; the message is one line saying what to do."""


def load_factory(ref: str):
    """``path/to/file.py:factory`` or ``package.module:factory`` -> the callable (it returns
    the ``nn.Module``).  A file is imported as a script would be: its folder first on
    ``sys.path``, so it may import the modules beside it."""
    import importlib.util
    import sys

    mod, sep, name = ref.rpartition(":")
    if not sep or not mod or not name:
        raise ModelError(f"--model: {ref!r} names no factory; write path/to/file.py:factory "
                         f"or package.module:factory")
    try:
        if mod.endswith(".py") or "/" in mod or "\\" in mod:
            path = Path(mod).expanduser().resolve()
            if not path.is_file():
                raise ModelError(f"--model: no file {mod} (from {Path.cwd()}); write the path of a .py "
                                 f"file that defines {name}")
            folder = str(path.parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            unique = f"distlab_user_model_{abs(hash(str(path)))}"
            spec = importlib.util.spec_from_file_location(unique, path)
            obj = importlib.util.module_from_spec(spec)
            sys.modules[unique] = obj
            spec.loader.exec_module(obj)
        else:
            obj = importlib.import_module(mod)
    except ModelError:
        raise
    except ModuleNotFoundError as e:
        hint = ("write path/to/file.py:factory for a file, or put its package on PYTHONPATH"
                if e.name == mod.split(".")[0] else "install the module it imports")
        raise ModelError(f"--model: importing {mod} failed: {e}; {hint}") from None
    except Exception as e:  # noqa: BLE001 - the user's module: one line, its error named
        raise ModelError(f"--model: importing {mod} failed at {_where(e)}: "
                         f"{type(e).__name__}: {_first_line(e)}") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ModelError(f"--model: {mod} has no {name!r}; write {mod}:NAME with NAME a function "
                             f"(or class) there that returns the nn.Module")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ModelError(f"--model: {mod}:{name} is a {type(obj).__name__}, not a function that returns "
                         f"the nn.Module")
    return obj


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _where(e: BaseException) -> str:
    """file:line of the innermost frame outside torch and distlab (the user's code)."""
    import traceback

    frames = traceback.extract_tb(e.__traceback__)
    skip = (str(Path(torch.__file__).parent), str(Path(__file__).resolve().parents[1]))
    mine = [f for f in frames if not f.filename.startswith(skip) and "importlib" not in f.filename]
    f = (mine or frames or [None])[-1]
    return f"{f.filename}:{f.lineno}" if f is not None else "(unknown)"


def trace(model: torch.nn.Module) -> fx.GraphModule:
    """``graphs.trace``, with a failure as one :class:`ModelError` line: what torch.fx could
    not trace, where in the model's code, and what to do."""
    try:
        return graphs.trace(model)
    except Exception as e:  # noqa: BLE001 - TraceError, and the TypeErrors/AttributeErrors proxies raise
        raise ModelError(
            f"torch.fx cannot trace {type(model).__name__} (at {_where(e)}: {type(e).__name__}: "
            f"{_first_line(e)}); place a model whose forward has no Python control flow on tensor "
            f"values (if/while on a tensor, len() of one), e.g. move that part into a function "
            f"decorated with torch.fx.wrap, or pass a traceable submodule") from None


def example_inputs(shapes: list[str], dtypes: list[str] | None = None, high: int = 2) -> tuple[torch.Tensor, ...]:
    """Random example inputs from ``1,3,224,224``-style shapes (integer dtypes draw from [0, high))."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i, s in enumerate(shapes):
        shape = tuple(int(x) for x in s.split(","))
        dt = getattr(torch, (dtypes or [])[i] if dtypes and i < len(dtypes) else "float32")
        out.append(torch.randint(0, high, shape, generator=g, dtype=dt) if not dt.is_floating_point
                   else torch.randn(shape, generator=g, dtype=dt))
    return tuple(out)
