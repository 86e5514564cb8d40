"""The c target on aarch64: its kernel families and a model's library cross-compiled by
plait's own build code, run under qemu.

``CC=aarch64-linux-gnu-gcc`` makes plait's compiler driver build for aarch64 (its
architecture is the compiler's, ``cc -dumpmachine``): the ISA mechanism then emits one
copy of every family with Advanced SIMD (``neon``) and one without (``baseline``), the
production flags (-O3, -fPIC, -shared, the thread pool) build a shared library, and
``c.CompileKernels`` keeps it unloaded (an executable for aarch64 machines).  Two
libraries are built that way:

* every float32 family (product with its SiLU and GELU epilogues, direct, Winograd and
  grouped/depthwise convolutions (a product per group, both ways, Winograd per group,
  and the tile),
  attention, max and global average pooling),
  the int8 product (its baseline copy: it has no NEON copy), the thread pool and two
  generated kernels, with a test source calling each on odd
  shapes (tails, channels not a multiple of the vector width, stride 2, dilation,
  padding; three cases large enough to be split over 2 threads);
* a small model's library (``plait.build``'s pipeline for ``Target("c")``): a strided
  convolution, relu, a depthwise (grouped) convolution, max pooling, a linear layer and
  softmax, with its single native entry point.

A tiny driver linked with each runs under ``qemu-aarch64`` once per copy (it forces it
with ``plait_isa_force``) with ``PLAIT_NUM_THREADS=2``.  Results are compared on the host
with numpy in float64 (rtol/atol 1e-4; Winograd 2e-4: its error scales with the outputs;
pooling and the int8 product exact), the model also with the same model built for this
machine (1e-5).  The cross-built objects are kept in a cache of their own under the
temporary directory (keyed by compiler, flags and text, like plait's cache), so a second
run compiles only the drivers.

Skipped where the cross compiler, its C library or qemu is missing (Debian: ``apt-get
install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user``; .ci/run installs them).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from graph_helpers import (  # tests/target
    avg_pool_reference,
    build_graph,
    const,
    conv2d_reference,
    emit,
    max_pool_reference,
)

import plait
from plait.codegen.c import BuildOptions, CSource, compile_shared, emit_library
from plait.codegen.vm_codegen import vm_codegen
from plait.kernel import dsl
from plait.runtime import VirtualMachine
from plait.runtime.elf import host_machine
from plait.runtime.native import NativeLoadError, load_library, load_library_bytes
from plait.target.c.build import LIBRARY_NAME, entry_programs
from plait.target.c.kernels import all_family_sources, families_header_text
from plait.target.c.kernels.gemm import pack_a, pack_b
from plait.target.c.kernels.winograd import winograd_weights

CC = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"
SYSROOT = Path("/usr/aarch64-linux-gnu")
pytestmark = pytest.mark.skipif(
    shutil.which(CC) is None or shutil.which(QEMU) is None
    or not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists(),
    reason=f"needs {CC}, its C library in {SYSROOT} and {QEMU} (apt-get install "
           "gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)")

RNG = np.random.default_rng(11)
FAMILIES_RUN = ("attention", "conv", "decode", "dwconv", "gemm", "kernels", "pool", "qconv",
                "qelementwise", "qgemm", "qrows", "winograd", "wquant")


def _rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def _cases() -> tuple[list[np.ndarray], list[tuple[str, np.ndarray, float]], str]:
    """The driver's inputs (in the order it reads them), the expected outputs (name,
    value, tolerance) and the C statements of main()."""
    inputs: list[np.ndarray] = []
    expect: list[tuple[str, np.ndarray, float]] = []
    code: list[str] = []

    def take(a: np.ndarray) -> str:
        inputs.append(np.ascontiguousarray(a, np.float32))
        return f"take(in, {a.size})"

    # 1. relu(A @ B + bias): A read in place (13 rows: a 6-row panel and a 1-row tail),
    #    K = 37 (not a multiple of the 4-step unroll), N = 45 (a 13-column tail)
    m, k, n = 13, 37, 45
    a, b, bias = _rand(m, k), _rand(k, n), _rand(n)
    code.append(f"""{{ const float* a = {take(a)}; const float* b = {take(pack_b(b))};
      const float* bias = {take(bias)}; float* c = calloc({m * n}, 4);
      plait_gemm_problem p; memset(&p, 0, sizeof p);
      p.M = {m}; p.N = {n}; p.K = {k}; p.a_kind = PLAIT_A_STRIDED; p.a = a;
      p.lda_r = {k}; p.lda_c = 1; p.b_kind = PLAIT_B_PACKED; p.b = b; p.c = c; p.ldc = {n};
      p.bias_kind = PLAIT_BIAS_COL; p.bias = bias; p.relu = 1; p.batch = 1;
      if (plait_gemm(&p)) return 4; give(out, c, {m * n}); }}""")
    expect.append(("gemm", np.maximum(a.astype(np.float64) @ b + bias, 0), 1e-4))

    # 1b. the same product with the SiLU and GELU epilogues (plait_act_tile: whole
    #     vectors and a 13-column tail)
    for act, name in ((2, "gemm + SiLU"), (3, "gemm + GELU")):
        a2 = _rand(m, k) * 3
        code.append(f"""{{ const float* a = {take(a2)}; const float* b = {take(pack_b(b))};
      const float* bias = {take(bias)}; float* c = calloc({m * n}, 4);
      plait_gemm_problem p; memset(&p, 0, sizeof p);
      p.M = {m}; p.N = {n}; p.K = {k}; p.a_kind = PLAIT_A_STRIDED; p.a = a;
      p.lda_r = {k}; p.lda_c = 1; p.b_kind = PLAIT_B_PACKED; p.b = b; p.c = c; p.ldc = {n};
      p.bias_kind = PLAIT_BIAS_COL; p.bias = bias; p.act = {act}; p.batch = 1;
      if (plait_gemm(&p)) return 4; give(out, c, {m * n}); }}""")
        y = a2.astype(np.float64) @ b + bias
        if act == 2:
            ref = y / (1 + np.exp(-y))
        else:
            ref = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
        expect.append((name, ref, 1e-4))

    # 1c. the decode family: a product of 3 rows by a weight kept (N, K) with bias and
    #     residual (tails of the 4-row blocks and of the 16-lane sums), and attention of
    #     5 new rows over 9 cached ones, 3 query heads per key head, head size 7, with a
    #     sliding window of 7 positions
    w, r = _rand(37, 45), _rand(3, 37)
    x3, bias3 = _rand(3, 45), _rand(37)
    code.append(f"""{{ const float* x = {take(x3)}; const float* w = {take(w)};
      const float* bias = {take(bias3)}; const float* res = {take(r)};
      float* y = calloc({3 * 37}, 4);
      const plait_gemv_problem g = {{3, 37, 45, x, 45, w, bias, res, y}};
      if (plait_gemv(&g)) return 4; give(out, y, {3 * 37}); }}""")
    expect.append(("gemv", x3.astype(np.float64) @ w.T + bias3 + r, 1e-4))
    q, kp, vp = _rand(1, 6, 5, 7), _rand(9, 1, 2, 7), _rand(9, 1, 2, 7)
    kn, vn = _rand(1, 2, 5, 7), _rand(1, 2, 5, 7)
    code.append(f"""{{ const float* q = {take(q)}; const float* kp = {take(kp)};
      const float* vp = {take(vp)}; const float* kn = {take(kn)}; const float* vn = {take(vn)};
      float* o = calloc({6 * 5 * 7}, 4);
      const plait_kv_attention_desc d = {{1, 2, 3, 5, 9, 7, 7, q, kp, vp, kn, vn, 0.3f, o}};
      if (plait_kv_attention(&d)) return 4; give(out, o, {6 * 5 * 7}); }}""")
    keys = np.concatenate([kp[:, 0], kn[0].transpose(1, 0, 2)]).astype(np.float64)
    vals = np.concatenate([vp[:, 0], vn[0].transpose(1, 0, 2)]).astype(np.float64)
    att = np.zeros((2, 3, 5, 7))
    for h in range(6):
        for i in range(5):
            sc = 0.3 * keys[3 + i:10 + i, h // 3] @ q[0, h, i]   # positions 9 + i - 6 ...
            pr = np.exp(sc - sc.max())
            att[h // 3, h % 3, i] = (pr / pr.sum()) @ vals[3 + i:10 + i, h // 3]
    expect.append(("kv attention", att, 1e-4))

    # 2. direct convolutions: 5 channels, stride 2 with padding; dilation 2; 1x1 stride 2
    for name, (cin, o, kh, stride, pad, dil, hw) in {
        "conv stride 2": (5, 7, 3, (2, 2), (1, 1), (1, 1), (11, 13)),
        "conv dilation 2": (3, 10, 3, (1, 1), (2, 2), (2, 2), (9, 10)),
        "conv 1x1 stride 2": (6, 5, 1, (2, 2), (0, 0), (1, 1), (7, 9)),
    }.items():
        x, w = _rand(1, cin, *hw), _rand(o, cin, kh, kh)
        ref = conv2d_reference(x, w, stride, (pad[0], pad[1], pad[0], pad[1]), dil)
        oh, ow = ref.shape[2:]
        desc = (1, cin, hw[0], hw[1], o, kh, kh, *stride, *dil, pad[0], pad[1], pad[0],
                pad[1], oh, ow)
        code.append(f"""{{ static const plait_conv2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; const float* w = {take(pack_a(w.reshape(o, -1)))};
      float* y = calloc({ref.size}, 4);
      if (plait_conv2d(&d, x, w, NULL, NULL, 0, y)) return 4; give(out, y, {ref.size}); }}""")
        expect.append((name, ref, 1e-4))

    # 2b. the transposed product (pixels as rows): 2 images, stride 2 with padding to
    #     3 x 4 = 12 pixels (two 6-row panels), 19 channels (a 3-column tail), K 45
    x, w = _rand(2, 5, 6, 8), _rand(19, 5, 3, 3)
    ref = conv2d_reference(x, w, (2, 2), (1, 1, 1, 1), (1, 1))
    desc = (2, 5, 6, 8, 19, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, 4)
    code.append(f"""{{ static const plait_conv2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; const float* w = {take(pack_b(w.reshape(19, -1).T))};
      float* y = calloc({ref.size}, 4);
      if (plait_conv2d_pixel_rows(&d, x, w, NULL, NULL, 0, y)) return 4;
      give(out, y, {ref.size}); }}""")
    expect.append(("conv, pixels as rows", ref, 1e-4))

    # 2c. a grouped convolution as a product per group (plait_conv2d_desc.G, the weights
    #     packed group by group): 2 images of 3 groups of 8 channels, 7 outputs per
    #     group (a 1-row panel tail), stride 2, padding 1, bias; channels as rows and
    #     pixels as rows
    x, w, bias = _rand(2, 24, 7, 9), _rand(21, 8, 3, 3), _rand(21)
    ref = np.concatenate([conv2d_reference(x[:, i * 8:(i + 1) * 8], w[i * 7:(i + 1) * 7],
                                           (2, 2), (1, 1, 1, 1)) for i in range(3)],
                         axis=1) + bias.reshape(1, 21, 1, 1)
    desc = (2, 24, 7, 9, 21, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, *ref.shape[2:], 0, "0.0f", "0.0f", 3)
    wg = [w[i * 7:(i + 1) * 7].reshape(7, -1) for i in range(3)]
    for fn, packed in (("plait_conv2d", np.concatenate([pack_a(m) for m in wg])),
                       ("plait_conv2d_pixel_rows", np.concatenate([pack_b(m.T) for m in wg]))):
        code.append(f"""{{ static const plait_conv2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; const float* w = {take(packed)};
      const float* b = {take(bias)}; float* y = calloc({ref.size}, 4);
      if ({fn}(&d, x, w, b, NULL, 0, y)) return 4; give(out, y, {ref.size}); }}""")
        expect.append((f"grouped conv, {fn}", ref, 1e-4))

    # 3. Winograd F(2x2) and F(4x4): odd image sizes, 5 -> 7 channels, padding 1
    for mm, fn in ((2, "plait_conv2d_winograd"), (4, "plait_conv2d_winograd4")):
        x, w = _rand(1, 5, 11, 13), _rand(7, 5, 3, 3)
        ref = conv2d_reference(x, w, (1, 1), (1, 1, 1, 1))
        desc = (1, 5, 11, 13, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 11, 13)
        code.append(f"""{{ static const plait_conv2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; const float* u = {take(winograd_weights(w, mm))};
      float* y = calloc({ref.size}, 4);
      if ({fn}(&d, x, u, NULL, NULL, 0, y)) return 4; give(out, y, {ref.size}); }}""")
        expect.append((f"winograd F({mm}x{mm})", ref, 2e-4))

    #    and grouped (plait_conv2d_desc.G): 2 groups of 16 channels, 16 outputs each
    for mm, fn in ((2, "plait_conv2d_winograd"), (4, "plait_conv2d_winograd4")):
        x, w, bias = _rand(1, 32, 9, 11), _rand(32, 16, 3, 3), _rand(32)
        ref = np.concatenate([conv2d_reference(x[:, g * 16:(g + 1) * 16],
                                               w[g * 16:(g + 1) * 16], (1, 1), (1, 1, 1, 1))
                              for g in range(2)], axis=1) + bias.reshape(1, 32, 1, 1)
        desc = (1, 32, 9, 11, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 9, 11, 0, "0.0f", "0.0f", 2)
        packed = np.concatenate([winograd_weights(w[g * 16:(g + 1) * 16], mm) for g in range(2)])
        code.append(f"""{{ static const plait_conv2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; const float* u = {take(packed)};
      const float* b = {take(bias)}; float* y = calloc({ref.size}, 4);
      if ({fn}(&d, x, u, b, NULL, 0, y)) return 4; give(out, y, {ref.size}); }}""")
        expect.append((f"grouped winograd F({mm}x{mm})", ref, 2e-4))

    # 4. attention: 2 heads, 9 queries, 11 keys, head size 7
    def attention(name: str, h: int, sq: int, sk: int, dd: int, dv: int, scale: float
                  ) -> None:
        q, kk, v = _rand(h, sq, dd), _rand(h, sk, dd), _rand(h, sk, dv)
        s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), kk) * scale
        p = np.exp(s - s.max(-1, keepdims=True))
        ref = np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v)
        fields = (f"1, {h}, {sq}, {sk}, {dd}, {dv}, 0, 0, {sq * dd}, {dd}, 1, 0, 0, "
                  f"{sk * dd}, {dd}, 1, 0, 0, {sk * dv}, {dv}, 1, 0, {sq * dv}, {dv}, "
                  f"{scale}f, 0, 0, 0, 0, 0, 0.0f")
        code.append(f"""{{ static const plait_attention_desc d = {{{fields}}};
      const float* q = {take(q)}; const float* k = {take(kk)}; const float* v = {take(v)};
      float* y = calloc({ref.size}, 4);
      if (plait_attention(&d, q, k, v, NULL, y)) return 4; give(out, y, {ref.size}); }}""")
        expect.append((name, ref, 1e-4))

    attention("attention", 2, 9, 11, 7, 7, 0.5)

    # 5. max pooling 3x3, stride 2, padding 1, odd sizes
    x = _rand(1, 3, 11, 13)
    ref = max_pool_reference(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1))
    desc = (1, 3, 11, 13, *ref.shape[2:], 3, 3, 2, 2, 1, 1, 1, 1)
    code.append(f"""{{ static const plait_pool2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; float* y = calloc({ref.size}, 4);
      if (plait_max_pool2d(&d, x, y)) return 4; give(out, y, {ref.size}); }}""")
    expect.append(("max_pool2d", ref, 0.0))

    #    average pooling 3x3, stride 2, padding 1 (taps in the padding not counted),
    #    and 3x2, stride (1, 3), asymmetric padding counted (count_include_pad)
    for name, k, st, pad, count_pad in (("avg_pool2d", (3, 3), (2, 2), (1, 1, 1, 1), 0),
                                        ("avg_pool2d count_pad", (3, 2), (1, 3),
                                         (0, 1, 2, 0), 1)):
        x = _rand(2, 3, 11, 13)
        oh = (11 + pad[0] + pad[2] - k[0]) // st[0] + 1
        ow = (13 + pad[1] + pad[3] - k[1]) // st[1] + 1
        ref = avg_pool_reference(x, oh, ow, k, st, (1, 1), pad, bool(count_pad))
        desc = (2, 3, 11, 13, oh, ow, *k, *st, 1, 1, pad[0], pad[1], pad[2], pad[3],
                count_pad)
        code.append(f"""{{ static const plait_pool2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; float* y = calloc({ref.size}, 4);
      if (plait_avg_pool2d(&d, x, y)) return 4; give(out, y, {ref.size}); }}""")
        expect.append((name, ref.reshape(-1), 1e-6))

    #    and the global average: 37 planes of 7 x 7 (whole vectors and a tail)
    x = _rand(1, 37, 7, 7)
    code.append(f"""{{ static const plait_mean_desc d = {{37, 49}};
      const float* x = {take(x)}; float* y = calloc(37, 4);
      if (plait_global_avg_pool2d(&d, x, y)) return 4; give(out, y, 37); }}""")
    expect.append(("global average", x.astype(np.float64).mean((2, 3)).reshape(-1), 1e-6))

    # 6. on the thread pool (PLAIT_NUM_THREADS=2): a product, a convolution and an
    #    attention large enough to be split (gemm: M*N*K >= 2^18; attention: 2^20)
    m, k, n = 50, 70, 131
    a, b = _rand(m, k), _rand(k, n)
    code.append(f"""{{ const float* a = {take(a)}; const float* b = {take(pack_b(b))};
      float* c = calloc({m * n}, 4);
      plait_gemm_problem p; memset(&p, 0, sizeof p);
      p.M = {m}; p.N = {n}; p.K = {k}; p.a_kind = PLAIT_A_STRIDED; p.a = a;
      p.lda_r = {k}; p.lda_c = 1; p.b_kind = PLAIT_B_PACKED; p.b = b; p.c = c; p.ldc = {n};
      p.batch = 1; if (plait_gemm(&p)) return 4; give(out, c, {m * n}); }}""")
    expect.append(("gemm on 2 threads", a.astype(np.float64) @ b, 1e-4))
    def conv3x3(name: str, c: int, h: int, w_: int, o: int) -> None:
        """A 3x3 convolution, padding 1, by plait_conv2d."""
        x, w = _rand(1, c, h, w_), _rand(o, c, 3, 3)
        ref = conv2d_reference(x, w, (1, 1), (1, 1, 1, 1), (1, 1))
        desc = (1, c, h, w_, o, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, h, w_)
        code.append(f"""{{ static const plait_conv2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; const float* w = {take(pack_a(w.reshape(o, -1)))};
      float* y = calloc({ref.size}, 4);
      if (plait_conv2d(&d, x, w, NULL, NULL, 0, y)) return 4; give(out, y, {ref.size}); }}""")
        expect.append((name, ref, 1e-4))

    conv3x3("conv on 2 threads", 16, 23, 25, 20)
    # few pixels, many output channels: rows split between the threads, the im2col
    # matrix packed once for all of them (K 450: two blocks)
    conv3x3("conv on 2 threads, rows split", 50, 7, 7, 100)
    attention("attention on 2 threads", 4, 64, 67, 33, 29, 0.25)

    # 7. an int8 product (plait_qgemm.c; no NEON copy: its baseline copy runs under both
    #    caps): uint8 A (13 x 37, zero point 3) read in place, int8 B (37 x 21, zero point
    #    -2) packed by the call, int32 output with a bias; exact
    m, k, n = 13, 37, 21
    qa = RNG.integers(0, 256, (m, k), dtype=np.uint8)
    qb = RNG.integers(-128, 128, (k, n), dtype=np.int8)
    qbias = RNG.integers(-1000, 1000, n, dtype=np.int32)

    def take_bytes(a: np.ndarray) -> str:   # raw bytes, padded to whole floats
        raw = np.ascontiguousarray(a).tobytes()
        raw += b"\0" * (-len(raw) % 4)
        inputs.append(np.frombuffer(raw, np.float32))
        return f"(const void*)take(in, {len(raw) // 4})"

    code.append(f"""{{ const void* a = {take_bytes(qa)}; const void* b = {take_bytes(qb)};
      const int32_t* bias = (const int32_t*){take_bytes(qbias)};
      static const uint8_t za = 3; static const int8_t zb = -2;
      int32_t* c = calloc({m * n}, 4);
      plait_qgemm_problem p; memset(&p, 0, sizeof p);
      p.M = {m}; p.N = {n}; p.K = {k}; p.batch = 1; p.a = a; p.a_signed = 0;
      p.lda_r = {k}; p.lda_c = 1; p.za = &za; p.b = b; p.b_signed = 1; p.ldb_r = {n};
      p.ldb_c = 1; p.zb = &zb; p.out.kind = PLAIT_Q_OUT_I32; p.out.bias = bias;
      p.c = c; p.ldc_r = {n}; p.ldc_c = 1;
      if (plait_qgemm(&p)) return 4; give(out, (const float*)c, {m * n}); }}""")
    expect.append(("int8 product", (qa.astype(np.int64) - 3) @ (qb.astype(np.int64) + 2)
                   + qbias, 0.0))

    # 7b. int8 rows (plait_qrows.c, baseline copy): QLinearSoftmax of 5 rows of 37 uint8
    #     codes (the exponent table given), and the layer norm of 4 rows of 33 int8 codes
    #     to int8; the codes compared as int32, exact against numpy (the qnn reference's
    #     softmax, a float64 normalization rounded to float32 and quantized)
    from plait.dialects.qnn import reference as R

    sx = RNG.integers(0, 256, (5, 37), dtype=np.uint8)
    table = R.softmax_exp_table(np.float32(0.1), 37, signed=False)
    code.append(f"""{{ const void* x = {take_bytes(sx)}; const float* t = {take(table)};
      static const plait_qsoftmax_desc d = {{.rows = 5, .d = 37, .is_signed = 0,
                                             .ys = 256.0f, .yz = 0}};
      uint8_t* y = calloc(5 * 37, 1); int32_t* c = calloc(5 * 37, 4);
      if (plait_qsoftmax(&d, t, x, y)) return 4;
      for (int i = 0; i < 5 * 37; ++i) c[i] = y[i];
      give(out, (const float*)c, 5 * 37); }}""")
    expect.append(("int8 softmax", R.softmax(sx, np.float32(0.1), np.uint8(0),
                                             np.float32(1 / 256), np.uint8(0)).astype(np.int32),
                   0.0))
    lx = RNG.integers(-128, 128, (4, 33), dtype=np.int8)
    g, be = RNG.uniform(0.5, 1.5, 33).astype(np.float32), _rand(33) * 0.3
    code.append(f"""{{ const void* x = {take_bytes(lx)}; const float* g = {take(g)};
      const float* b = {take(be)};
      static const plait_qlayer_norm_desc d = {{.rows = 4, .d = 33, .x_signed = 1,
        .y_signed = 1, .xs = 0.05f, .ys = 0.02f, .eps = 1e-5f, .xz = -3, .yz = 5}};
      int8_t* y = calloc(4 * 33, 1); int32_t* c = calloc(4 * 33, 4);
      if (plait_qlayer_norm(&d, x, g, b, y)) return 4;
      for (int i = 0; i < 4 * 33; ++i) c[i] = y[i];
      give(out, (const float*)c, 4 * 33); }}""")
    xf = (lx.astype(np.float64) + 3) * float(np.float32(0.05))
    mu = xf.mean(1, keepdims=True)
    var = ((xf - mu) ** 2).mean(1, keepdims=True)
    yf = ((xf - mu) / np.sqrt(var + float(np.float32(1e-5))) * g + be.astype(np.float64))
    expect.append(("int8 layer norm", R.quantize(yf.astype(np.float32), np.float32(0.02),
                                                 np.int8(5), out_dtype="int8")
                   .astype(np.int32), 0.0))

    # 8. grouped and depthwise convolutions (plait_dwconv.c): a depthwise 5x5 stride 2
    #    with asymmetric padding, bias and SiLU (19 columns: tails of every vector
    #    width); a grouped 3x3 with dilation 2, 2 in and 3 out channels per group, bias,
    #    residual and relu; a depthwise 7x7 on 24 channels of 30 x 30 (on 2 threads);
    #    with channels in the lanes (output rows of at most 8 columns): a depthwise 3x3
    #    stride 2 on 21 channels (two 8-channel blocks and a tail of 5) to 7 x 7 with bias,
    #    residual, relu and SiLU, and a depthwise 3x3 with dilation 2 on 10 channels
    #    (the window read at run time) to 6 x 5
    for name, (c, o, g, k, stride, pad, dil, hw, act, resid) in {
        "depthwise 5x5 stride 2": (6, 6, 6, 5, (2, 2), (1, 2, 2, 1), (1, 1), (13, 19),
                                   2, False),
        "grouped 3x3 dilation 2": (6, 9, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), (9, 11),
                                   0, True),
        "depthwise 7x7 on 2 threads": (24, 24, 24, 7, (1, 1), (3, 3, 3, 3), (1, 1),
                                       (30, 30), 0, False),
        "depthwise 3x3 stride 2, channels in lanes": (21, 21, 21, 3, (2, 2), (1, 1, 1, 1),
                                                      (1, 1), (13, 14), 2, True),
        "depthwise 3x3 dilation 2, channels in lanes": (10, 10, 10, 3, (1, 1), (2, 2, 2, 2),
                                                        (2, 2), (6, 5), 0, False),
    }.items():
        x, w, bias = _rand(1, c, *hw), _rand(o, c // g, k, k), _rand(o)
        cg, og = c // g, o // g
        ref = np.concatenate([conv2d_reference(x[:, i * cg:(i + 1) * cg],
                                               w[i * og:(i + 1) * og], stride, pad, dil)
                              for i in range(g)], axis=1) + bias.reshape(1, o, 1, 1)
        r = _rand(*ref.shape)
        if resid:
            ref = np.maximum(ref + r, 0)
        if act == 2:
            ref = ref / (1 + np.exp(-ref))
        desc = (1, c, *hw, o, g, k, k, *stride, *dil, pad[0], pad[1], *ref.shape[2:], act,
                "0.0f", "0.0f")
        code.append(f"""{{ static const plait_dwconv2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; const float* w = {take(w)}; const float* b = {take(bias)};
      const float* r = {take(r)}; float* y = calloc({ref.size}, 4);
      if (plait_dwconv2d(&d, x, w, b, {"r" if resid else "NULL"}, {int(resid)}, y)) return 4;
      give(out, y, {ref.size}); }}""")
        expect.append((name, ref, 1e-4))

    #    and with channels last (desc.nhwc): a depthwise 3x3 on 21 channels (two 8-lane
    #    blocks and a tail of 5) of 9 x 10, bias, residual, relu and SiLU, input, output
    #    and residual N x H x W x C, the weights KH x KW x C
    x, w, bias = _rand(1, 21, 9, 10), _rand(21, 1, 3, 3), _rand(21)
    ref = np.concatenate([conv2d_reference(x[:, i:i + 1], w[i:i + 1], (1, 1), (1, 1, 1, 1),
                                           (1, 1)) for i in range(21)], axis=1)
    ref = ref + bias.reshape(1, 21, 1, 1)
    r = _rand(*ref.shape)
    ref = np.maximum(ref + r, 0)
    ref = (ref / (1 + np.exp(-ref))).transpose(0, 2, 3, 1)
    code.append(f"""{{ static const plait_dwconv2d_desc d = {{.N = 1, .C = 21, .H = 9, .W = 10,
        .O = 21, .G = 21, .KH = 3, .KW = 3, .SH = 1, .SW = 1, .DH = 1, .DW = 1, .PT = 1,
        .PL = 1, .OH = 9, .OW = 10, .act = 2, .nhwc = 1}};
      const float* x = {take(x.transpose(0, 2, 3, 1))};
      const float* w = {take(w.reshape(21, 9).T)}; const float* b = {take(bias)};
      const float* r = {take(r.transpose(0, 2, 3, 1))}; float* y = calloc({ref.size}, 4);
      if (plait_dwconv2d(&d, x, w, b, r, 1, y)) return 4;
      give(out, y, {ref.size}); }}""")
    expect.append(("depthwise 3x3 channels last", ref, 1e-4))

    #    and a squeeze-and-excite gate: 2 images of 19 planes of 3 x 5, 19 -> 5 -> 19
    #    channels, SiLU, biases
    x, w1, b1, w2, b2 = _rand(2, 19, 3, 5), _rand(5, 19), _rand(5), _rand(19, 5), _rand(19)
    hh = x.astype(np.float64).mean((2, 3)) @ w1.T + b1
    gg = (hh / (1 + np.exp(-hh))) @ w2.T + b2
    ref = x / (1 + np.exp(-gg))[:, :, None, None]
    code.append(f"""{{ static const plait_se_desc d = {{2, 19, 15, 5, 2}};
      const float* x = {take(x)}; const float* w1 = {take(w1)}; const float* b1 = {take(b1)};
      const float* w2 = {take(w2)}; const float* b2 = {take(b2)};
      float* y = calloc({ref.size}, 4);
      if (plait_se_scale(&d, x, w1, b1, w2, b2, y)) return 4; give(out, y, {ref.size}); }}""")
    expect.append(("squeeze-and-excite", ref, 1e-5))

    # 9. generated kernels: s[i] = sum_j exp(x[i, j]) * x[i, j] + 0.5 (41 columns), and
    #    an elementwise kernel whose parallel loop (40960 iterations) runs on the pool
    x = _rand(5, 41)
    code.append(f"""{{ const float* x = {take(x)}; float* s = calloc(5, 4);
      void* args[2] = {{(void*)x, s}}; int64_t sizes[1] = {{0}};
      if (plait_k_k(args, sizes)) return 4; give(out, s, 5); }}""")
    expect.append(("generated kernel", (np.exp(x.astype(np.float64)) * x + 0.5).sum(1), 1e-4))
    x = _rand(256, 160)
    code.append(f"""{{ const float* x = {take(x)}; float* y = calloc({x.size}, 4);
      void* args[2] = {{(void*)x, y}}; int64_t sizes[1] = {{0}};
      if (plait_k_par(args, sizes)) return 4; give(out, y, {x.size}); }}""")
    expect.append(("generated parallel kernel", np.exp(x.astype(np.float64)) * x - 0.5, 1e-5))
    return inputs, expect, "\n    ".join(code)


CASES_SOURCE = """\
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
{headers}
int32_t plait_k_k(void* const* args, const int64_t* sizes);
int32_t plait_k_par(void* const* args, const int64_t* sizes);

