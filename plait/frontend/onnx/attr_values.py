"""The values ONNX allows for its enum-like attributes, for every converter.

``onnx.defs.get_schema(op, opset)`` gives each attribute's *type* (the importer checks
it), but not which values an ``INT`` flag or a ``STRING`` mode may take: a ``MaxPool``
with ``ceil_mode=2`` is well typed, and a converter reading ``bool(ceil_mode)`` would
take it as ceil where onnxruntime refuses it.  This table is ours, from the operator
specification (onnx/docs/Operators.md); :func:`attribute_problem` checks one attribute
of one node against it, before anything is built (``loader.check_model``).

* :data:`FLAGS` — integer attributes that are booleans, on every op that has them:
  0 or 1;
* :data:`AT_LEAST` — integer attributes with a lower bound (counts and sizes);
* :data:`CHOICES` — string (and a few integer) attributes whose values are an
  enumeration, per op type (``"*"``: every op with that attribute).

A converter's own ``attr_choices`` (plait's *supported* subset) is checked on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FLAGS = frozenset("""
    align_corners allowzero antialias broadcast ceil_mode center_point_box count_include_pad
    detect_negative detect_positive exclude_outside exclusive fmod input_forget interleaved
    inverse is_case_sensitive is_causal is_test keepdims largest layout linear_before_reset
    new_axis noop_with_empty_axes onesided output_sequence periodic reverse saturate
    select_last_index sorted spatial storage_order training_mode transA transB upper
""".split())
"""Integer attributes that are 0 or 1 wherever they appear."""

AT_LEAST: Mapping[str, int] = {
    "blocksize": 1, "group": 1, "num_outputs": 1, "size": 1, "hidden_size": 1,
    "num_groups": 1, "num_heads": 1, "q_num_heads": 1, "kv_num_heads": 1, "p": 1,
    "sample_size": 1, "output_height": 1, "output_width": 1, "offset_group": 1,
    "max_gram_length": 1, "min_gram_length": 1, "num_scan_inputs": 1,
}  # fmt: skip
"""Integer attributes and their smallest allowed value."""

_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")

CHOICES: Mapping[tuple[str, str], tuple[Any, ...]] = {
    ("*", "auto_pad"): _AUTO_PAD,
    ("Gelu", "approximate"): ("none", "tanh"),
    ("Resize", "coordinate_transformation_mode"): (
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"),
    ("RoiAlign", "coordinate_transformation_mode"): ("half_pixel", "output_half_pixel"),
    ("Resize", "keep_aspect_ratio_policy"): ("stretch", "not_larger", "not_smaller"),
    ("Resize", "mode"): ("nearest", "linear", "cubic"),
    ("Resize", "nearest_mode"): ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    ("Upsample", "mode"): ("nearest", "linear", "bilinear"),
    ("Pad", "mode"): ("constant", "reflect", "edge", "wrap"),
    ("DepthToSpace", "mode"): ("DCR", "CRD"),
    ("RoiAlign", "mode"): ("avg", "max"),
    ("GridSample", "mode"): ("bilinear", "nearest", "bicubic", "linear", "cubic"),
    ("GridSample", "padding_mode"): ("zeros", "border", "reflection"),
    ("TensorScatter", "mode"): ("linear", "circular"),
    ("BitShift", "direction"): ("LEFT", "RIGHT"),
    ("RNN", "direction"): ("forward", "reverse", "bidirectional"),
    ("GRU", "direction"): ("forward", "reverse", "bidirectional"),
    ("LSTM", "direction"): ("forward", "reverse", "bidirectional"),
    ("ScatterElements", "reduction"): ("none", "add", "mul", "max", "min"),
    ("ScatterND", "reduction"): ("none", "add", "mul", "max", "min"),
    ("NegativeLogLikelihoodLoss", "reduction"): ("none", "sum", "mean"),
    ("SoftmaxCrossEntropyLoss", "reduction"): ("none", "sum", "mean"),
    ("StringNormalizer", "case_change_action"): ("LOWER", "UPPER", "NONE"),
    ("TfIdfVectorizer", "mode"): ("TF", "IDF", "TFIDF"),
    ("Attention", "qk_matmul_output_mode"): (0, 1, 2, 3),
}  # fmt: skip
"""Enumerated values per (op type, attribute); op type ``"*"`` for every op."""


def _shown(values: tuple[Any, ...]) -> str:
    return ", ".join(repr(v) for v in values)


def attribute_problem(op_type: str, name: str, value: Any) -> str | None:
    """Why ``value`` is not an allowed value of attribute ``name`` of an ONNX
    ``op_type`` node (default domain), or None when it is (or the table says nothing).
    The message names the attribute, the value and what is allowed."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    choices = CHOICES.get((op_type, name)) or CHOICES.get(("*", name))
    if choices is not None and isinstance(value, int | str) and value not in choices:
        return f"attribute {name!r} = {value!r} is not allowed; ONNX allows {_shown(choices)}"
    if not isinstance(value, int):
        return None
    if name in FLAGS and value not in (0, 1):
        return f"attribute {name!r} = {value!r} is not allowed; ONNX allows 0, 1"
    low = AT_LEAST.get(name)
    if low is not None and value < low:
        return f"attribute {name!r} = {value!r} is not allowed; ONNX allows {low} or more"
    return None


__all__ = ["AT_LEAST", "CHOICES", "FLAGS", "attribute_problem"]
