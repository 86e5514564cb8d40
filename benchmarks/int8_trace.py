"""Where an int8 model's output parts from onnxruntime's, and why (issue 30's broad-int8
gaps): three checks on one model of the suite, each against onnxruntime on this machine.

1. **Every node alone** (``local``): a copy of the model in which every node reads graph
   inputs fed with onnxruntime's own values of its inputs, built and run by plait: the
   worst difference of each op type (integer tensors in quantization steps, float
   tensors relative to their largest magnitude).  A qnn op whose legalization or native
   kernel rounds differently shows here, free of any upstream difference.
2. **The first divergence** (``first``): the model with its intermediate tensors added as
   outputs, run by both; the tensors that differ (floats by more than ``1e-5`` of their
   largest magnitude), in graph order.
3. **onnxruntime against itself** (``--perturb TENSOR``): the model cut at integer tensor
   ``TENSOR`` (made a graph input), run by onnxruntime on its own value of it and on that
   value with plait's at the elements where the two differ: how far one-step
   differences there move onnxruntime's own output, and how far plait's output is from
   each.

::

    python benchmarks/int8_trace.py bert-qop --target c
    python benchmarks/int8_trace.py bert-qop --target numpy --perturb \\
        /inner/encoder/layer.1/attention/output/LayerNorm/LayerNormalization_output_0_quantized

Slow (a full-size model is built twice with all its intermediates as outputs): a
diagnostic, not part of the timed suite.  docs/performance.md's int8 gap rows quote it.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

import broad_check
import broad_quantized

FLOAT_NOISE = 1e-5
"""Float intermediates closer than this fraction of their largest magnitude are the same
(summation order, a last bit); an integer tensor differs at any step."""


def _model(name: str, suite: str = "broad") -> tuple[str, Any]:
    """The quantized file of suite model ``name`` (``suite`` broad, or broad-tiny: the
    tiny twins of tests/test_broad_suite.py) and its benchmark input."""
    files, failed = broad_quantized.quantized_files([name], suite)
    if name in failed:
        raise SystemExit(f"{name}: {failed[name]}")
    return str(files[name]), broad_quantized.make_input(name, suite)


def _plait(model: Any, feeds: dict[str, Any], target: str) -> list[Any]:
    """plait's outputs of ONNX ``model`` (a ModelProto) on ``feeds``, built for ``target``."""
    import tempfile

    import numpy as np
    import onnx

    import plait
    from plait.frontend import from_onnx
    from plait.runtime import VirtualMachine

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "model.onnx")
        onnx.save(model, path)
        mod = from_onnx(path, shapes={k: v.shape for k, v in feeds.items()})
        exe = plait.build(mod, target)
    names = [i.name for i in model.graph.input if i.name in feeds]
    out = VirtualMachine(exe)["main"](*[feeds[n] for n in names])
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def _with_outputs(model: Any, names: list[str]) -> Any:
    """A copy of ``model`` with tensors ``names`` added as outputs (typed where shape
    inference knows them: plait needs a type, onnxruntime takes a bare name)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    typed = {v.name: v for v in out.graph.value_info}
    have = {o.name for o in out.graph.output}
    for n in names:
        if n not in have:
            out.graph.output.append(typed.get(n) or onnx.ValueInfoProto(name=n))
            have.add(n)
    return out


def _ort(model: Any, feeds: dict[str, Any]) -> dict[str, Any]:
    """onnxruntime's outputs of ``model`` on ``feeds``, by name: of its exact arithmetic
    where this CPU's onnxruntime saturates uint8 x int8 products
    (broad_check.exact_products)."""
    import onnxruntime as ort

    if broad_check.onnxruntime_saturates():
        model = broad_check.exact_products(model)

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))


def _difference(a: Any, b: Any) -> float:
    """``max |a - b|``: in steps for integer ``b``, else over ``b``'s largest magnitude."""
    import numpy as np

    if not b.size:
        return 0.0
    d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
    return d if b.dtype.kind in "iu" else d / max(float(np.max(np.abs(b))), 1e-30)


def _constant_tensors(graph: Any) -> set[str]:
    """Tensors computable from initializers and constants alone (they stay in place)."""
    const = {i.name for i in graph.initializer} | {""}
    for n in graph.node:
        if n.op_type == "Constant" or all(i in const for i in n.input):
            const.update(n.output)
    return const


