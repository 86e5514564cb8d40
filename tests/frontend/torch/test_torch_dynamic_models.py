"""``transformers`` BERT and GPT-2 through ``torch.export`` with ``Dim``s for batch and
sequence: the sizes stay symbolic through the import (slices such as BERT's
``position_ids[:, :seq]``, views to ``batch * seq``, the causal mask's ``arange(seq)``),
the module builds once per target and runs at three (batch, sequence) pairs from the one
executable, matching eager PyTorch.  A size outside a ``Dim``'s range is refused, naming
the input, the size and the range.

Tiny configurations with seeded random weights; nothing is downloaded.  Each model is
exported and imported once (module fixture).  Tolerance: rtol 1e-4, atol 1e-5 (float32
through two layers; the largest difference seen is 1.2e-6)."""

from __future__ import annotations

import numpy as np
import pytest

from plait.runtime.vm import VMInputError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch_helpers import assert_close, vm_for  # noqa: E402

from plait.frontend.torch import from_torch  # noqa: E402

SIZES = [(1, 7), (2, 16), (3, 33)]
"""(batch, sequence) pairs the one executable runs at (the export's example is (2, 16))."""


class _Hidden(torch.nn.Module):
    """The model's last hidden state from its token ids."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids):  # type: ignore[no-untyped-def]
        return self.model(input_ids=input_ids).last_hidden_state


def _model(name: str) -> torch.nn.Module:
    t = transformers
    torch.manual_seed(0)
    if name == "bert":
        m = t.BertModel(t.BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=128,
                                     max_position_embeddings=128))
    else:
        # eager attention: PyTorch's own decomposition of scaled_dot_product_attention
        # fails for a dynamic sequence in torch 2.13 (run_decompositions: "Cannot view a
        # tensor with shape [s77, s27, 64] and strides (64, 64*s77, 1)")
        m = t.GPT2Model(t.GPT2Config(vocab_size=500, n_embd=64, n_layer=2, n_head=4,
                                     n_positions=128, bos_token_id=0, eos_token_id=0,
                                     attn_implementation="eager"))
    return _Hidden(m.eval()).eval()


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def imported(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """(eager module, IRModule): exported once with Dims for batch and sequence."""
    model = _model(request.param)
    batch = torch.export.Dim("batch", min=1, max=8)
    seq = torch.export.Dim("seq", min=2, max=64)
    with torch.no_grad():
        mod = from_torch(model, (torch.randint(0, 500, (2, 16)),),
                         dynamic_shapes=({0: batch, 1: seq},))
    return model, mod


def test_batch_and_sequence_stay_symbolic(imported) -> None:  # type: ignore[no-untyped-def]
    _, mod = imported
    assert str(mod["main"].params[0].ty) == 'Tensor((batch, seq), "int64")'
    assert tuple(mod["main"].body.ty.shape) == ("batch", "seq", 64)
    assert mod.attrs["dim_ranges"] == {"batch": (1, 8), "seq": (2, 64)}


@pytest.mark.parametrize("target", ["numpy", "c"])
def test_one_executable_runs_at_three_sizes(imported, target: str) -> None:  # type: ignore[no-untyped-def]
    model, mod = imported
    vm = vm_for(mod, target)
    rng = np.random.default_rng(1)
    for b, s in SIZES:
        ids = torch.from_numpy(rng.integers(0, 500, (b, s)))
        with torch.no_grad():
            want = model(ids)
        assert_close(vm["main"](ids.numpy()), want)


def test_a_size_outside_the_dims_range_is_refused(imported) -> None:  # type: ignore[no-untyped-def]
    _, mod = imported
    vm = vm_for(mod, "numpy")
    with pytest.raises(VMInputError, match=r"parameter 'input_ids': dimension 1 is 65, outside "
                                           r"the range \[2, 64\] of symbolic size 'seq'"):
        vm["main"](np.zeros((1, 65), np.int64))
