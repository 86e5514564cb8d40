"""Values in an executable (immediates, keyword arguments, attributes): made plain
(:func:`normalize_value`), written to and read from JSON (:func:`encode_value`,
:func:`decode_value`: tuples come back as tuples, dicts as dicts, non-finite floats as
floats), and the error every malformed part of an executable raises."""

from __future__ import annotations

import math
from typing import Any, NoReturn

import numpy as np

from plait.errors import PlaitError

ARRAY_KINDS = "biufc"
"""The dtype kinds an executable's arrays may have: bool, signed, unsigned, float,
complex."""


class ExecutableFormatError(PlaitError, ValueError):
    """An executable (in memory or on disk) is malformed; the message says where."""


class SignatureError(ExecutableFormatError):
    """A signature by a key the caller trusts (or by this machine) does not match the
    file: it was changed after it was signed."""


def fail(where: str, message: str) -> NoReturn:
    """Raise :class:`ExecutableFormatError` for ``message`` at ``where``."""
    raise ExecutableFormatError(f"{where}: {message}")


def normalize_value(value: Any, *, allow_dict: bool = False, where: str = "value") -> Any:
    """Return ``value`` with numpy scalars turned into Python scalars.

    Accepts None, bool, int, float, str and nested lists/tuples of these (and dicts with
    string keys when ``allow_dict``); raises ``TypeError`` naming ``where`` otherwise.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, list):
        return [normalize_value(v, allow_dict=allow_dict, where=where) for v in value]
    if isinstance(value, tuple):
        return tuple(normalize_value(v, allow_dict=allow_dict, where=where) for v in value)
    if allow_dict and isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: dict keys must be strings, got {k!r}")
            out[k] = normalize_value(v, allow_dict=True, where=where)
        return out
    allowed = "None, bool, int, float, str or lists/tuples" + (" /dicts" if allow_dict else "")
    raise TypeError(f"{where}: {type(value).__name__} is not serializable (allowed: {allowed})")


def encode_value(value: Any) -> Any:
    """Encode a normalized value as JSON, tagging tuples, dicts and non-finite floats."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": {k: encode_value(v) for k, v in value.items()}}
    raise TypeError(f"{type(value).__name__} is not serializable")


def decode_value(data: Any, *, allow_dict: bool = False) -> Any:
    """Inverse of :func:`encode_value`; raises ``ExecutableFormatError`` on bad input."""
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return [decode_value(v, allow_dict=allow_dict) for v in data]
    if isinstance(data, dict) and len(data) == 1:
        ((tag, inner),) = data.items()
        if tag == "tuple" and isinstance(inner, list):
            return tuple(decode_value(v, allow_dict=allow_dict) for v in inner)
        if tag == "float" and inner in ("nan", "inf", "-inf"):
            return float(inner)
        if tag == "dict" and allow_dict and isinstance(inner, dict):
            return {k: decode_value(v, allow_dict=True) for k, v in inner.items()}
    raise ExecutableFormatError(f"malformed encoded value {short_repr(data)}")


def short_repr(data: Any, limit: int = 80) -> str:
    """``repr(data)``, cut to ``limit`` characters."""
    text = repr(data)
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["ARRAY_KINDS", "ExecutableFormatError", "SignatureError", "decode_value",
           "encode_value", "fail", "normalize_value", "short_repr"]