static float* take(FILE* f, size_t n) {{
    float* p = malloc(n * sizeof(float));
    if (!p || fread(p, sizeof(float), n, f) != n) exit(5);
    return p;
}}

static void give(FILE* f, const float* p, size_t n) {{ fwrite(p, sizeof(float), n, f); }}

/* every case: inputs read from in_path, outputs written to out_path; 0 on success */
__attribute__((visibility("default"))) int plait_test_cases(const char* in_path,
                                                            const char* out_path) {{
    FILE* in = fopen(in_path, "rb");
    FILE* out = fopen(out_path, "wb");
    if (!in || !out) return 6;
    {code}
    fclose(out);
    fclose(in);
    return 0;
}}
"""

MAIN = """\
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
const char* plait_isa_force(const char* isa);
const char* plait_isa_report(void);
const char* plait_pool_report(void);
{declare}

int main(int argc, char** argv) {{
    if (argc != 4) return 2;
    const char* err = plait_isa_force(argv[1]);
    if (err) {{ fprintf(stderr, "%s\\n", err); return 3; }}
    printf("%s\\n", plait_isa_report());
    int rc;
    {run}
    if (rc) return rc;
    printf("%s\\n", plait_pool_report());
    return 0;
}}
"""

CASES_MAIN = MAIN.format(declare="int plait_test_cases(const char* in, const char* out);",
                         run="rc = plait_test_cases(argv[2], argv[3]);")


def _kernels() -> dict[str, Any]:
    """A reduction (an accumulator loop of 41) and an elementwise kernel with a parallel
    loop of 256 x 160 iterations (run on the pool: more than 16384)."""
    x = dsl.placeholder((5, 41), "float32", "x")
    r = dsl.reduce_axis(41, "r")
    s = dsl.compute((5,), lambda i: dsl.sum(dsl.exp(x[i, r]) * x[i, r] + 0.5, axis=[r]), "s")
    y = dsl.placeholder((256, 160), "float32", "y")
    e = dsl.compute((256, 160), lambda i, j: dsl.exp(y[i, j]) * y[i, j] - 0.5, "e")
    return {"k": dsl.create_kernel([x, s], "k"), "par": dsl.create_kernel([y, e], "par")}


HOST_ENV: dict[str, str | None] = {}
"""$CC and $PLAIT_CACHE_DIR as they were before :func:`cross` set them."""


@pytest.fixture(scope="module")
def cross() -> Iterator[Path]:
    """$CC is the cross compiler and the plait cache a persistent one of its own while
    the module's tests run."""
    cache = Path(tempfile.gettempdir()) / f"plait-test-aarch64-{os.getuid()}"
    cache.mkdir(exist_ok=True)
    HOST_ENV.update({k: os.environ.get(k) for k in ("CC", "PLAIT_CACHE_DIR")})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CC", CC)
        mp.setenv("PLAIT_CACHE_DIR", str(cache))
        yield cache


