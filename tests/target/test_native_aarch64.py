"""The c target's kernel families on aarch64: cross-compiled, run under qemu.

Every float32 family (product, direct and Winograd convolutions, attention, pooling) and
a generated kernel are compiled for aarch64 by the ISA mechanism (one copy with Advanced
SIMD, ``neon``, and one without, ``baseline``) with ``aarch64-linux-gnu-gcc``, linked
with a small driver into a static executable, and run under ``qemu-aarch64`` once per
copy (the driver forces it with ``plait_isa_force``).  Each result is compared with
numpy in float64 (rtol/atol 1e-4; Winograd 2e-4: its error scales with the outputs).
Compiled at -O1 to keep the suite fast (the production build uses -O3); no threads.

Skipped where the cross compiler or qemu is missing (Debian: ``apt-get install
gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from graph_helpers import conv2d_reference, max_pool_reference  # tests/target

from plait.codegen.c.emit import emit_library
from plait.kernel import dsl
from plait.target.c.families import all_family_sources, header_text
from plait.target.c.gemm import pack_a, pack_b, winograd_weights

CC = "aarch64-linux-gnu-gcc"
QEMU = "qemu-aarch64"
pytestmark = pytest.mark.skipif(
    shutil.which(CC) is None or shutil.which(QEMU) is None,
    reason=f"needs {CC} and {QEMU} (apt-get install gcc-aarch64-linux-gnu "
           "libc6-dev-arm64-cross qemu-user)")

RNG = np.random.default_rng(11)


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

    # 4. attention: 2 heads, 9 queries, 11 keys, head size 7
    h, sq, sk, dd = 2, 9, 11, 7
    q, kk, v = _rand(h, sq, dd), _rand(h, sk, dd), _rand(h, sk, dd)
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), kk) * 0.5
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v)
    fields = (f"1, {h}, {sq}, {sk}, {dd}, {dd}, 0, 0, {sq * dd}, {dd}, 1, "
              f"0, 0, {sk * dd}, {dd}, 1, 0, 0, {sk * dd}, {dd}, 1, 0, {sq * dd}, {dd}, 0.5f, "
              "0, 0, 0, 0, 0, 0.0f")
    code.append(f"""{{ static const plait_attention_desc d = {{{fields}}};
      const float* q = {take(q)}; const float* k = {take(kk)}; const float* v = {take(v)};
      float* y = calloc({ref.size}, 4);
      if (plait_attention(&d, q, k, v, NULL, y)) return 4; give(out, y, {ref.size}); }}""")
    expect.append(("attention", ref, 1e-4))

    # 5. max pooling 3x3, stride 2, padding 1, odd sizes
    x = _rand(1, 3, 11, 13)
    ref = max_pool_reference(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1))
    desc = (1, 3, 11, 13, *ref.shape[2:], 3, 3, 2, 2, 1, 1, 1, 1)
    code.append(f"""{{ static const plait_pool2d_desc d = {{{', '.join(map(str, desc))}}};
      const float* x = {take(x)}; float* y = calloc({ref.size}, 4);
      if (plait_max_pool2d(&d, x, y)) return 4; give(out, y, {ref.size}); }}""")
    expect.append(("max_pool2d", ref, 0.0))

    # 6. a generated kernel: s[i] = sum_j exp(x[i, j]) * x[i, j] + 0.5 (41 columns)
    x = _rand(5, 41)
    code.append(f"""{{ const float* x = {take(x)}; float* s = calloc(5, 4);
      void* args[2] = {{(void*)x, s}}; int64_t sizes[1] = {{0}};
      if (plait_k_k(args, sizes)) return 4; give(out, s, 5); }}""")
    expect.append(("generated kernel", (np.exp(x.astype(np.float64)) * x + 0.5).sum(1), 1e-4))
    return inputs, expect, "\n    ".join(code)


DRIVER = """\
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
{headers}
const char* plait_isa_force(const char* isa);
const char* plait_isa_report(void);
int32_t plait_k_k(void* const* args, const int64_t* sizes);

