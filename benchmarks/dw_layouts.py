"""The two layouts of plait_dwconv.c on the real models' depthwise layers, each alone.

    python benchmarks/dw_layouts.py                        # every layer below
    python benchmarks/dw_layouts.py --models convnext --runs 300
    PLAIT_ISA=avx2 python benchmarks/dw_layouts.py         # the 8-lane copy

Each layer is a model of one depthwise conv2d (padding k // 2) with its bias and the
model's activation (MobileNetV2 ReLU6, EfficientNet SiLU, ConvNeXt none), built once for
``c``; its calls alternate between planes on the register tile (``PLAIT_DW_LANES=0``)
and channels in the lanes (``PLAIT_DW_LANES=1``; the kernel reads the variable per
call), and the minimum of ``--runs`` calls of each is printed with their ratio.  The
two layouts give the same bits (checked).
Threads: ``OMP_NUM_THREADS`` / ``PLAIT_NUM_THREADS`` (default 2 here).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

LAYERS = {
    # model: [(channels, input size, kernel, stride), ...] (each distinct layer once)
    "mobilenetv2": [(32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 3, 1), (144, 56, 3, 2),
                    (192, 28, 3, 1), (192, 28, 3, 2), (384, 14, 3, 1), (576, 14, 3, 1),
                    (576, 14, 3, 2), (960, 7, 3, 1)],
    "efficientnet-b0": [(32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 3, 1), (144, 56, 5, 2),
                        (240, 28, 5, 1), (240, 28, 3, 2), (480, 14, 3, 1), (480, 14, 5, 1),
                        (672, 14, 5, 1), (672, 14, 5, 2), (1152, 7, 5, 1), (1152, 7, 3, 1)],
    "convnext": [(48, 56, 7, 1), (96, 28, 7, 1), (192, 14, 7, 1), (384, 7, 7, 1)],
}
ACT = {"mobilenetv2": "relu6", "efficientnet-b0": "silu", "convnext": None}


def layer_model(c: int, hw: int, k: int, s: int, act: str | None) -> tuple[object, np.ndarray]:
    """The executable of one depthwise layer (random weights) and an input."""
    import plait
    from plait.ir import BlockBuilder, TensorType, Var
    from plait.ir.expr import Constant
    from plait.op import make_call

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal((1, c, 1, 1)).astype(np.float32)
    p = Var("x", TensorType(x.shape, "float32"))
    bb = BlockBuilder()
    with bb.function("main", [p]):
        with bb.dataflow():
            y = bb.emit(make_call("conv2d", p, Constant(w), strides=(s, s),
                                  padding=(k // 2,) * 4, groups=c))
            y = bb.emit(make_call("add", y, Constant(b)))
            if act == "relu6":
                y = bb.emit(make_call("clip", y, min=0.0, max=6.0))
            elif act == "silu":
                y = bb.emit(make_call("silu", y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return plait.build(bb.get(), "c"), x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(LAYERS))
    ap.add_argument("--runs", type=int, default=200)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    from plait.runtime import VirtualMachine

    print("| model | layer | tile us | lanes us | lanes / tile |")
    print("|---|---|---|---|---|")
    for model in args.models.split(","):
        for c, hw, k, s in LAYERS[model]:
            exe, x = layer_model(c, hw, k, s, ACT[model])
            f = VirtualMachine(exe)["main"]
            times: dict[str, list[float]] = {"0": [], "1": []}
            outs = {}
            for mode in times:
                os.environ["PLAIT_DW_LANES"] = mode
                outs[mode] = f(x).copy()
            for _ in range(args.runs):
                for mode in times:
                    os.environ["PLAIT_DW_LANES"] = mode
                    t = time.perf_counter()
                    f(x)
                    times[mode].append(time.perf_counter() - t)
            del os.environ["PLAIT_DW_LANES"]
            if outs["0"].tobytes() != outs["1"].tobytes():
                raise SystemExit(f"{model} {c}@{hw} k{k} s{s}: the layouts disagree")
            tile, lanes = (min(times[m]) * 1e6 for m in ("0", "1"))
            print(f"| {model} | {c}@{hw}x{hw} k{k} s{s} | {tile:.1f} | {lanes:.1f} | "
                  f"{lanes / tile:.2f} |", flush=True)


if __name__ == "__main__":
    main()
