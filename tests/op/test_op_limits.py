"""The text format's split into 2**31 - 1 sections is refused at once (max_outputs of
plait.runtime.limits), not after building as many types."""

from __future__ import annotations

import pytest

import plait
from plait.ir.parser import ParseError


def test_the_text_split_is_refused_at_once(deadline):
    text = '''
@module
class M:
    @function
    def main(x: Tensor((4, 6), "float32")):
        y = split(x, indices_or_sections=2147483647)
        return y
'''
    with deadline(10):
        with pytest.raises(ParseError, match=r"binding 'y': split: the number of "
                                                   r"sections: 2,147,483,647 exceeds the "
                                                   r"limit max_outputs"):
            plait.parse(text)
    with deadline(10), plait.use_limits(max_outputs=3):
        with pytest.raises(ParseError, match="max_outputs = 3"):
            plait.parse(text.replace("2147483647", "4"))
