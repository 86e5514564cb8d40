"""Every convolution (or matrix product) of a real model, alone, on plait-c against
onnxruntime.

    python benchmarks/conv_layers.py --models resnet18
    python benchmarks/conv_layers.py --models resnet50,mobilenetv2 --threads 1 --runs 50
    python benchmarks/conv_layers.py --op matmul --models bert,gpt2
    python benchmarks/conv_layers.py --op pool --models resnet18,resnet50 --threads 1
    python benchmarks/conv_layers.py --suite broad --models regnet,segformer

The convolutions (``--op matmul``: the MatMul and Gemm nodes with constant weights;
``--op pool``: the MaxPool nodes, whose "MMAC" column counts comparisons) of
each model in the real suite (benchmarks/real_models.py, exported once per machine into
the cache; ``--suite broad``: any model of the broad suite, benchmarks/broad_models.py)
are taken from its ONNX graph, their input sizes from one onnxruntime run, and
deduplicated by (op, input shape, weight shapes, attributes).  Each distinct layer
becomes a one-node model (the layer's own weights, bias when it has one),
timed on plait's ``c`` target and on onnxruntime, each backend in a child process of
its own that does not import torch, with the same thread count.  Both backends' outputs
are compared (rtol 1e-3, atol 1e-3 of the output's largest magnitude) before any figure
is printed; a layer that disagrees is reported as such, with no figure.

Prints per layer: how often the model uses it, its multiply-accumulates, the median
(``--stat min``: the fastest) milliseconds of each backend, their ratio, what plait ran
it with (the callee of the call instruction, and how the timed calls used the thread
pool: ``pool parallel/serial/late``, see docs/kernels.md, "Threads": serial calls ran
on one thread because a worker had been late shortly before), and the time the layer
loses against onnxruntime over the whole model (``(plait - ort) x count``), sorted by
that loss: the top rows are where a convolution kernel change pays.  The machine's load
shows in the milliseconds (the minima move least); compare figures from one run only
and name the CPU beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

CONV_MODELS = ("resnet18", "resnet50", "mobilenetv2", "efficientnet-b0", "convnext")
MATMUL_MODELS = ("bert", "gpt2", "llama", "vit", "deit-small", "whisper-encoder")


def _attr(node, name, default):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


OPS = {"conv": ("Conv",), "matmul": ("MatMul", "Gemm"), "pool": ("MaxPool",)}
"""The layer kinds ``--op`` takes and the ONNX ops of each."""


def extract_layers(onnx_path: Path, op: str = "conv") -> list[dict]:
    """The distinct layers of a model of kind ``op`` (``conv``: Conv; ``matmul``: MatMul
    and Gemm) whose other operands are constant weights (initializers, or constant nodes'
    outputs): input shape, weights, attributes, count.

    The sizes come from running the model once on onnxruntime with every layer's input
    as an extra output (the exports compute their paddings at run time, which shape
    inference cannot follow).  A zero ``Pad`` of the spatial axes right before a
    convolution is folded into its ``pads``, as plait's c.FoldPadIntoConv does."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    model = onnx.load(str(onnx_path))
    inits = {t.name: t for t in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    consts = {o for n in model.graph.node if n.op_type in ("Constant", "Identity")
              and all(not i or i in inits for i in n.input) for o in n.output}
    nodes = [n for n in model.graph.node
             if n.op_type in OPS[op] and n.input[0] not in inits
             and all(not i or i in inits or i in consts for i in n.input[1:])]
    pads_of = {}
    for n in nodes:
        pad = producer.get(n.input[0])
        if n.op_type == "Conv" and pad is not None and pad.op_type == "Pad" and _attr(
                pad, "mode", b"constant") in (b"constant", "constant") and (
                len(pad.input) < 3 or not pad.input[2]):
            pads_of[n.name] = pad
    wanted = {n.input[0] for n in nodes} | {i for n in nodes for i in n.input[1:] if i in consts}
    wanted |= {p.input[0] for p in pads_of.values()} | {p.input[1] for p in pads_of.values()}
    have = {o.name for o in model.graph.output}
    for name in sorted(wanted - have - set(inits)):
        model.graph.output.append(onnx.ValueInfoProto(name=name))
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = [d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
        elem = vi.type.tensor_type.elem_type
        feeds[vi.name] = (np.zeros(dims, np.int64) if elem == onnx.TensorProto.INT64
                          else np.random.default_rng(0).standard_normal(dims)
                          .astype(np.float32))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    values = dict(zip(names, sess.run(None, feeds)))
    layers: dict[tuple, dict] = {}
    for node in nodes:
        weights = [None if not i else np.asarray(
            numpy_helper.to_array(inits[i]) if i in inits else values[i], np.float32)
            for i in node.input[1:]]
        xs = tuple(values[node.input[0]].shape)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            w = weights[0]
            k = w.shape[2:]
            pads = list(_attr(node, "pads", [0] * 2 * len(k)))
            auto = _attr(node, "auto_pad", b"NOTSET")
            auto = auto.decode() if isinstance(auto, bytes) else auto
            if auto in ("SAME_UPPER", "SAME_LOWER"):   # the explicit pads auto_pad means
                strides = list(_attr(node, "strides", [1] * len(k)))
                dil = list(_attr(node, "dilations", [1] * len(k)))
                tot = [max((-(-n // s) - 1) * s + (kk - 1) * d + 1 - n, 0)
                       for n, s, kk, d in zip(xs[2:], strides, k, dil)]
                small = [t // 2 for t in tot]
                big = [t - t // 2 for t in tot]
                pads = small + big if auto == "SAME_UPPER" else big + small
            pad = pads_of.get(node.name)
            if pad is not None:
                amounts = [int(v) for v in values[pad.input[1]]]
                r = len(amounts) // 2
                if r == 2 + len(k) and not any(amounts[:2] + amounts[r:r + 2]):
                    xs = tuple(values[pad.input[0]].shape)
                    pads = [p + a for p, a in zip(pads, amounts[2:r] + amounts[r + 2:])]
            attrs = {"strides": list(_attr(node, "strides", [1] * len(k))), "pads": pads,
                     "dilations": list(_attr(node, "dilations", [1] * len(k))),
                     "group": int(_attr(node, "group", 1))}
            desc = (f"{xs[1]}->{w.shape[0]} k{w.shape[2]}x{w.shape[3]} s{attrs['strides'][0]} "
                    f"g{attrs['group']} @{xs[2]}x{xs[3]}")
        elif node.op_type == "MaxPool":
            k = list(attrs["kernel_shape"])
            attrs = {"kernel_shape": k, "strides": list(attrs.get("strides", [1] * len(k))),
                     "pads": list(attrs.get("pads", [0] * 2 * len(k))),
                     "dilations": list(attrs.get("dilations", [1] * len(k))),
                     "ceil_mode": int(attrs.get("ceil_mode", 0))}
            desc = (f"MaxPool {'x'.join(map(str, k))} s{attrs['strides'][0]} "
                    f"p{attrs['pads'][0]} {'x'.join(map(str, xs))}")
        else:
            w = weights[0]
            wt = w.T if attrs.get("transB") else w
            desc = (f"{node.op_type} {'x'.join(map(str, xs))} @ {wt.shape[0]}x{wt.shape[1]}"
                    + (" + bias" if len(weights) > 1 and weights[1] is not None else ""))
        key = (node.op_type, xs, tuple(None if w_ is None else w_.shape for w_ in weights),
               json.dumps(attrs, sort_keys=True, default=str))
        if key in layers:
            layers[key]["count"] += 1
            continue
        layers[key] = {"op": node.op_type, "x": list(xs), "weights": weights,
                       "attrs": attrs, "count": 1, "desc": desc}
    return list(layers.values())


def layer_model(layer: dict) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    inputs, inits = ["x"], []
    for i, w in enumerate(layer["weights"]):
        if w is None:
            inputs.append("")
            continue
        inputs.append(f"w{i}")
        inits.append(numpy_helper.from_array(w, f"w{i}"))
    node = helper.make_node(layer["op"], inputs, ["y"], **layer["attrs"])
    graph = helper.make_graph(
        [node], "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, layer["x"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _times_ms(fn, x, runs: int) -> list[float]:
    """``runs`` call times of ``fn(x)`` in ms, sorted, after 5 warm-up calls."""
    for _ in range(5):
        fn(x)
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn(x)
        ts.append(time.perf_counter() - t)
    return sorted(t * 1e3 for t in ts)


def _pool_counts() -> dict[str, int]:
    """The thread pools' counts summed over the native libraries loaded so far
    (``NativeModule.pool_report``): calls run in parallel, serially (a worker was late
    shortly before) and late."""
    from plait.runtime.native import loaded_libraries
    total = {"parallel": 0, "serial": 0, "late": 0}
    for lib in loaded_libraries():
        report = lib.pool_report() or {}
        for k in total:
            total[k] += int(report.get(k, 0))
    return total


def worker(backend: str, files: list[str], threads: int, runs: int, out: str) -> None:
    """Time every layer file on one backend; write outputs (.npy) and a JSON of figures."""
    import numpy as np
    results = []
    for i, f in enumerate(files):
        data = Path(f).read_bytes()
        import onnx
        shape = [d.dim_value for d in onnx.load_from_string(data).graph.input[0]
                 .type.tensor_type.shape.dim]
        x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        if backend == "onnxruntime":
            import onnxruntime as ort
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            fn = lambda v, s=sess: s.run(None, {"x": v})[0]  # noqa: E731
            how = "onnxruntime"
        else:
            import plait
            from plait.frontend import from_onnx
            from plait.runtime import VirtualMachine
            exe = plait.build(from_onnx(data), "c")
            how = ",".join(sorted({i.func.rsplit("_", 1)[0] if i.func.startswith("plait_")
                                   else i.func for fn_ in exe.functions.values()
                                   for i in fn_.instructions if hasattr(i, "func")}))
            main = VirtualMachine(exe)["main"]
            fn = lambda v, f=main: np.asarray(f(v))  # noqa: E731
        np.save(f"{out}.{i}.npy", np.asarray(fn(x)))
        before = _pool_counts() if backend != "onnxruntime" else None
        ts = _times_ms(fn, x, runs)
        if before is not None:   # how the timed calls used plait's thread pool
            after = _pool_counts()
            how += " (pool {parallel}/{serial}/{late})".format(
                **{k: after[k] - before[k] for k in after})
        results.append({"ms": ts[len(ts) // 2], "min": ts[0], "how": how})
    Path(out + ".json").write_text(json.dumps(results))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet18", help=f"comma-separated, of {CONV_MODELS}")
    p.add_argument("--suite", choices=("real", "broad"), default="real",
                   help="the real suite's models (default) or the broad suite's")
    p.add_argument("--op", choices=sorted(OPS), default="conv",
                   help="which layers: conv (Conv), matmul (MatMul/Gemm with constant "
                        "weights) or pool (MaxPool)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--stat", choices=("median", "min"), default="median",
                   help="which figure of the runs to print: the median (default) or, on "
                        "a loaded machine, the minimum")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args, rest = p.parse_known_args(argv)
    if args.worker:
        worker(args.worker[0], rest, args.threads, args.runs, args.worker[1])
        return 0
    import numpy as np
    from real_models import export_cached
    names = args.models.split(",")
    if args.suite == "broad":
        from broad_models import MODELS as BROAD
        known: tuple[str, ...] = tuple(BROAD)
    else:
        known = CONV_MODELS + MATMUL_MODELS
    bad = [n for n in names if n not in known]
    if bad:
        print(f"unknown model {', '.join(bad)}; choose from {', '.join(known)}",
              file=sys.stderr)
        return 2
    paths = export_cached(names, suite=args.suite)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    from layout import cpu_name
    print(f"CPU: {cpu_name()}; {args.threads} threads; {args.stat} of {args.runs} calls")
    status = 0
    for name in names:
        layers = extract_layers(paths[name], args.op)
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            for i, layer in enumerate(layers):
                f = Path(tmp) / f"layer{i}.onnx"
                f.write_bytes(layer_model(layer))
                files.append(str(f))
            figs = {}
            for backend in ("plait-c", "onnxruntime"):
                out = str(Path(tmp) / backend)
                subprocess.run([sys.executable, __file__, "--worker", backend, out,
                                "--threads", str(args.threads), "--runs", str(args.runs),
                                *files], check=True, env=env)
                figs[backend] = json.loads(Path(out + ".json").read_text())
            rows = []
            for i, layer in enumerate(layers):
                a = np.load(str(Path(tmp) / f"plait-c.{i}.npy"))
                b = np.load(str(Path(tmp) / f"onnxruntime.{i}.npy"))
                desc = layer["desc"]
                w = layer["weights"][0] if layer["weights"] else None
                if layer["op"] == "MaxPool":   # comparisons: one per tap and output
                    macs = int(np.prod(b.shape)) * int(np.prod(layer["attrs"]["kernel_shape"]))
                elif layer["op"] == "Conv":
                    macs = int(np.prod(b.shape)) * int(np.prod(w.shape[1:]))
                else:   # the contracted length: the input's last axis
                    macs = int(np.prod(b.shape)) * int(layer["x"][-1])
                ok = np.allclose(a, b, rtol=1e-3, atol=1e-3 * float(np.abs(b).max() or 1))
                stat = "ms" if args.stat == "median" else "min"
                pm, om = figs["plait-c"][i][stat], figs["onnxruntime"][i][stat]
                rows.append((desc, layer["count"], macs, pm, om, ok,
                             figs["plait-c"][i]["how"]))
        rows.sort(key=lambda r: -(r[3] - r[4]) * r[1])
        print(f"\n## {name}\n")
        print("| layer | count | MMAC | plait ms | ort ms | ratio | loss ms | plait ran |")
        print("|---|---|---|---|---|---|---|---|")
        tot = [0.0, 0.0]
        for desc, n, macs, pm, om, ok, how in rows:
            if not ok:
                status = 1
                print(f"| {desc} | {n} | {macs / 1e6:.1f} | outputs disagree | | | | {how} |")
                continue
            tot[0] += pm * n
            tot[1] += om * n
            print(f"| {desc} | {n} | {macs / 1e6:.1f} | {pm:.3f} | {om:.3f} | {pm / om:.2f} "
                  f"| {(pm - om) * n:.2f} | {how} |")
        print(f"| **all layers** | | | {tot[0]:.2f} | {tot[1]:.2f} | "
              f"{tot[0] / max(tot[1], 1e-9):.2f} | {tot[0] - tot[1]:.2f} | |")
    return status


if __name__ == "__main__":
    sys.exit(main())
