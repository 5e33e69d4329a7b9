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
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import fx

from . import costs, graphs
from .problem import Problem

SEARCHED = ("random", "rnn", "placeto", "hsdag", "hsdag_corrected")
METHODS = ("cpu_only", "gpu_only", "heft", *SEARCHED)   # --method's choices and --help's list
DEFAULT_TIMEOUT_S = 300.0     # the user's factory, and each pass of its forward, at most this long
MAX_INPUT_BYTES = 2 * 2**30   # an example input's size: a batch of 1e11 is refused, not allocated
MAX_BUDGET = 1_000_000        # simulator evaluations of one search


class _UserCodeTimeout(BaseException):
    """The user's code ran past its time (a BaseException: its own ``except Exception`` does not
    swallow it)."""


# Where ``place`` runs the user's code in a child process (:func:`run_in_child`): the pipe on
# which each stretch of user code announces its time limit to the watching parent, which kills
# the child past it (a file or factory that catches BaseException outlives the child's own alarm).
_WATCH = None


class _UserPhase:
    """A stretch of the user's code under ``timeout_s`` (SIGALRM in the main thread, and the
    watching parent's deadline when there is one); ``expired`` says whether the alarm fired."""

    def __init__(self, timeout_s: float | None) -> None:
        import threading

        self.timeout_s = timeout_s
        self.timed = bool(timeout_s) and timeout_s > 0 and threading.current_thread() is threading.main_thread()

    def __enter__(self):
        import signal

        if _WATCH is not None:
            _WATCH.send(("enter", self.timeout_s))
        if self.timed:
            def on_alarm(signum, frame):  # noqa: ARG001
                raise _UserCodeTimeout()

            self.old = signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, float(self.timeout_s))
        return self

    def __exit__(self, *exc) -> bool:
        import signal

        if self.timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)
        if _WATCH is not None:
            _WATCH.send(("leave", None))
        return False


def run_user_code(fn, what: str, timeout_s: float | None = DEFAULT_TIMEOUT_S):
    """``fn()``, the user's code, within ``timeout_s`` wall seconds (SIGALRM, main thread only);
    its exception, a ``sys.exit`` or running past the time is one :class:`ModelError` line naming
    ``what`` and where in the user's code it happened."""
    try:
        with _UserPhase(timeout_s):
            return fn()
    except _UserCodeTimeout:
        raise ModelError(f"{what} ran past {timeout_s:g} s and was stopped (--timeout-s; an endless "
                         f"loop?)") from None
    except SystemExit as e:
        raise ModelError(f"{what} called sys.exit({e.code!r}) at {_where(e)}; it must return, "
                         f"not exit") from None
    except ModelError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: one line, its error named
        raise ModelError(f"{what} failed at {_where(e)}: {type(e).__name__}: {_first_line(e)}") from None


def _watch(parent_end, proc, what: str) -> int | str:
    """The child's exit status from its ``("done", rc)`` message, or the one line of what went
    wrong: a stretch of user code past its time plus a grace (the child is killed), or the child
    ending without a word (``os._exit``, a signal, an exit status of its own)."""
    import time

    deadline, limit, rc = None, None, None
    while rc is None:
        wait = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
        try:
            if parent_end.poll(wait):
                kind, value = parent_end.recv()
                if kind == "enter":
                    limit = value
                    deadline = None if not value else time.monotonic() + value + max(5.0, 0.2 * value)
                elif kind == "leave":
                    deadline = None
                else:
                    rc = int(value)
                continue
        except (EOFError, OSError):  # the child closed its end: it has ended
            break
        if deadline is not None and time.monotonic() > deadline:
            proc.kill()
            proc.join()
            return (f"{what}: the model's code ran past {limit:g} s and did not stop when told to (does it "
                    f"catch BaseException?); it was killed (--timeout-s)")
        if not proc.is_alive():
            break
    proc.join()
    if rc is not None:
        return rc
    code = proc.exitcode
    how = f"signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    return (f"{what}: the model's code ended the process ({how}{', os._exit?' if code == 0 else ''}) before "
            f"place finished; the file and factory must return, not exit")