static float* take(FILE* f, size_t n) {{
    float* p = malloc(n * sizeof(float));
    if (!p || fread(p, sizeof(float), n, f) != n) exit(5);
    return p;
}}

static void give(FILE* f, const float* p, size_t n) {{ fwrite(p, sizeof(float), n, f); }}

int main(int argc, char** argv) {{
    if (argc != 4) return 2;
    const char* err = plait_isa_force(argv[1]);
    if (err) {{ fprintf(stderr, "%s\\n", err); return 3; }}
    printf("%s\\n", plait_isa_report());
    FILE* in = fopen(argv[2], "rb");
    FILE* out = fopen(argv[3], "wb");
    if (!in || !out) return 6;
    {code}
    fclose(out);
    return 0;
}}
"""


def _kernel() -> Any:
    x = dsl.placeholder((5, 41), "float32", "x")
    r = dsl.reduce_axis(41, "r")
    s = dsl.compute((5,), lambda i: dsl.sum(dsl.exp(x[i, r]) * x[i, r] + 0.5, axis=[r]), "s")
    return dsl.create_kernel([x, s], "k")


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any], Any]:
    """The static aarch64 driver, its input file and the expected outputs."""
    d = tmp_path_factory.mktemp("aarch64")
    inputs, expect, code = _cases()
    emitted = emit_library({"k": _kernel()}, all_family_sources(), threads=False,
                           arch="aarch64")
    assert emitted.symbols["k"] == "plait_k_k"
    files = dict(emitted.files)
    files["driver.c"] = DRIVER.format(
        headers=header_text("plait_gemm.h") + header_text("plait_pool.h"), code=code)
    for name, text in files.items():
        (d / name).write_text(text)

    def compile_one(name: str) -> str:
        r = subprocess.run([CC, "-O1", "-fno-math-errno", "-c", name, "-o", name + ".o"],
                           cwd=d, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{name}:\n{r.stderr}"
        return name + ".o"

    with ThreadPoolExecutor(2) as pool:
        objects = list(pool.map(compile_one, files))
    r = subprocess.run([CC, "-static", "-o", "driver", *objects, "-lm"], cwd=d,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    (d / "in.bin").write_bytes(b"".join(a.tobytes() for a in inputs))
    return d, expect, emitted


@pytest.mark.parametrize("isa", ["neon", "baseline"])
def test_every_family_on_aarch64_matches_numpy(driver: tuple[Path, list[Any], Any],
                                               isa: str) -> None:
    d, expect, _ = driver
    out = d / f"out-{isa}.bin"
    r = subprocess.run([QEMU, "./driver", isa, "in.bin", out.name], cwd=d,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.splitlines()[0])
    assert report["arch"] == "aarch64" and report["cpu"]["neon"] == 1
    chosen = {f["name"]: f["chosen"] for f in report["families"]}
    assert chosen == dict.fromkeys(
        ("attention", "conv", "gemm", "kernels", "pool", "winograd"), isa)
    got = np.frombuffer(out.read_bytes(), np.float32)
    at = 0
    for name, ref, tol in expect:
        part = got[at:at + ref.size].reshape(ref.shape)
        at += ref.size
        np.testing.assert_allclose(part, ref, rtol=tol, atol=tol, err_msg=f"{name} ({isa})")
    assert at == got.size


def test_an_x86_instruction_set_is_refused_on_aarch64(driver: tuple[Path, list[Any], Any]
                                                     ) -> None:
    d, _, _ = driver
    r = subprocess.run([QEMU, "./driver", "avx2", "in.bin", "unused.bin"], cwd=d,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 3
    assert "avx2 is an instruction set of x86_64, not of this aarch64 machine" in r.stderr
    assert "use one of neon, baseline" in r.stderr