def _link(d: Path, lib: Path, name: str, main: str) -> None:
    """The aarch64 program ``d/name`` running ``main`` against the library ``lib``
    (copied next to it as lib<name>.so, found through its rpath)."""
    shutil.copyfile(lib, d / f"lib{name}.so")
    (d / f"{name}.c").write_text(main)
    r = subprocess.run([CC, "-O1", f"{name}.c", "-o", name, f"-L{d}", f"-l{name}",
                        "-Wl,-rpath,$ORIGIN"], cwd=d, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr


def _qemu(d: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PLAIT_NUM_THREADS="2")
    env.pop("PLAIT_ISA", None)
    return subprocess.run([QEMU, "-L", str(SYSROOT), *args], cwd=d, capture_output=True,
                          text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def families(cross: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, list[Any]]:
    """The aarch64 library of every family (plus the test cases), the driver, its input
    file and the expected outputs."""
    d = tmp_path_factory.mktemp("aarch64-families")
    inputs, expect, code = _cases()
    cases = CSource(CASES_SOURCE.format(
        headers=families_header_text(["gemm", "pool", "qgemm", "dwconv", "decode"]), code=code),
        (), "plait_test_cases.c")
    emitted = emit_library(_kernels(), [*all_family_sources(), cases], threads=True,
                           arch="aarch64")
    assert emitted.symbols["k"] == "plait_k_k" and emitted.symbols["par"] == "plait_k_par"
    assert "plait_threads.c" in emitted.files and "plait_gemm__neon.c" in emitted.files
    lib = compile_shared(emitted.files, BuildOptions(threads=True))
    _link(d, lib, "cases", CASES_MAIN)
    (d / "in.bin").write_bytes(b"".join(a.tobytes() for a in inputs))
    return d, expect


def _reports(stdout: str) -> tuple[dict[str, Any], dict[str, Any]]:
    lines = stdout.splitlines()
    return json.loads(lines[0]), json.loads(lines[-1])


def _check_run(r: subprocess.CompletedProcess[str], isa: str) -> dict[str, str]:
    """The driver succeeded, ran every family's copy ``isa`` and used 2 threads."""
    assert r.returncode == 0, r.stderr
    report, pool = _reports(r.stdout)
    assert report["arch"] == "aarch64" and report["cpu"]["neon"] == 1
    assert report["supported"] == ["neon", "baseline"]
    chosen = {f["name"]: f["chosen"] for f in report["families"]}
    # a family without a copy for isa (the int8 products have no NEON copy) runs its
    # baseline copy
    built = {f["name"]: f["built"] for f in report["families"]}
    assert chosen == {n: isa if isa in built[n] else "baseline" for n in chosen}
    assert built.get("qgemm", ["baseline"]) == ["baseline"]
    assert pool["threads"] == 2
    return chosen


@pytest.mark.parametrize("isa", ["neon", "baseline"])
def test_every_family_on_aarch64_matches_numpy(families: tuple[Path, list[Any]],
                                               isa: str) -> None:
    d, expect = families
    out = d / f"out-{isa}.bin"
    r = _qemu(d, "./cases", isa, "in.bin", out.name)
    chosen = _check_run(r, isa)
    assert sorted(chosen) == list(FAMILIES_RUN)
    _, pool = _reports(r.stdout)
    assert pool["parallel"] > 0, pool   # the thread pool ran tasks on 2 threads
    got = np.frombuffer(out.read_bytes(), np.float32)
    at = 0
    for name, ref, tol in expect:
        part = got[at:at + ref.size].reshape(ref.shape)
        at += ref.size
        if ref.dtype.kind == "i":   # integer results, exact (their bytes read as int32)
            np.testing.assert_array_equal(part.view(np.int32), ref, err_msg=f"{name} ({isa})")
        else:
            np.testing.assert_allclose(part, ref, rtol=tol, atol=tol,
                                       err_msg=f"{name} ({isa})")
    assert at == got.size


def test_an_x86_instruction_set_is_refused_on_aarch64(families: tuple[Path, list[Any]]
                                                     ) -> None:
    d, _ = families
    r = _qemu(d, "./cases", "avx2", "in.bin", "unused.bin")
    assert r.returncode == 3
    assert "avx2 is an instruction set of x86_64, not of this aarch64 machine" in r.stderr
    assert "use one of neon, baseline" in r.stderr


MODEL_X = RNG.uniform(-1, 1, (1, 5, 13, 11)).astype(np.float32)
MODEL_W = RNG.uniform(-1, 1, (6, 5, 3, 3)).astype(np.float32)
MODEL_B = RNG.uniform(-1, 1, (6,)).astype(np.float32)
MODEL_DW = RNG.uniform(-1, 1, (6, 1, 3, 3)).astype(np.float32)
MODEL_L = RNG.uniform(-1, 1, (10, 6 * 3 * 3)).astype(np.float32)


def _model() -> plait.IRModule:
    """conv 5 -> 6 channels stride 2 + bias + relu, a depthwise 3x3 (groups 6), a 2x2 max
    pool, linear to 10, softmax."""
    def body(bb: Any, p: Any) -> Any:
        y = emit(bb, "conv2d", p[0], const(MODEL_W), strides=(2, 2), padding=(1, 1, 1, 1))
        y = emit(bb, "relu", emit(bb, "add", y, const(MODEL_B.reshape(6, 1, 1))))
        y = emit(bb, "conv2d", y, const(MODEL_DW), padding=(1, 1, 1, 1), groups=6)
        y = emit(bb, "max_pool2d", y, pool_size=(2, 2), strides=(2, 2))
        y = emit(bb, "reshape", y, shape=(1, 6 * 3 * 3))
        return emit(bb, "softmax", emit(bb, "linear", y, const(MODEL_L)), axis=-1)
    return build_graph({"x": MODEL_X.shape}, body)


def _model_reference() -> np.ndarray:
    y = conv2d_reference(MODEL_X, MODEL_W, (2, 2), (1, 1, 1, 1)) + MODEL_B.reshape(1, 6, 1, 1)
    y = np.maximum(y, 0)
    y = np.concatenate([conv2d_reference(y[:, c:c + 1], MODEL_DW[c:c + 1], (1, 1),
                                         (1, 1, 1, 1)) for c in range(6)], axis=1)
    y = max_pool_reference(y, (2, 2), (2, 2), (1, 1), (0, 0, 0, 0)).reshape(1, -1)
    z = y @ MODEL_L.T.astype(np.float64)
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _entry_arguments(mod: plait.IRModule, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The arrays ``main``'s entry function passes to the native entry point: its inputs
    and constants, in order."""
    from plait.ir.expr import Call, Constant, ExternFunc, Var

    entry = next(f for _, f in mod.items() if getattr(f, "attrs", {}).get("entry_of") == "main")
    for block in entry.body.blocks:
        for binding in block.bindings:
            call = binding.value
            if (isinstance(call, Call) and call.args
                    and isinstance(call.args[0], ExternFunc)
                    and call.args[0].symbol == "main@entry"):
                return [a.data if isinstance(a, Constant) else inputs[a.name_hint]
                        for a in call.args[1].fields if isinstance(a, Constant | Var)]
    raise AssertionError("main__entry does not call main@entry")


@pytest.fixture(scope="module")
def model(cross: Path, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, list[tuple[str, int]], Any]:
    """The model built for Target("c") by plait's pipeline with the cross compiler: its
    library linked with a driver calling the single entry point; the outputs to read
    (name, bytes); the executable."""
    d = tmp_path_factory.mktemp("aarch64-model")
    target = plait.Target("c")
    mod = plait.default_pipeline(target)(_model().with_attrs(target=target))
    exe = vm_codegen(mod)
    (program,) = entry_programs(mod)
    args = _entry_arguments(mod, {"x": MODEL_X})
    n_in = len(program.params) - program.num_outputs
    assert len(args) == n_in
    lines, outputs = [], []
    for i, (name, shape, dtype) in enumerate(program.params):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        lines.append(f"void* p{i} = malloc({nbytes} + 1); if (!p{i}) return 5;")
        if i < n_in:
            assert args[i].shape == tuple(shape) and args[i].dtype == np.dtype(dtype)
            lines.append(f"if (fread(p{i}, 1, {nbytes}, in) != {nbytes}) return 5;")
        elif i != program.workspace:
            outputs.append((name, i, nbytes))
    params = ", ".join(f"p{i}" for i in range(len(program.params)))
    writes = " ".join(f"fwrite(p{i}, 1, {n}, out);" for _, i, n in outputs)
    run = ("FILE* in = fopen(argv[2], \"rb\"); FILE* out = fopen(argv[3], \"wb\");\n    "
           "if (!in || !out) return 6;\n    " + "\n    ".join(lines)
           + f"\n    void* args[] = {{{params}}}; int64_t sizes[1] = {{0}};\n    "
           f"rc = plait_e_main_entry(args, sizes);\n    {writes} fclose(out);")
    main = MAIN.format(declare="int32_t plait_e_main_entry(void* const*, const int64_t*);",
                       run=run)
    lib = d / "model.so"
    lib.write_bytes(bytes(mod.attrs["native_libs"][LIBRARY_NAME].data))
    _link(d, lib, "model", main)
    (d / "in.bin").write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for a in args))
    return d, [(n, b) for n, _, b in outputs], (mod, exe)


@pytest.mark.parametrize("isa", ["neon", "baseline"])
def test_a_model_built_for_aarch64_matches_numpy_and_this_machine(
        model: tuple[Path, list[tuple[str, int]], Any], isa: str) -> None:
    d, outputs, _ = model
    r = _qemu(d, "./model", isa, "in.bin", f"out-{isa}.bin")
    chosen = _check_run(r, isa)
    assert {"conv", "gemm", "pool", "kernels"} <= set(chosen)
    (_, nbytes), = outputs
    got = np.frombuffer((d / f"out-{isa}.bin").read_bytes(), np.float32).reshape(1, 10)
    assert got.nbytes == nbytes
    np.testing.assert_allclose(got, _model_reference(), rtol=1e-4, atol=1e-4)
    with pytest.MonkeyPatch.context() as mp:   # this machine's compiler and cache
        for k, v in HOST_ENV.items():
            mp.delenv(k, raising=False) if v is None else mp.setenv(k, v)
        host = VirtualMachine(plait.build(_model(), plait.Target("c")))["main"](MODEL_X)
    np.testing.assert_allclose(got, host, rtol=1e-5, atol=1e-5)


def test_a_library_built_for_aarch64_is_refused_here_with_the_reason(
        model: tuple[Path, list[tuple[str, int]], Any]) -> None:
    """The executable built with the cross compiler holds the aarch64 library; here (not
    aarch64) loading it says why instead of the dynamic loader's "No such file"."""
    if host_machine() == "aarch64":
        pytest.skip("this machine is aarch64: the library runs here")
    d, _, (_, exe) = model
    why = f"it is built for aarch64, and this machine is {host_machine()}: run it on an aarch64"
    with pytest.raises(NativeLoadError, match=why):
        load_library(d / "model.so")
    with pytest.raises(NativeLoadError, match="refusing to map it: " + why):
        load_library_bytes((d / "model.so").read_bytes())
    with pytest.raises(NativeLoadError, match=why):
        VirtualMachine(exe)["main"](MODEL_X)