def run_in_child(body, what: str) -> int:
    """``body()`` (the whole of ``place``: the import of the user's file, its factory, tracing,
    profiling, the forwards; it prints its own lines and returns the exit status) in a forked
    child that this process watches: each stretch of user code announces its time limit
    (:class:`_UserPhase`) and is killed past it, and the child's exit is checked (it must say
    it finished).  Ctrl-C stops the child; every failure is one line on stderr, exit 2 (130 on
    Ctrl-C)."""
    import multiprocessing as mp
    import signal
    import sys

    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)

    def target() -> None:
        global _WATCH
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
        parent_end.close()
        _WATCH = child_end
        try:
            rc = body()
        except Exception as e:  # noqa: BLE001 - outside the user's code: still one line
            print(f"distlab: {what}: place failed: {type(e).__name__}: {_first_line(e)}", file=sys.stderr)
            rc = 2
        sys.stdout.flush()
        sys.stderr.flush()
        child_end.send(("done", rc))

    proc = ctx.Process(target=target, daemon=True)
    proc.start()
    child_end.close()
    try:
        out = _watch(parent_end, proc, what)
    except KeyboardInterrupt:
        proc.kill()
        proc.join()
        print(f"distlab: {what}: interrupted (Ctrl-C); nothing written", file=sys.stderr)
        return 130
    if isinstance(out, str):
        print(f"distlab: {out}", file=sys.stderr)
        return 2
    return out


def build_model(factory, ref: str, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> torch.nn.Module:
    """The factory's model, called under :func:`run_user_code`; anything but an ``nn.Module``
    (None, 42, a tuple) is a :class:`ModelError`."""
    model = run_user_code(factory, f"--model {ref}: the factory", timeout_s)
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"--model {ref}: the factory returned a {type(model).__name__}, not a "
                         f"torch.nn.Module; return the model itself")
    odd = sorted({str(t.dtype) for t in [*model.parameters(), *model.buffers()] if t.is_complex()})
    if odd:
        raise ModelError(f"--model {ref}: the model holds {', '.join(odd)} tensors; placement profiles and runs "
                         f"real floating-point models (convert it, e.g. model.float())")
    return model


