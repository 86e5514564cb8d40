"""Recurrent layers ``RNN``, ``GRU`` and ``LSTM``, unrolled over the sequence length:
the input projection of every step is one ``matmul``, then each step is a few small
matmuls and elementwise ops.  Forward, reverse and bidirectional directions,
``sequence_lens`` (steps past a sequence's end keep the state and output zeros),
``clip``, custom activations, peepholes and ``layout`` are supported.  The batch may be
symbolic.  A symbolic sequence length needs a maximum (``from_onnx(dim_ranges=...)``,
or the ``Dim``'s range a dynamo export records): the layer is unrolled to it, the input
padded with zero steps, the steps past the length masked as ``sequence_lens`` masks
them, and the output sliced back to the length; without a maximum there is no number
of steps to unroll, and the import says so."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ....ir import symbolic
from ....ir.expr import Expr, Tuple
from ....ir.types import Dim
from ..context import NodeContext
from ..registry import converter
from .common import cast, scalar, select, shape_of
from .shape import pad_sizes

Act = Callable[[Expr], Expr]

MAX_UNROLLED_STEPS = 1024
"""The most steps a recurrent layer of a symbolic sequence length is unrolled to."""


def _activation(ctx: NodeContext, name: str, alpha: float | None, beta: float | None) -> Act:
    dt = ctx.dtype(0)

    def sc(v: float) -> Expr:
        return scalar(ctx, v, dt)

    lname = name.lower()
    if lname == "sigmoid":
        return lambda x: ctx.call("sigmoid", x)
    if lname == "tanh":
        return lambda x: ctx.call("tanh", x)
    if lname == "relu":
        return lambda x: ctx.call("relu", x)
    if lname == "leakyrelu":
        return lambda x: ctx.call("leaky_relu", x, alpha=alpha if alpha is not None else 0.01)
    if lname == "hardsigmoid":
        return lambda x: ctx.call(
            "hard_sigmoid", x, alpha=alpha if alpha is not None else 0.2,
            beta=beta if beta is not None else 0.5,
        )  # fmt: skip
    if lname == "affine":
        a, b = alpha if alpha is not None else 1.0, beta if beta is not None else 0.0
        return lambda x: ctx.call("add", ctx.call("multiply", x, sc(a)), sc(b))
    if lname == "scaledtanh":
        a, b = alpha if alpha is not None else 1.0, beta if beta is not None else 1.0
        return lambda x: ctx.call(
            "multiply", sc(a), ctx.call("tanh", ctx.call("multiply", x, sc(b)))
        )
    if lname == "softsign":
        return lambda x: ctx.call("divide", x, ctx.call("add", sc(1), ctx.call("abs", x)))
    if lname == "softplus":
        return lambda x: ctx.call("softplus", x)
    if lname == "elu":
        a = alpha if alpha is not None else 1.0
        return lambda x: ctx.call(
            "where",
            ctx.call("less", x, sc(0)),
            ctx.call("multiply", sc(a), ctx.call("expm1", x)),
            x,
        )
    if lname == "thresholdedrelu":
        a = alpha if alpha is not None else 1.0
        return lambda x: ctx.call("where", ctx.call("greater", x, sc(a)), x, sc(0))
    ctx.fail(f"activation {name!r} is not supported", "activations")


def _activations(ctx: NodeContext, defaults: list[str], n_dir: int) -> list[list[Act]]:
    names = ctx.attr("activations", None) or defaults * n_dir
    if len(names) == len(defaults) and n_dir == 2:
        names = names * 2
    alphas = ctx.attr_floats("activation_alpha", None) or []
    betas = ctx.attr_floats("activation_beta", None) or []
    acts = []
    for i, n in enumerate(names):
        acts.append(
            _activation(
                ctx, n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None
            )
        )
    k = len(defaults)
    return [acts[d * k : (d + 1) * k] for d in range(n_dir)]


class _Setup:
    """What the three layers share: the inputs per direction and the step loop."""

    def __init__(self, ctx: NodeContext, n_gates: int, defaults: list[str]) -> None:
        self.ctx = ctx
        direction = ctx.choice("direction", "forward", ("forward", "reverse", "bidirectional"))
        self.dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        self.layout = ctx.attr_int("layout", 0)
        x = ctx.x(0)
        if self.layout:
            x = ctx.call("permute_dims", x, axes=(1, 0, 2))
        seq, batch, _ = shape_of(ctx, x)
        self.length: Dim = seq       # the sequence length: static, or symbolic
        self.length_value: Expr | None = None
        if not isinstance(seq, int):
            x, seq = self._padded_to_maximum(x, seq)
        self.x = x
        self.seq, self.batch = seq, batch
        self.hidden = ctx.attr_int("hidden_size", None) or shape_of(ctx, ctx.x(2))[2]
        self.n_gates = n_gates
        self.dt = ctx.dtype(0)
        self.clip = ctx.attr_float("clip", None)
        self.acts = _activations(ctx, defaults, len(self.dirs))
        self.lens = cast(ctx, ctx.x(4), "int64") if ctx.has(4) else None
        if self.length_value is not None:   # the steps past the symbolic length: masked
            limit = ctx.call("reshape", self.length_value, shape=(1,))
            self.lens = limit if self.lens is None else ctx.call("minimum", self.lens, limit)

    def _padded_to_maximum(self, x: Expr, seq: Dim) -> tuple[Expr, int]:
        """``x`` (sequence first) padded with zero steps to the largest length the
        ranges allow, and that length; the length itself is kept for the mask."""
        ctx = self.ctx
        ranges = ctx.importer.dim_ranges or None
        top = symbolic.bounds(seq, ranges)[1]
        if top == float("inf"):
            names = ", ".join(sorted(symbolic.free_symbols(seq)))
            ctx.fail(f"the sequence length {symbolic.dim_text(seq)} is symbolic and has no "
                     "maximum, so there is no number of steps to unroll; give its range "
                     f"with from_onnx(..., dim_ranges={{{names!r}: (1, MAX)}}), or fix it "
                     "with shapes={...}")
        steps = int(top)
        if steps > MAX_UNROLLED_STEPS:
            ctx.fail(f"the sequence length {symbolic.dim_text(seq)} may be up to {steps}: "
                     f"more than {MAX_UNROLLED_STEPS} unrolled steps; give it a smaller "
                     "range with from_onnx(..., dim_ranges={...})")
        self.length_value = ctx.call("take", ctx.call("shape_of", x), scalar(ctx, 0, "int64"),
                                     axis=0)
        x = pad_sizes(ctx, x, [0, symbolic.sub(steps, seq), 0, 0, 0, 0], "constant", 0.0)
        return x, steps

    def take(self, e: Expr, i: int, axis: int = 0) -> Expr:
        return select(self.ctx, e, i, axis)

    def gate(self, e: Expr, k: int) -> Expr:
        h = self.hidden
        return self.ctx.call("strided_slice", e, axes=(-1,), begin=(k * h,), end=((k + 1) * h,))

    def clipped(self, e: Expr) -> Expr:
        if self.clip is None:
            return e
        return self.ctx.call("clip", e, min=-self.clip, max=self.clip)

    def initial(self, i: int, d: int) -> Expr:
        ctx = self.ctx
        if ctx.has(i):
            h0 = ctx.x(i)
            if self.layout:
                h0 = ctx.call("permute_dims", h0, axes=(1, 0, 2))
            return self.take(h0, d)
        zeros = ctx.constant(np.zeros((self.hidden,), dtype=self.dt))
        if isinstance(self.batch, int):
            return ctx.constant(np.zeros((self.batch, self.hidden), dtype=self.dt))
        # a symbolic batch: zeros (batch, 1) from the input, broadcast against (hidden,)
        first = ctx.call(
            "strided_slice", select(ctx, self.x, 0, 0), axes=(1,), begin=(0,), end=(1,)
        )
        return ctx.call("add", ctx.call("multiply", first, scalar(ctx, 0, self.dt)), zeros)

    def projections(self, d: int, w_bias: Expr | None) -> tuple[Expr, Expr]:
        """``X W^T + Wb`` for all steps (seq, batch, gates * hidden) and ``R^T``."""
        ctx = self.ctx
        w = self.take(ctx.x(1), d)
        r = self.take(ctx.x(2), d)
        xw = ctx.call("matmul", self.x, ctx.call("permute_dims", w, axes=(1, 0)))
        if w_bias is not None:
            xw = ctx.call("add", xw, w_bias)
        return xw, ctx.call("permute_dims", r, axes=(1, 0))

    def biases(self, d: int) -> tuple[Expr | None, Expr | None]:
        ctx = self.ctx
        if not ctx.has(3):
            return None, None
        b = self.take(ctx.x(3), d)
        n = self.n_gates * self.hidden
        wb = ctx.call("strided_slice", b, axes=(0,), begin=(0,), end=(n,))
        rb = ctx.call("strided_slice", b, axes=(0,), begin=(n,), end=(2 * n,))
        return wb, rb

    def steps(self, d: int) -> list[int]:
        return (
            list(range(self.seq))
            if self.dirs[d] == "forward"
            else list(range(self.seq - 1, -1, -1))
        )

    def mask(self, t: int) -> Expr | None:
        if self.lens is None:
            return None
        ctx = self.ctx
        m = ctx.call("less", ctx.constant(np.asarray(t, np.int64)), self.lens)
        return ctx.call("expand_dims", m, axis=1)

    def keep(self, m: Expr | None, new: Expr, old: Expr) -> Expr:
        return new if m is None else self.ctx.call("where", m, new, old)

    def output(self, m: Expr | None, h: Expr) -> Expr:
        if m is None:
            return h
        return self.ctx.call("where", m, h, scalar(self.ctx, 0, self.dt))

    def finish(self, ys: list[list[Expr]], finals: list[list[Expr]]) -> list[Expr]:
        """Y (seq, dirs, batch, hidden) and the final states (dirs, batch, hidden)."""
        ctx = self.ctx
        per_dir = []
        for d, y in enumerate(ys):
            ordered = y if self.dirs[d] == "forward" else y[::-1]
            items = tuple(ctx.atom(ctx.call("expand_dims", s, axis=0)) for s in ordered)
            per_dir.append(ctx.call("concat", Tuple(items), axis=0) if len(items) > 1 else items[0])
        stacked = tuple(ctx.atom(ctx.call("expand_dims", p, axis=1)) for p in per_dir)
        y_all = ctx.call("concat", Tuple(stacked), axis=1) if len(stacked) > 1 else stacked[0]
        if not isinstance(self.length, int):   # the steps past the length: cut off
            y_all = ctx.call("strided_slice", y_all, axes=(0,), begin=(0,), end=(self.length,))
        outs = [y_all]
        for k in range(len(finals[0])):
            fs = tuple(ctx.atom(ctx.call("expand_dims", f[k], axis=0)) for f in finals)
            outs.append(ctx.call("concat", Tuple(fs), axis=0) if len(fs) > 1 else fs[0])
        if self.layout:
            outs[0] = ctx.call("permute_dims", outs[0], axes=(2, 0, 1, 3))
            outs[1:] = [ctx.call("permute_dims", o, axes=(1, 0, 2)) for o in outs[1:]]
        return outs


@converter("RNN", since=7, attr_choices={"direction": ("forward", "reverse", "bidirectional")})
def convert_rnn(ctx: NodeContext) -> list[Expr]:
    """Unrolled: ``H = f(X W^T + H R^T + Wb + Rb)``."""
    s = _Setup(ctx, 1, ["Tanh"])
    ys, finals = [], []
    for d in range(len(s.dirs)):
        wb, rb = s.biases(d)
        xw, rt = s.projections(d, wb)
        h = s.initial(5, d)
        f = s.acts[d][0]
        y = []
        for t in s.steps(d):
            pre = ctx.call("add", s.take(xw, t), ctx.call("matmul", h, rt))
            if rb is not None:
                pre = ctx.call("add", pre, rb)
            new = f(s.clipped(pre))
            m = s.mask(t)
            y.append(s.output(m, new))
            h = s.keep(m, new, h)
        ys.append(y)
        finals.append([h])
    return s.finish(ys, finals)


@converter("GRU", since=7, attr_choices={"direction": ("forward", "reverse", "bidirectional")})
def convert_gru(ctx: NodeContext) -> list[Expr]:
    """Unrolled GRU (gates z, r, h; ``linear_before_reset`` supported)."""
    s = _Setup(ctx, 3, ["Sigmoid", "Tanh"])
    lbr = bool(ctx.attr_int("linear_before_reset", 0))
    one = scalar(ctx, 1, s.dt)
    ys, finals = [], []
    for d in range(len(s.dirs)):
        wb, rb = s.biases(d)
        xw, rt = s.projections(d, wb)
        rt_zr = ctx.call("strided_slice", rt, axes=(1,), begin=(0,), end=(2 * s.hidden,))
        rt_h = ctx.call("strided_slice", rt, axes=(1,), begin=(2 * s.hidden,), end=(3 * s.hidden,))
        rb_zr = rb_h = None
        if rb is not None:
            rb_zr = ctx.call("strided_slice", rb, axes=(0,), begin=(0,), end=(2 * s.hidden,))
            rb_h = ctx.call(
                "strided_slice", rb, axes=(0,), begin=(2 * s.hidden,), end=(3 * s.hidden,)
            )
        f, g = s.acts[d]
        h = s.initial(5, d)
        y = []
        for t in s.steps(d):
            xt = s.take(xw, t)
            hr = ctx.call("matmul", h, rt_zr)
            if rb_zr is not None:
                hr = ctx.call("add", hr, rb_zr)
            zr = ctx.call(
                "add", ctx.call("strided_slice", xt, axes=(1,), begin=(0,), end=(2 * s.hidden,)), hr
            )
            z = f(s.clipped(s.gate(zr, 0)))
            r = f(s.clipped(s.gate(zr, 1)))
            xh = s.gate(xt, 2)
            if lbr:
                hh = ctx.call("matmul", h, rt_h)
                if rb_h is not None:
                    hh = ctx.call("add", hh, rb_h)
                pre = ctx.call("add", xh, ctx.call("multiply", r, hh))
            else:
                pre = ctx.call("add", xh, ctx.call("matmul", ctx.call("multiply", r, h), rt_h))
                if rb_h is not None:
                    pre = ctx.call("add", pre, rb_h)
            hcand = g(s.clipped(pre))
            new = ctx.call(
                "add",
                ctx.call("multiply", ctx.call("subtract", one, z), hcand),
                ctx.call("multiply", z, h),
            )
            m = s.mask(t)
            y.append(s.output(m, new))
            h = s.keep(m, new, h)
        ys.append(y)
        finals.append([h])
    return s.finish(ys, finals)


@converter("LSTM", since=7, attr_choices={"direction": ("forward", "reverse", "bidirectional")})
def convert_lstm(ctx: NodeContext) -> list[Expr]:
    """Unrolled LSTM (gates i, o, f, c; peepholes and ``input_forget`` supported)."""
    s = _Setup(ctx, 4, ["Sigmoid", "Tanh", "Tanh"])
    coupled = bool(ctx.attr_int("input_forget", 0))
    one = scalar(ctx, 1, s.dt)
    ys, finals = [], []
    for d in range(len(s.dirs)):
        wb, rb = s.biases(d)
        xw, rt = s.projections(d, wb)
        f, g, hact = s.acts[d]
        h, c = s.initial(5, d), s.initial(6, d)
        peep = None
        if ctx.has(7):
            peep = s.take(ctx.x(7), d)
        y = []
        for t in s.steps(d):
            pre = ctx.call("add", s.take(xw, t), ctx.call("matmul", h, rt))
            if rb is not None:
                pre = ctx.call("add", pre, rb)
            gi, go, gf, gc = (s.gate(pre, k) for k in range(4))
            if peep is not None:
                gi = ctx.call("add", gi, ctx.call("multiply", s.gate(peep, 0), c))
                gf = ctx.call("add", gf, ctx.call("multiply", s.gate(peep, 2), c))
            i_t = f(s.clipped(gi))
            f_t = ctx.call("subtract", one, i_t) if coupled else f(s.clipped(gf))
            c_t = g(s.clipped(gc))
            c_new = ctx.call("add", ctx.call("multiply", f_t, c), ctx.call("multiply", i_t, c_t))
            if peep is not None:
                go = ctx.call("add", go, ctx.call("multiply", s.gate(peep, 1), c_new))
            o_t = f(s.clipped(go))
            h_new = ctx.call("multiply", o_t, hact(c_new))
            m = s.mask(t)
            y.append(s.output(m, h_new))
            h = s.keep(m, h_new, h)
            c = s.keep(m, c_new, c)
        ys.append(y)
        finals.append([h, c])
    return s.finish(ys, finals)
