"""The ATen op converters, one file per op family; importing this package registers
them."""

from . import attention, create, elementwise, index, linalg, misc, nn, reduce, shape  # noqa: F401
