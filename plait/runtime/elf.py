"""A structural check of an ELF shared object before it is mapped.

The dynamic loader maps each loadable segment of a library from the file; a segment
that reaches past the end of a truncated file is mapped anyway, and the first access to
its missing pages raises SIGBUS, which kills the process.  :func:`elf_problem` reads the
ELF and program headers (with :mod:`struct`, nothing is mapped) and says what is out of
bounds, so a truncated or mangled library is an error instead.  It checks structure
only: whether the code may run at all is the trust policy's business
(:mod:`plait.runtime.trust`).
"""

from __future__ import annotations

import struct

ET_DYN = 3
PT_LOAD = 1
_CLASSES = {1: ("32-bit", "IIIIIIII", 52), 2: ("64-bit", "IIQQQQQQ", 64)}
"""ELF class -> (name, program header layout, ELF header size)."""


_MACHINES = {3: "x86", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv64",
             21: "ppc64", 22: "s390x"}
"""ELF ``e_machine`` -> the architecture's name (as ``platform.machine()`` says it)."""


def elf_machine(data: bytes) -> str | None:
    """The architecture an ELF file's code is for (``x86_64``, ``aarch64``, ...), or
    None when it is not an ELF file or the machine is not one plait names."""
    if len(data) < 20 or not data.startswith(b"\x7fELF") or data[5] not in (1, 2):
        return None
    (machine,) = struct.unpack_from("<H" if data[5] == 1 else ">H", data, 18)
    return _MACHINES.get(machine)


def host_machine() -> str:
    """This machine's architecture, named as :func:`elf_machine` names it."""
    import platform

    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64", "i386": "x86", "i686": "x86"}.get(m, m)


def foreign_machine_problem(data: bytes) -> str | None:
    """Why an ELF library cannot run here because it is built for another architecture
    (a cross build), or None."""
    machine, here = elf_machine(data), host_machine()
    if machine is None or machine == here or here not in _MACHINES.values():
        return None
    return (f"it is built for {machine}, and this machine is {here}: run it on an {machine} "
            f"machine, or build the model here (unset $CC if it names a cross compiler; "
            f"plait.rebuild(exe, \"c\") rebuilds an executable from the graph it keeps)")


def elf_problem(data: bytes) -> str | None:
    """What makes ``data`` unsafe to map as an ELF shared object, or None."""
    size = len(data)
    if size < 16 or not data.startswith(b"\x7fELF"):
        return "it is not an ELF file"
    cls, order = data[4], data[5]
    if cls not in _CLASSES or order not in (1, 2):
        return f"unknown ELF class {cls} or byte order {order}"
    name, ph_layout, header_size = _CLASSES[cls]
    if size < header_size:
        return f"it is truncated: {size} bytes, less than the {header_size}-byte ELF header"
    end = "<" if order == 1 else ">"
    if cls == 2:
        fields = struct.unpack_from(end + "HHIQQQIHHHHHH", data, 16)
    else:
        fields = struct.unpack_from(end + "HHIIIIIHHHHHH", data, 16)
    e_type, _mach, _ver, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, \
        shentsize, shnum, _shstrndx = fields
    if e_type != ET_DYN:
        return f"it is not a shared object (ELF type {e_type}, expected {ET_DYN})"
    ph_size = struct.calcsize(end + ph_layout)
    if phnum == 0 or phentsize != ph_size:
        return (f"its program headers are malformed ({phnum} entries of {phentsize} bytes; "
                f"a {name} ELF has entries of {ph_size})")
    if phoff + phnum * phentsize > size:
        return (f"it is truncated: the program headers end at byte {phoff + phnum * phentsize}"
                f", the file has {size}")
    for i in range(phnum):
        h = struct.unpack_from(end + ph_layout, data, phoff + i * phentsize)
        if cls == 2:
            p_type, _pflags, offset, _vaddr, _paddr, filesz, memsz, _align = h
        else:
            p_type, offset, _vaddr, _paddr, filesz, memsz, _pflags, _align = h
        if offset + filesz > size:
            return (f"it is truncated: segment {i} (type {p_type}) spans bytes {offset} to "
                    f"{offset + filesz}, the file has {size}")
        if p_type == PT_LOAD and filesz > memsz:
            return f"segment {i} holds more bytes in the file ({filesz}) than in memory ({memsz})"
    if shoff and shoff + shnum * shentsize > size:
        return (f"it is truncated: the section headers end at byte {shoff + shnum * shentsize}"
                f", the file has {size}")
    return None


__all__ = ["elf_machine", "elf_problem", "foreign_machine_problem", "host_machine"]
