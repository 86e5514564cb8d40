"""``plait generate MODEL --prompt-ids 1,2,3 | --prompt TEXT --max-new-tokens N``: tokens
streamed as they come; ``--print-ids`` ends with the generated ids on one line; a
throughput line on a terminal (docs/llm.md)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from ..models import CliError


def add_generate(sub: Any) -> None:
    """Add ``plait generate`` to the ``plait`` argument parser."""
    p = sub.add_parser("generate", help="generate tokens with a causal language model "
                                        "(key/value cache; greedy or sampled)")
    p.add_argument("model", help="a transformers model directory (save_pretrained), an "
                                 ".onnx file with past_key_values or a .plx executable")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt-ids", metavar="1,2,3", help="the prompt's token ids")
    src.add_argument("--prompt", metavar="TEXT",
                     help="the prompt as text (needs a tokenizer next to the model)")
    p.add_argument("--max-new-tokens", type=int, default=32, metavar="N")
    p.add_argument("--print-ids", action="store_true",
                   help="print the generated ids on the last line, space separated")
    p.add_argument("--do-sample", action="store_true", help="sample instead of greedy")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None, help="seed of the sampling")
    p.add_argument("--eos", type=int, action="append", default=None, metavar="ID",
                   help="stop at this token (repeatable; default: the model's eos)")
    p.add_argument("--max-cache", type=int, default=512,
                   help="cache length of a model directory's export (prompt + new tokens)")
    p.add_argument("--target", default=None, help="numpy or c (default: c when a C "
                                                  "compiler is present)")
    p.add_argument("--allow-native", action="store_true",
                   help="run the native code of a .plx not signed by this machine")
    p.set_defaults(handler=cmd_generate)


def _prompt_ids(text: str) -> np.ndarray:
    try:
        ids = [int(t) for t in text.replace(" ", ",").split(",") if t]
    except ValueError:
        raise CliError(f"--prompt-ids {text!r}: expected integers separated by commas "
                       "(e.g. 1,2,3)") from None
    if not ids:
        raise CliError("--prompt-ids is empty: give at least one token id")
    return np.asarray([ids], dtype=np.int64)


def _encode(tok: Any, text: str) -> list[int]:
    enc = tok.encode(text)
    return list(getattr(enc, "ids", enc))


def _decode(tok: Any, ids: list[int]) -> str:
    return str(tok.decode(ids))


def _eos(args: argparse.Namespace, tok: Any) -> list[int] | None:
    if args.eos:
        return list(args.eos)
    eos = getattr(tok, "eos_token_id", None)
    return None if eos is None else [int(eos)]


def cmd_generate(args: argparse.Namespace) -> int:
    """Generate from ``args.model`` and print the tokens as they come."""
    from ..llm import find_tokenizer, generate, load_causal_lm

    tok = find_tokenizer(args.model)
    if args.prompt is not None:
        if tok is None:
            raise CliError(f"{args.model}: no tokenizer next to the model (tokenizer.json); "
                           "give the prompt as --prompt-ids 1,2,3")
        ids = np.asarray([_encode(tok, args.prompt)], dtype=np.int64)
    else:
        ids = _prompt_ids(args.prompt_ids)
    lm = load_causal_lm(args.model, args.target, max_cache=args.max_cache,
                        allow_native=args.allow_native)
    prompt = [int(i) for i in ids[0]]
    new: list[int] = []
    # the text streams as the growing suffix of decode(prompt + new): tokenizers that
    # join words with spaces or merge pieces print the same as a decode at the end
    shown = _decode(tok, prompt) if tok is not None and args.prompt is not None else ""
    print(shown, end="", flush=True)

    def stream(t: np.ndarray) -> None:
        nonlocal shown
        new.append(int(t[0]))
        if tok is None:
            print(int(t[0]), end=" ", flush=True)
            return
        text = _decode(tok, prompt + new) if args.prompt is not None else _decode(tok, new)
        print(text[len(shown):], end="", flush=True)
        shown = text

    start = time.perf_counter()
    generate(lm, ids, args.max_new_tokens, do_sample=args.do_sample,
             temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
             seed=args.seed, eos_token_id=_eos(args, tok), stream=stream)
    seconds = time.perf_counter() - start
    print()
    if args.print_ids:
        print(" ".join(map(str, new)))
    if sys.stderr.isatty():
        print(f"{len(new)} tokens in {seconds:.2f} s ({len(new) / max(seconds, 1e-9):.1f} "
              f"tokens/s, prompt {ids.shape[1]} tokens, {lm.convention} cache)",
              file=sys.stderr)
    return 0


__all__ = ["add_generate", "cmd_generate"]