def local(model: Any, x: Any, target: str) -> dict[str, tuple[float, str]]:
    """Check 1: the worst difference of each op type over nodes run alone on
    onnxruntime's inputs, with the tensor where it occurs."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    const = _constant_tensors(graph)
    initializers = list(graph.initializer)
    computed = [o for n in graph.node if n.output[0] not in const for o in n.output if o]
    ref = _ort(_with_outputs(model, computed), {"input": x})
    ref["input"] = x
    nodes, inputs, outputs, feeds = [], [], [], {}
    for n in graph.node:
        new = helper.make_node(n.op_type, list(n.input), list(n.output), domain=n.domain)
        new.attribute.extend(n.attribute)
        if n.output[0] not in const:
            for k, i in enumerate(n.input):
                if i not in const and ref[i].dtype == np.int64 and ref[i].size <= 64:
                    # a shape or index tensor computed from the input's shape: a
                    # constant for this input, and the importer needs it as one
                    name = f"const{len(initializers)}"
                    initializers.append(numpy_helper.from_array(ref[i], name))
                    new.input[k] = name
                elif i not in const:
                    name = f"in{len(feeds)}"
                    feeds[name] = ref[i]
                    inputs.append(helper.make_tensor_value_info(
                        name, helper.np_dtype_to_tensor_dtype(ref[i].dtype), ref[i].shape))
                    new.input[k] = name
            for k, o in enumerate(n.output):
                new.output[k] = f"out:{o}"
                if o in ref:
                    outputs.append(helper.make_tensor_value_info(
                        f"out:{o}", helper.np_dtype_to_tensor_dtype(ref[o].dtype),
                        ref[o].shape))
        nodes.append(new)
    alone = helper.make_model(
        helper.make_graph(nodes, "alone", inputs, outputs, initializers),
        opset_imports=model.opset_import, ir_version=model.ir_version)
    got = _plait(alone, feeds, target)
    op = {o: n.op_type for n in graph.node for o in n.output}
    worst: dict[str, tuple[float, str]] = collections.defaultdict(lambda: (0.0, ""))
    for t, a in zip([o.name[4:] for o in outputs], got, strict=True):
        d = _difference(a, ref[t])
        if d >= worst[op[t]][0]:
            worst[op[t]] = (d, t)
    return dict(worst)


def _intermediates(model: Any, x: Any, target: str
                   ) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """Every computed tensor of ``model`` (but constants' copies), in graph order, with
    onnxruntime's and plait's values of it (plait's outputs typed from onnxruntime's)."""
    import onnx

    skip = {"Constant", "Identity"}
    names = [o for n in model.graph.node if n.op_type not in skip for o in n.output if o]
    ref = _ort(_with_outputs(model, names), {"input": x})
    full = onnx.ModelProto()
    full.CopyFrom(model)
    have = {o.name for o in full.graph.output}
    full.graph.output.extend(
        onnx.helper.make_tensor_value_info(o, onnx.helper.np_dtype_to_tensor_dtype(
            ref[o].dtype), ref[o].shape) for o in names if o not in have)
    got = dict(zip([o.name for o in full.graph.output], _plait(full, {"input": x}, target),
                   strict=True))
    return [o.name for o in full.graph.output], ref, got


def _differing(model: Any, names: list[str], got: dict[str, Any], ref: dict[str, Any],
               limit: int) -> list[str]:
    """The first ``limit`` of tensors ``names`` where ``got`` and ``ref`` differ."""
    op = {o: n.op_type for n in model.graph.node for o in n.output}
    node = {o: n for n in model.graph.node for o in n.output}
    lines: list[str] = []
    for t in names:
        if t not in got or t not in ref:
            continue
        a, b = got[t], ref[t]
        d = _difference(a, b)
        if d > (0 if b.dtype.kind in "iu" else FLOAT_NOISE):
            n = int((a.astype("float64") != b.astype("float64")).sum())
            unit = "steps" if b.dtype.kind in "iu" else "of max |x|"
            lines.append(f"{t}  {op.get(t, '?')}  {b.dtype}  {d:.3g} {unit}  "
                         f"({n} of {b.size} differ)")
            if op.get(t) == "QuantizeLinear" and node[t].input[0] in got:
                lines += _rounding(model, node[t], got, ref)
            if len(lines) >= limit:
                break
    return lines


def first(model: Any, x: Any, target: str, limit: int = 12) -> list[str]:
    """Check 2: the first ``limit`` intermediate tensors that differ, in graph order."""
    names, ref, got = _intermediates(model, x, target)
    return _differing(model, names, got, ref, limit)


def _rounding(model: Any, node: Any, got: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    """Where QuantizeLinear ``node``'s outputs differ: its float input from each and that
    input over the scale (the value rounded): a last-bit difference of the input on a
    ``.5`` boundary shows as ``k.5`` on one side."""
    import numpy as np
    from onnx import numpy_helper

    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consts.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t)
                   for n in model.graph.node if n.op_type == "Constant" and n.attribute})
    scale = consts.get(node.input[1])
    if scale is None or scale.size != 1:
        return []
    s = np.float32(scale.reshape(()))
    x, y, out = node.input[0], node.output[0], []
    for w in np.argwhere(got[y] != ref[y])[:3]:
        i = tuple(int(k) for k in w)
        a, b = np.float32(got[x][i]), np.float32(ref[x][i])
        ulps = abs(float(a) - float(b)) / abs(float(np.spacing(b)))
        out.append(f"    at {i}: input plait {float(a)!r} (/scale {float(a / s)!r} -> "
                   f"{got[y][i]}), onnxruntime {float(b)!r} (/scale {float(b / s)!r} -> "
                   f"{ref[y][i]}); the inputs {ulps:.0f} ulp apart")
    return out


def perturb(model: Any, x: Any, target: str, tensor: str, limit: int = 6) -> list[str]:
    """Check 3: onnxruntime on the model cut at integer ``tensor``, fed its own value and
    that value with plait's at the elements where they differ; and the first ``limit``
    tensors after it where plait still differs from onnxruntime so fed (the next
    divergence)."""
    import numpy as np
    import onnx
    from onnx import helper

    model = onnx.shape_inference.infer_shapes(model)
    names, ref, got = _intermediates(model, x, target)
    out, own, moved = ref[names[0]], ref[tensor], got[tensor]
    # the node making the tensor goes; its other outputs (a DynamicQuantizeLinear's scale
    # and zero point) are fed onnxruntime's own values
    maker = next(n for n in model.graph.node if tensor in n.output)
    siblings = {o: ref[o] for o in maker.output if o and o != tensor and o in ref}
    cut = _with_outputs(model, [n for n in names if n != tensor and n not in siblings])
    kept = [n for n in cut.graph.node if tensor not in n.output]
    del cut.graph.node[:]
    cut.graph.node.extend(kept)
    kept_out = [o for o in cut.graph.output if o.name not in siblings]
    del cut.graph.output[:]
    cut.graph.output.extend(kept_out)
    for name, value in {tensor: own, **siblings}.items():
        cut.graph.input.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
    a = _ort(cut, {"input": x, tensor: own, **siblings})[names[0]]
    fed = _ort(cut, {"input": x, tensor: moved, **siblings})
    b, p = fed[names[0]], got[names[0]]
    after = names[names.index(tensor) + 1:]
    where = np.argwhere(moved != own)
    steps = int(np.max(np.abs(moved.astype(np.int64) - own.astype(np.int64)))) if where.size \
        else 0
    at = [tuple(int(i) for i in w) for w in where[:4]]
    return [
        f"{tensor}: plait's value differs from onnxruntime's at {len(where)} of {own.size} "
        f"elements (at most {steps} step(s)); first at {at}",
        f"onnxruntime, cut there and fed its own value: max |diff| from the whole model "
        f"{float(np.max(np.abs(a - out))):.3g}",
        f"onnxruntime fed plait's value instead: its output moves by "
        f"{float(np.max(np.abs(b - a))):.4g} (max |output| {float(np.max(np.abs(out))):.4g})",
        f"plait {target}: max |diff| from onnxruntime {float(np.max(np.abs(p - out))):.4g}, from "
        f"onnxruntime fed plait's value of the tensor {float(np.max(np.abs(p - b))):.4g}; "
        f"where plait still differs from that onnxruntime, after the tensor:",
        *(_differing(model, after, got, fed, limit) or ["    nowhere"]),
    ]


def main(argv: list[str] | None = None) -> int:
    """Command line: the model, the target, the checks."""
    import onnx

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an int8 suite model, <model>-<form> (bert-qop)")
    ap.add_argument("--target", default="numpy", choices=("numpy", "c"))
    ap.add_argument("--checks", default="local,first", help="local, first (comma-separated)")
    ap.add_argument("--perturb", metavar="TENSOR", help="check 3 on this integer tensor")
    ap.add_argument("--suite", default="broad", choices=("broad", "broad-tiny"),
                    help="the full sizes (broad) or the tests' tiny twins (broad-tiny)")
    args = ap.parse_args(argv)
    path, x = _model(args.model, args.suite)
    model = onnx.load(path)
    checks = args.checks.split(",") if args.checks else []
    if "local" in checks:
        print(f"== every node alone on onnxruntime's inputs ({args.target})")
        for op, (d, t) in sorted(local(model, x, args.target).items()):
            print(f"{op:22s} worst {d:.3g} at {t}")
    if "first" in checks:
        print(f"== intermediates that differ, in graph order ({args.target})")
        print("\n".join(first(model, x, args.target)) or "none")
    if args.perturb:
        print(f"== onnxruntime against itself at {args.perturb} ({args.target})")
        print("\n".join(perturb(model, x, args.target, args.perturb)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
