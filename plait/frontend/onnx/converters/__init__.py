"""The ONNX op converters of the core ops; importing this package registers them all.

Dialects register converters of their own (``register_dialect(..., frontends={"onnx":
module})``); :func:`plait.dialects.load_frontend_converters` imports them."""

from . import (  # noqa: F401
    attention,
    control,
    elementwise,
    grid,
    index,
    misc,
    nn,
    reduce,
    resize,
    rnn,
    shape,
    signal,
)
