"""Code generators: :mod:`plait.codegen.c` turns kernels into C, compiles them with the
system C compiler into a shared library and loads it (see ``docs/kernels.md``)."""
