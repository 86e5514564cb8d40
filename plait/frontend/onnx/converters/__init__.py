"""The ONNX op converters; importing this package registers them all."""

from . import (  # noqa: F401
    attention,
    control,
    elementwise,
    grid,
    index,
    misc,
    nn,
    quant,
    reduce,
    resize,
    rnn,
    shape,
    signal,
)
