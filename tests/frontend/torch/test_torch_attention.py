"""``aten.scaled_dot_product_attention`` converted whole (the importer keeps it when
PyTorch's decomposition of it fails, as for GPT-2 with a dynamic sequence): boolean and
additive masks, causal, an explicit scale and grouped-query heads match
``torch.nn.functional.scaled_dot_product_attention`` on numpy and c, with the sequence
dynamic.  Tolerance: rtol 1e-4, atol 1e-5."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch_helpers import assert_close, vm_for  # noqa: E402

from plait.frontend.torch import from_exported_program  # noqa: E402

F = torch.nn.functional


class _Attention(torch.nn.Module):
    def __init__(self, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.kw = kw

    def forward(self, q, k, v, mask):  # type: ignore[no-untyped-def]
        kw = dict(self.kw)
        if kw.pop("masked", False):
            kw["attn_mask"] = mask
        return F.scaled_dot_product_attention(q, k, v, **kw)


def _import(m: torch.nn.Module, args: tuple, seq: object):  # type: ignore[no-untyped-def]
    dyn = ({2: seq}, {2: seq}, {2: seq}, {2: seq, 3: seq})
    ep = torch.export.export(m, args, dynamic_shapes=dyn)
    table = torch.export.default_decompositions()
    del table[torch.ops.aten.scaled_dot_product_attention.default]
    ep = ep.run_decompositions(table)
    ops = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "aten.scaled_dot_product_attention.default" in ops
    return from_exported_program(ep, run_decompositions=False)


@pytest.mark.parametrize("kw, kv_heads, mask_dtype", [
    ({"masked": True}, 4, torch.bool),
    ({"masked": True, "scale": 0.3}, 4, torch.float32),
    ({"is_causal": True}, 4, torch.bool),
    ({"is_causal": True, "enable_gqa": True}, 2, torch.bool),
])
def test_attention_matches_torch(kw: dict, kv_heads: int, mask_dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    m = _Attention(**kw)
    seq = torch.export.Dim("seq", min=2, max=32)

    def args(n: int) -> tuple:
        q = torch.randn(2, 4, n, 8)
        k, v = torch.randn(2, kv_heads, n, 8), torch.randn(2, kv_heads, n, 8)
        if mask_dtype == torch.bool:
            mask = torch.rand(n, n) > 0.3
            mask |= torch.eye(n, dtype=torch.bool)  # no row fully masked
        else:
            mask = torch.randn(n, n)
        return q, k, v, mask[None, None].expand(2, 1, n, n).contiguous()

    mod = _import(m, args(6), seq)
    for target in ("numpy", "c"):
        vm = vm_for(mod, target)
        for n in (3, 11):
            a = args(n)
            assert_close(vm["main"](*[t.numpy() for t in a]), m(*a))
