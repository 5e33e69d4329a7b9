"""Operator graphs of the benchmark models, traced with ``torch.fx``.

One node per traced operation (``call_module``, ``call_function``,
``call_method``) plus one ``input`` node per model input.  Decision recorded in
every graph file (``weights_as_nodes: false``): parameters and buffers are
*not* nodes.  Their bytes are an attribute of the operator that reads them
(``param_bytes``), and ``get_attr`` nodes are folded into their consumers.  A
placement moves activations between devices, never weights (weights are
resident on every device that runs an operator needing them, as in an
inference deployment).  The consequence for coarsening: with weights as
separate nodes every convolution has two predecessors (data and weight) and
starts a new group; without them it joins its producer's group (see
``coarsen.py``).

Each node carries: ``op`` (module class, function or method name), output
``shape`` and ``out_bytes``, ``in_bytes``, ``param_bytes``, ``flops``.  FLOPs of
matmuls and convolutions come from ``torch.utils.flop_counter`` (2·M·N·K);
other operators count a fixed number of operations per output element.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch.utils.flop_counter import FlopCounterMode

from .graphfile import GraphError, load_graph, save_graph, validate_graph  # noqa: F401 (re-exported)

MODELS = ("inception_v3", "resnet50", "bert")

# operations per output element of operators that are not matmuls/convolutions
_ELEMENTWISE_FLOPS = {
    "batchnorm2d": 2, "layernorm": 5, "softmax": 5, "gelu": 8, "tanh": 4, "embedding": 0,
    "view": 0, "reshape": 0, "transpose": 0, "flatten": 0, "getitem": 0, "to": 0, "input": 0,
    "dropout": 0, "cat": 0,
}


def build_model(spec: dict[str, Any]) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The model (random weights, eval mode) and example inputs of a model spec.

    ``spec``: ``{"name": "inception_v3" | "resnet50" | "bert", "batch": 1,
    "image_size": 299, "seq": 128, "layers": 12, "hidden": 768, "heads": 12,
    "ffn": 3072, "width": 1.0}``; missing keys take the benchmark's sizes.
    """
    name = spec.get("name")
    torch.manual_seed(0)
    batch = int(spec.get("batch", 1))
    if name == "inception_v3":
        from torchvision.models import inception_v3

        model = inception_v3(weights=None, aux_logits=False, init_weights=False)
        size = int(spec.get("image_size", 299))
        if size < 75:
            raise GraphError(f"model.image_size: inception_v3 needs at least 75, got {size}")
        inputs = (torch.randn(batch, 3, size, size),)
    elif name == "resnet50":
        from torchvision.models import resnet50

        model = resnet50(weights=None)
        size = int(spec.get("image_size", 224))
        inputs = (torch.randn(batch, 3, size, size),)
    elif name == "bert":
        from .bert import BertEncoder

        seq = int(spec.get("seq", 128))
        model = BertEncoder(layers=int(spec.get("layers", 12)), hidden=int(spec.get("hidden", 768)),
                            heads=int(spec.get("heads", 12)), ffn=int(spec.get("ffn", 3072)),
                            vocab=int(spec.get("vocab", 30522)), batch=batch, seq=seq)
        g = torch.Generator().manual_seed(0)
        inputs = (torch.randint(0, int(spec.get("vocab", 30522)), (batch, seq), generator=g),
                  torch.ones(batch, seq, dtype=torch.long))
    else:
        raise GraphError(f"model.name: {name!r} is not one of {MODELS}")
    return model.eval(), inputs


def trace(model: torch.nn.Module) -> fx.GraphModule:
    return fx.symbolic_trace(model)


def _op_name(gm: fx.GraphModule, node: fx.Node) -> str:
    """Lower-case operator type: module class, function or method name
    (``Conv2d`` and ``conv2d`` are one type)."""
    return _raw_op_name(gm, node).lower()


def _raw_op_name(gm: fx.GraphModule, node: fx.Node) -> str:
    if node.op == "placeholder":
        return "input"
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)).__name__
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_function":
        if node.target is operator.getitem:
            return "getitem"
        return getattr(node.target, "__name__", str(node.target))
    return node.op


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(v) for v in x)
    return 0