def check_pair(pair: Any) -> dict[str, Any]:
    """``pair`` as the config's ``placement.pairs`` entries must be (its schema and the
    placement checks); a :class:`ModelError` line naming the first problem otherwise."""
    import jsonschema
    import yaml

    from . import spec as pspec

    root = Path(__file__).resolve().parents[3]
    schema = yaml.safe_load((root / "workflow" / "schemas" / "placement.schema.yaml").read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator({"definitions": schema["definitions"],
                                            "$ref": "#/definitions/pair"})
    errs = sorted(validator.iter_errors(pair), key=lambda e: list(map(str, e.absolute_path)))
    if errs:
        e = errs[0]
        where = ".".join(map(str, e.absolute_path)) or "(top level)"
        raise ModelError(f"--pair: {where}: {' '.join(e.message.split())[:200]} (a pair is "
                         f'{{"devices": [2 to 8 devices], "link": {{"gbps", "latency_us"}}}}, '
                         f"as config/config.yaml's placement.pairs)")
    bad = _non_finite(pair)
    if bad:
        raise ModelError(f"--pair: {bad[0]}: {bad[1]!r} is not a finite number (an infinite or NaN link or "
                         f"device rate prices nothing); give its value")
    rules = [e for e in pspec.check({"placement": {"pairs": {"user": pair}, "default_pair": "user"}})
             if e.startswith("placement.pairs.user")]
    if rules:
        raise ModelError("--pair: " + rules[0].replace("placement.pairs.user.", ""))
    return pair


def _non_finite(x: Any, where: str = "") -> tuple[str, float] | None:
    """The first number in ``x`` that is infinite or NaN, with its dotted key."""
    if isinstance(x, float) and not math.isfinite(x):
        return where or "(top level)", x
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        found = _non_finite(v, f"{where}.{k}" if where else str(k))
        if found:
            return found
    return None


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
          cuda_available: bool | None = None, timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Placed:
    """Place ``model`` (evaluated on ``example_inputs``) on a device pair with ``method``
    (``cpu_only``, ``gpu_only``, ``heft`` or a searched method with ``budget`` simulator
    evaluations; a learner takes ``options``, defaulting to the config's).  The model's forward
    runs under ``timeout_s`` (each pass; profiling's rounds together get ``repeats + 1`` times it);
    a bad method, budget or pair, or a forward that fails, is one :class:`ModelError` line."""
    if method not in METHODS:
        raise ModelError(f"--method: {method!r} is not a method; choose one of {', '.join(METHODS)}")
    if method in SEARCHED and not (isinstance(budget, int) and 1 <= budget <= MAX_BUDGET):
        raise ModelError(f"--budget: {budget!r} simulator evaluations; give a whole number from 1 to {MAX_BUDGET:,}")
    if not isinstance(model, torch.nn.Module):
        raise ModelError(f"the model is a {type(model).__name__}, not a torch.nn.Module")
    model = model.eval()
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    pair = check_pair(pair or default_pair())
    gm = run_user_code(lambda: trace(model), f"tracing {type(model).__name__}'s forward", timeout_s)
    shapes = " and ".join("x".join(map(str, x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__
                          for x in example_inputs)
    with torch.no_grad():
        graph = run_user_code(lambda: graphs.extract_module(gm, example_inputs, {"name": type(model).__name__}),
                              f"{type(model).__name__}'s forward on inputs of shape {shapes}", timeout_s)
        prof = run_user_code(lambda: costs.profile_module(gm, example_inputs, repeats=repeats, warmup=1),
                             f"profiling {type(model).__name__}'s operators on inputs of shape {shapes}",
                             timeout_s * max(1, repeats + 1) if timeout_s else timeout_s)
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


def load_factory(ref: str, timeout_s: float | None = None):
    """``path/to/file.py:factory`` or ``package.module:factory`` -> the callable (it returns
    the ``nn.Module``).  A file is imported as a script would be: its folder first on
    ``sys.path``, so it may import the modules beside it; the import (the file's top level is
    the user's code) runs under ``timeout_s``."""
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
            with _UserPhase(timeout_s):
                spec.loader.exec_module(obj)
        else:
            with _UserPhase(timeout_s):
                obj = importlib.import_module(mod)
    except ModelError:
        raise
    except _UserCodeTimeout:
        raise ModelError(f"--model: importing {mod} ran past {timeout_s:g} s and was stopped (--timeout-s; "
                         f"a loop at the file's top level?)") from None
    except SystemExit as e:
        raise ModelError(f"--model: importing {mod} called sys.exit({e.code!r}) at {_where(e)}") from None
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
    if not isinstance(high, int) or high < 1:
        raise ModelError(f"--input-high: {high!r}; integer inputs are drawn from [0, high): give a whole number >= 1")
    if dtypes and len(dtypes) > len(shapes):
        raise ModelError(f"--input-dtype: {len(dtypes)} dtypes for {len(shapes)} input shape(s)")
    g = torch.Generator().manual_seed(0)
    out = []
    for i, s in enumerate(shapes):
        try:
            shape = tuple(int(x) for x in str(s).split(","))
        except ValueError:
            raise ModelError(f"--input-shape: {s!r} is not a shape; write whole numbers separated by "
                             f"commas, e.g. 1,3,224,224") from None
        if not shape or any(n < 1 for n in shape):
            raise ModelError(f"--input-shape: {s!r}: every size must be at least 1")
        name = dtypes[i] if dtypes and i < len(dtypes) else "float32"
        dt = getattr(torch, name, None) if isinstance(name, str) and not name.startswith("_") else None
        if not isinstance(dt, torch.dtype):
            raise ModelError(f"--input-dtype: {name!r} is not a torch dtype; write e.g. float32, int64")
        nbytes = math.prod(shape) * dt.itemsize
        if nbytes > MAX_INPUT_BYTES:
            raise ModelError(f"--input-shape: {s!r} is {nbytes / 2**30:,.1f} GiB of {name}, over the limit of "
                             f"{MAX_INPUT_BYTES / 2**30:g} GiB for an example input; a batch of 1 shows the "
                             f"placement")
        out.append(torch.randint(0, high, shape, generator=g, dtype=dt) if not dt.is_floating_point
                   else torch.randn(shape, generator=g, dtype=dt))
    return tuple(out)
