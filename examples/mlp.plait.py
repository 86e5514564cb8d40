"""A two-layer perceptron in plait's text format.

The file is the text format and also valid Python: ``plait.parse(text)`` reads it
(the import line is skipped; nothing is executed), and running it with Python turns
the class into an IRModule through ``plait.script.module``.

    python -c "import plait; print(plait.parse(open('examples/mlp.plait.py').read()))"

Symbolic sizes are quoted ("batch") so that Python can evaluate the annotations; the
printer writes them bare (``Tensor((batch, 784), "float32")``), and both read the same.
"""

from plait.script import (
    Tensor,
    add,
    argmax,
    cls,
    dataflow,
    function,
    matmul,
    module,
    output,
    relu,
    softmax,
)


@module(attrs={"model": "mlp"})
class MLP:
    @function
    def main(
        x: Tensor(("batch", 784), "float32"),
        w1: Tensor((784, 128), "float32"),
        b1: Tensor((128,), "float32"),
        w2: Tensor((128, 10), "float32"),
        b2: Tensor((10,), "float32"),
    ) -> Tensor(("batch", 10), "float32"):
        with dataflow():
            h = matmul(x, w1)
            h1 = add(h, b1)
            act = relu(h1)
            o = matmul(act, w2)
            logits = add(o, b2)
            probs = softmax(logits)
            output(probs)
        return probs

    @function
    def predict(
        x: Tensor(("batch", 784), "float32"),
        w1: Tensor((784, 128), "float32"),
        b1: Tensor((128,), "float32"),
        w2: Tensor((128, 10), "float32"),
        b2: Tensor((10,), "float32"),
    ) -> Tensor(("batch",), "int64"):
        probs = cls.main(x, w1, b1, w2, b2)
        label = argmax(probs, axis=1)
        return label