def _shape(x: Any) -> list[int]:
    if isinstance(x, torch.Tensor):
        return list(x.shape)
    if isinstance(x, (tuple, list)) and x and isinstance(x[0], torch.Tensor):
        return list(x[0].shape)
    return []


def node_callable(gm: fx.GraphModule, node: fx.Node) -> Callable[..., Any]:
    """What executing ``node`` calls, given its materialised args/kwargs."""
    if node.op == "call_module":
        return gm.get_submodule(node.target)
    if node.op == "call_function":
        return node.target
    if node.op == "call_method":
        name = node.target
        return lambda self, *a, **k: getattr(self, name)(*a, **k)
    raise GraphError(f"node {node.name}: op {node.op} is not executable")


def _fetch_attr(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def walk(gm: fx.GraphModule, inputs: tuple[torch.Tensor, ...]
         ) -> Iterator[tuple[fx.Node, Callable[..., Any] | None, tuple, dict, Any]]:
    """Execute the graph node by node: yields ``(node, fn, args, kwargs, out)``
    for every compute node (``fn`` is None for inputs and folded attributes)."""
    env: dict[str, Any] = {}
    it = iter(inputs)
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env[node.name] = next(it)
                yield node, None, (), {}, env[node.name]
                continue
            if node.op == "get_attr":
                env[node.name] = _fetch_attr(gm, node.target)
                yield node, None, (), {}, env[node.name]
                continue
            if node.op == "output":
                continue
            args = fx.node.map_arg(node.args, lambda n: env[n.name])
            kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n.name])
            fn = node_callable(gm, node)
            env[node.name] = fn(*args, **kwargs)
            yield node, fn, args, kwargs, env[node.name]


def extract(spec: dict[str, Any]) -> dict[str, Any]:
    """The operator graph of a model spec as a JSON-able dict."""
    model, inputs = build_model(spec)
    return extract_module(model, inputs, spec)


def extract_module(model: torch.nn.Module | fx.GraphModule, inputs: tuple[torch.Tensor, ...],
                   spec: Any = None) -> dict[str, Any]:
    """The operator graph of any module ``torch.fx`` can trace, run on ``inputs``."""
    gm = model if isinstance(model, fx.GraphModule) else trace(model)
    nodes: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    folded: dict[str, int] = {}  # get_attr node -> its bytes (added to consumers)
    edges: list[tuple[int, int]] = []
    for node, fn, args, kwargs, out in walk(gm, inputs):
        if node.op == "get_attr":
            folded[node.name] = _nbytes(out)
            continue
        params = 0
        if node.op == "call_module":
            mod = gm.get_submodule(node.target)
            params = sum(_nbytes(p) for p in mod.parameters(recurse=True)) + \
                sum(_nbytes(b) for b in mod.buffers(recurse=True))
        preds = [a for a in node.all_input_nodes]
        params += sum(folded.get(p.name, 0) for p in preds)
        in_bytes = sum(_nbytes(v) for v in _flatten((args, kwargs))) if fn is not None else 0
        op = _op_name(gm, node)
        flops = 0
        if fn is not None:
            with FlopCounterMode(display=False) as fc:
                fn(*args, **kwargs)
            flops = int(fc.get_total_flops())
            if flops == 0:  # not a matmul/convolution: a fixed count per element
                numel = _numel(out)
                if "pool" in op:  # every input element is read once
                    numel = sum(t.numel() for t in _flatten(args))
                flops = numel * _ELEMENTWISE_FLOPS.get(op, 1)
        index[node.name] = len(nodes)
        nodes.append({
            "name": node.name, "op": op, "shape": _shape(out), "out_bytes": _nbytes(out),
            "in_bytes": int(in_bytes), "param_bytes": int(params), "flops": int(flops),
        })
        for p in preds:
            if p.name in index:
                edges.append((index[p.name], index[node.name]))
    edges = sorted(set(edges))
    return {
        "model": spec, "weights_as_nodes": False, "tracer": "torch.fx.symbolic_trace",
        "n_nodes": len(nodes), "n_edges": len(edges), "nodes": nodes, "edges": [list(e) for e in edges],
    }


def _flatten(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flatten(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _flatten(v)]
    return []


def _numel(x: Any) -> int:
    return sum(t.numel() for t in _flatten(x))
