"""Every exception class of plait is a :class:`plait.errors.PlaitError` (or a listed
internal signal), and the ``plait`` command prints each as one clean line."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import plait
from plait import cli
from plait.errors import INTERNAL_SIGNALS, PlaitError

OPTIONAL = ("torch", "onnxruntime", "onnx", "cryptography")
"""Third-party packages some plait modules need; a module that cannot import for lack
of one is skipped (its classes are checked where the package is installed)."""


def _plait_exception_classes() -> list[type[BaseException]]:
    """The exception classes defined in plait's modules (every module imported)."""
    for info in pkgutil.walk_packages(plait.__path__, "plait."):
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            if not any(p in str(e) for p in OPTIONAL):
                raise
    found: dict[str, type[BaseException]] = {}
    stack: list[type] = [BaseException]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            stack.append(sub)
            if sub.__module__.split(".")[0] == "plait" and not issubclass(sub, Warning):
                found[f"{sub.__module__}.{sub.__qualname__}"] = sub
    return [found[k] for k in sorted(found)]


CLASSES = _plait_exception_classes()


def test_the_walk_finds_the_error_classes() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {"VMError", "NativeLoadError", "ExecutableFormatError", "ParseError",
            "PassError", "OnnxImportError", "CCompileError", "CliError"} <= names
    assert len(CLASSES) >= 50


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_plait_exception_class_is_a_plait_error_or_an_internal_signal(
        cls: type[BaseException]) -> None:
    name = f"{cls.__module__}.{cls.__qualname__}"
    if name in INTERNAL_SIGNALS:
        assert not issubclass(cls, PlaitError), f"{name} is listed as an internal signal"
        return
    assert issubclass(cls, PlaitError), (
        f"{name} derives from {[b.__name__ for b in cls.__mro__[1:-2]]}, not from "
        "plait.errors.PlaitError: add it as the first base (or, for control flow that "
        "never leaves its pass, list it in plait.errors.INTERNAL_SIGNALS)")


def test_the_internal_signals_exist() -> None:
    names = {f"{c.__module__}.{c.__qualname__}" for c in CLASSES}
    assert set(INTERNAL_SIGNALS) <= names


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` with the message "the refusal" (made without its own
    constructor, whose parameters differ from class to class)."""
    e = cls.__new__(cls, "the refusal")
    BaseException.__init__(e, "the refusal")
    return e


@pytest.mark.parametrize("cls", [c for c in CLASSES if issubclass(c, PlaitError)],
                         ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_the_cli_prints_every_plait_error_as_one_clean_line(
        cls: type[BaseException], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(args: object) -> int:
        raise _instance(cls)

    monkeypatch.setattr(cli, "cmd_check", refuse)
    code = cli.main(["check", "anything.plait.py"])
    out, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("plait: error: ") and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_bug_is_still_an_internal_error(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    def bug(args: object) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(cli, "cmd_check", bug)
    assert cli.main(["check", "anything.plait.py"]) == 2
    assert "plait: internal error: KeyError" in capsys.readouterr().err
