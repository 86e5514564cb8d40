"""The broad benchmark suite's models (``benchmarks/run.py --suite broad``): thirty
architectures from ``transformers``, one or more of each family a user brings -- plain,
residual, grouped and densely aggregated CNNs; depthwise/inverted-residual and
squeeze-excite mobile networks; plain, windowed and hierarchical vision transformers;
conv/attention hybrids; text encoders; decoders without a cache; speech models with a
convolutional feature extractor; a segmentation and a detection model -- each built from
its config with seeded random weights (nothing is downloaded; see real_models.py for the
export, the batch-norm calibration and the cache).

Every model has two specs: ``full``, the benchmark's (the config's defaults, or the named
published size, with the cuts its note states for the 2-core machines) and ``tiny``, the
same architecture at a few thousand parameters and a small input, which the default test
run imports, builds on ``c`` and checks against onnxruntime (tests/test_broad_suite.py).
``int8`` marks the CNNs and encoders that the int8 suite (``--suite broad-int8``)
quantizes with ``onnxruntime.quantization`` in QOperator, QDQ and dynamic form
(broad_quantized.py).

Importing this module needs neither torch nor transformers (plain data).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import real_models
from real_models import RealModel


@dataclass(frozen=True)
class BroadModel:
    """One architecture of the broad suite: its family, its benchmark spec, its tiny spec
    for the tests, and whether the int8 suite quantizes it."""

    family: str
    full: RealModel
    tiny: RealModel
    int8: bool = False


def _image(model_class: str, config_class: str, config: dict[str, Any], size: int,
           tiny: dict[str, Any], tiny_size: int, note: str, output: str = "logits",
           init: dict[str, Any] | None = None, int8: bool = False,
           family: str = "") -> BroadModel:
    """An image model taking ``pixel_values`` of 1x3xSxS."""
    init = init or {}
    if output == "logits":   # a classifier: ImageNet's classes unless the config says
        config = {"num_labels": 1000, **config}
    return BroadModel(
        family,
        RealModel(model_class, config_class, config, (1, 3, size, size), output=output,
                  init=init, note=note),
        RealModel(model_class, config_class, tiny, (1, 3, tiny_size, tiny_size),
                  output=output, init=init),
        int8)


def _text(model_class: str, config_class: str, config: dict[str, Any], seq: int,
          vocab: int, tiny: dict[str, Any], note: str, family: str,
          int8: bool = False, init: dict[str, Any] | None = None) -> BroadModel:
    """A text model taking ``input_ids`` of 1xS (the tiny one 1x9, vocabulary 101)."""
    init = init or {}
    return BroadModel(
        family,
        RealModel(model_class, config_class, config, (1, seq), "int64", "input_ids",
                  "last_hidden_state", vocab=vocab, init=init, note=note),
        RealModel(model_class, config_class, {**tiny, "vocab_size": 101}, (1, 9), "int64",
                  "input_ids", "last_hidden_state", vocab=101, init=init),
        int8)


def _audio(model_class: str, config_class: str, config: dict[str, Any], samples: int,
           tiny: dict[str, Any], note: str) -> BroadModel:
    """A speech model taking raw audio (``input_values``, 1xN samples at 16 kHz)."""
    return BroadModel(
        "speech",
        RealModel(model_class, config_class, config, (1, samples), input_kw="input_values",
                  output="last_hidden_state", note=note),
        RealModel(model_class, config_class, tiny, (1, 400), input_kw="input_values",
                  output="last_hidden_state"))


_TINY_ENCODER = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                 "intermediate_size": 48, "max_position_embeddings": 16}
_TINY_DECODER = {**_TINY_ENCODER, "num_key_value_heads": 1, "attn_implementation": "eager"}
_TINY_AUDIO = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
               "intermediate_size": 48, "conv_dim": [16, 16, 16], "conv_stride": [5, 2, 2],
               "conv_kernel": [10, 3, 3], "num_conv_pos_embeddings": 16,
               "num_conv_pos_embedding_groups": 4}

MODELS: dict[str, BroadModel] = {
    # ---- CNNs
    "mobilenetv1": _image(
        "MobileNetV1ForImageClassification", "MobileNetV1Config", {}, 224,
        {"depth_multiplier": 0.25, "min_depth": 4}, 32,
        "MobileNetV1 1.0: a plain stack (no skip connections) of depthwise-separable "
        "convolutions, ReLU6", int8=True, family="plain CNN"),
    "resnet18": _image(
        "ResNetForImageClassification", "ResNetConfig",
        {"layer_type": "basic", "depths": [2, 2, 2, 2],
         "hidden_sizes": [64, 128, 256, 512]}, 224,
        {"layer_type": "basic", "depths": [1, 1], "hidden_sizes": [8, 16],
         "embedding_size": 8}, 32,
        "ResNet-18 (basic blocks, 64-512)", int8=True, family="residual CNN"),
    "resnet50": _image(
        "ResNetForImageClassification", "ResNetConfig", {}, 224,
        {"depths": [1, 1], "hidden_sizes": [16, 32], "embedding_size": 8}, 32,
        "ResNet-50 (bottleneck blocks 3-4-6-3, 256-2048)", int8=True,
        family="residual CNN"),
    "bit": _image(
        "BitForImageClassification", "BitConfig", {"depths": [2, 2, 2, 2]}, 224,
        {"depths": [1, 1], "hidden_sizes": [16, 32], "embedding_size": 8,
         "num_groups": 4}, 32,
        "BiT (ResNetV2: pre-activation bottlenecks, weight-standardized convolutions, "
        "group norm), depths 2-2-2-2 of 256-2048", int8=True, family="residual CNN"),
    "regnet": _image(
        "RegNetForImageClassification", "RegNetConfig", {}, 224,
        {"embedding_size": 8, "hidden_sizes": [16, 32], "depths": [1, 1],
         "groups_width": 8}, 32,
        "RegNetY-4.0GF (the config's defaults: grouped 3x3 convolutions of 64 channels "
        "per group, squeeze-excite), 128-1088", int8=True, family="grouped CNN"),
    "hgnetv2": _image(
        "HGNetV2ForImageClassification", "HGNetV2Config", {}, 224,
        {"embedding_size": 8, "depths": [1, 1], "hidden_sizes": [16, 32],
         "stem_channels": [3, 8, 8], "stage_in_channels": [8, 16],
         "stage_mid_channels": [8, 16], "stage_out_channels": [16, 32],
         "stage_num_blocks": [1, 1], "stage_downsample_strides": [2, 2],
         "stage_kernel_size": [3, 3], "stage_numb_of_layers": [2, 2],
         "stage_downsample": [False, True], "stage_light_block": [False, True]}, 32,
        "HGNetV2 (the config's defaults): stages whose blocks concatenate the outputs of "
        "all their layers (dense aggregation), light depthwise blocks", int8=True,
        family="dense CNN"),
    "mobilenetv2": _image(
        "MobileNetV2ForImageClassification", "MobileNetV2Config", {}, 224,
        {"depth_multiplier": 0.25, "min_depth": 4}, 32,
        "MobileNetV2 1.0 (inverted residuals, depthwise convolutions, ReLU6)", int8=True,
        family="inverted-residual mobile CNN"),
    "efficientnet-b0": _image(
        "EfficientNetForImageClassification", "EfficientNetConfig",
        {"width_coefficient": 1.0, "depth_coefficient": 1.0, "image_size": 224,
         "hidden_dim": 1280, "dropout_rate": 0.2}, 224,
        {"width_coefficient": 0.1, "depth_coefficient": 0.1, "image_size": 32,
         "hidden_dim": 128}, 32,
        "EfficientNet-B0 (depthwise convolutions, SiLU, squeeze-excite)", int8=True,
        family="squeeze-excite mobile CNN"),
    "convnext": _image(
        "ConvNextForImageClassification", "ConvNextConfig",
        {"depths": [2, 2, 2, 2], "hidden_sizes": [48, 96, 192, 384]}, 224,
        {"depths": [1, 1], "hidden_sizes": [8, 16], "num_stages": 2}, 32,
        "ConvNeXt 2-2-2-2, 48-384 (7x7 depthwise, LayerNorm over channels, GELU)",
        int8=True, family="modern CNN"),
    # ---- vision transformers
    "vit": _image(
        "ViTModel", "ViTConfig", {"num_hidden_layers": 4}, 224,
        {**_TINY_ENCODER, "image_size": 32, "patch_size": 8}, 32,
        "ViT-base, 4 layers", output="last_hidden_state", init={"add_pooling_layer": False},
        family="plain vision transformer"),
    "deit-small": _image(
        "DeiTModel", "DeiTConfig",
        {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6,
         "intermediate_size": 1536}, 224,
        {**_TINY_ENCODER, "image_size": 32, "patch_size": 8}, 32,
        "DeiT-small (12 layers of 384, 6 heads)", output="last_hidden_state",
        init={"add_pooling_layer": False}, family="plain vision transformer"),
    "swin": _image(
        "SwinModel", "SwinConfig", {}, 224,
        {"image_size": 32, "embed_dim": 16, "depths": [2, 1], "num_heads": [1, 2],
         "window_size": 4}, 32,
        "Swin-T (the config's defaults: depths 2-2-6-2, 96-768, shifted 7x7 windows)",
        output="last_hidden_state", init={"add_pooling_layer": False},
        family="windowed vision transformer"),
    "pvt-v2": _image(
        "PvtV2Model", "PvtV2Config", {}, 224,
        {"image_size": 32, "depths": [1, 1], "hidden_sizes": [8, 16],
         "num_attention_heads": [1, 2], "num_encoder_blocks": 2, "patch_sizes": [7, 3],
         "strides": [4, 2], "sr_ratios": [2, 1], "mlp_ratios": [2, 2]}, 32,
        "PVT-v2-b0 (the config's defaults: four stages 32-256, spatial-reduction "
        "attention, depthwise convolutions in the MLP)", output="last_hidden_state",
        family="hierarchical vision transformer"),
    # ---- conv/attention hybrids
    "mobilevit": _image(
        "MobileViTForImageClassification", "MobileViTConfig", {}, 256,
        {"image_size": 32, "hidden_sizes": [16, 16, 16],
         "neck_hidden_sizes": [8, 8, 8, 8, 8, 8, 16], "num_attention_heads": 2}, 32,
        "MobileViT-S (the config's defaults, 256x256: inverted residuals with "
        "transformer blocks over unfolded patches)", family="conv/attention hybrid"),
    "levit": _image(
        "LevitForImageClassification", "LevitConfig", {}, 224,
        {"image_size": 32, "hidden_sizes": [16, 24], "num_attention_heads": [2, 2],
         "depths": [1, 1], "key_dim": [8, 8], "patch_size": 16,
         "down_ops": [["Subsample", 8, 2, 4, 2, 2]], "drop_path_rate": 0}, 32,
        "LeViT-128S (the config's defaults: a convolutional stem, attention with "
        "batch-normed projections and hardswish)", family="conv/attention hybrid"),
    "poolformer": _image(
        "PoolFormerForImageClassification", "PoolFormerConfig", {}, 224,
        {"depths": [1, 1], "hidden_sizes": [8, 16], "num_encoder_blocks": 2,
         "patch_sizes": [7, 3], "strides": [4, 2], "padding": [2, 1]}, 32,
        "PoolFormer-S12 (the config's defaults: MetaFormer blocks with average pooling "
        "as the token mixer, group norm)", family="conv/attention hybrid"),
    "cvt": _image(
        "CvtForImageClassification", "CvtConfig", {}, 224,
        {"embed_dim": [8, 16, 16], "num_heads": [1, 2, 2], "depth": [1, 2, 3],
         "mlp_ratio": [2.0, 2.0, 2.0], "drop_path_rate": [0.0, 0.0, 0.0]}, 32,
        "CvT-13 (the config's defaults: convolutional token embeddings, depthwise "
        "convolutional projections of queries, keys and values)",
        family="conv/attention hybrid"),
    # ---- text encoders
    "bert": _text("BertModel", "BertConfig", {"num_hidden_layers": 4}, 128, 30522,
                  _TINY_ENCODER, "BERT-base, 4 layers, sequence 128 (erf GELU)",
                  "text encoder", int8=True, init={"add_pooling_layer": False}),
    "distilbert": _text("DistilBertModel", "DistilBertConfig", {}, 128, 30522,
                        {"n_layers": 1, "dim": 32, "n_heads": 2, "hidden_dim": 48,
                         "max_position_embeddings": 16},
                        "DistilBERT (the config's defaults: 6 layers of 768), sequence 128",
                        "text encoder", int8=True),
    "roberta": _text("RobertaModel", "RobertaConfig", {"num_hidden_layers": 4}, 128, 50265,
                     {**_TINY_ENCODER, "max_position_embeddings": 20},
                     "RoBERTa-base, 4 layers, sequence 128", "text encoder", int8=True,
                     init={"add_pooling_layer": False}),
    "albert": _text("AlbertModel", "AlbertConfig",
                    {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
                    128, 30000,
                    {**_TINY_ENCODER, "embedding_size": 16, "num_hidden_layers": 2},
                    "ALBERT-base (12 layers of 768 sharing one set of weights, embeddings "
                    "of 128), sequence 128", "text encoder", int8=True,
                    init={"add_pooling_layer": False}),
    "electra": _text("ElectraModel", "ElectraConfig", {}, 128, 30522,
                     {**_TINY_ENCODER, "embedding_size": 16},
                     "ELECTRA-small (the config's defaults: 12 layers of 256, embeddings of "
                     "128), sequence 128", "text encoder", int8=True),
    # ---- decoders, no cache
    "gpt2": _text("GPT2Model", "GPT2Config", {"n_layer": 4}, 64, 50257,
                  {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 16},
                  "GPT-2, 4 layers of 768, sequence 64 (tanh GELU, causal attention)",
                  "decoder"),
    "llama": _text("LlamaModel", "LlamaConfig",
                   {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
                    "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000,
                    "max_position_embeddings": 256, "attn_implementation": "eager"},
                   128, 32000, _TINY_DECODER,
                   "Llama-style, 4 layers of 512, 8 heads (4 KV heads), sequence 128 "
                   "(RMSNorm, rotary, SiLU-gated MLP)", "decoder"),
    "qwen2": _text("Qwen2Model", "Qwen2Config",
                   {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 4,
                    "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 32000,
                    "max_position_embeddings": 256, "attn_implementation": "eager"},
                   128, 32000, _TINY_DECODER,
                   "Qwen2-0.5B's layer (896 wide, 14 heads, 2 KV heads, biased q/k/v), "
                   "4 layers, vocabulary cut to 32000, sequence 128", "decoder"),
    # ---- speech
    "wav2vec2": _audio("Wav2Vec2Model", "Wav2Vec2Config", {"num_hidden_layers": 4}, 16000,
                       _TINY_AUDIO,
                       "Wav2Vec2-base, 4 layers, 1 s of 16 kHz audio (7 strided 1-D "
                       "convolutions, group norm, a grouped positional convolution)"),
    "hubert": _audio("HubertModel", "HubertConfig", {"num_hidden_layers": 4}, 16000,
                     _TINY_AUDIO, "HuBERT-base, 4 layers, 1 s of 16 kHz audio"),
    "whisper-encoder": BroadModel(
        "speech",
        RealModel("WhisperModel", "WhisperConfig", {}, (1, 80, 3000), input_kw=None,
                  output="last_hidden_state", encoder_only=True,
                  note="Whisper-tiny's encoder (4 layers of 384), 30 s of 80 mel bins"),
        RealModel("WhisperModel", "WhisperConfig",
                  {"d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2,
                   "encoder_ffn_dim": 48, "num_mel_bins": 8, "max_source_positions": 16,
                   "decoder_layers": 1, "decoder_attention_heads": 2, "decoder_ffn_dim": 48},
                  (1, 8, 32), input_kw=None, output="last_hidden_state",
                  encoder_only=True)),
    # ---- segmentation and detection
    "segformer": _image(
        "SegformerForSemanticSegmentation", "SegformerConfig", {"num_labels": 150}, 256,
        {"depths": [1, 1], "hidden_sizes": [8, 16], "num_attention_heads": [1, 2],
         "num_encoder_blocks": 2, "patch_sizes": [7, 3], "strides": [4, 2],
         "sr_ratios": [2, 1], "mlp_ratios": [2, 2], "decoder_hidden_size": 16}, 32,
        "SegFormer-B0 (the config's defaults) at 256x256 instead of 512x512: a "
        "hierarchical encoder and an all-MLP decoder, 150 classes",
        family="segmentation"),
    "detr": _image(
        "DetrForObjectDetection", "DetrConfig",
        {"num_labels": 91, "use_timm_backbone": False,
         "backbone_config": {"model_type": "resnet",
                                                         "out_features": ["stage4"]},
         "encoder_layers": 2, "decoder_layers": 2}, 320,
        {"use_timm_backbone": False, "d_model": 16, "encoder_layers": 1,
         "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
         "encoder_ffn_dim": 24, "decoder_ffn_dim": 24, "num_queries": 4,
         "backbone_config": {"model_type": "resnet", "depths": [1, 1],
                             "hidden_sizes": [16, 32], "embedding_size": 8,
                             "out_features": ["stage2"]}}, 64,
        "DETR with a ResNet-50 backbone, 2 encoder and 2 decoder layers of 256 (6 each in "
        "the paper), 100 queries, 320x320 (800 in the paper): class logits",
        family="detection"),
}

FULL: dict[str, RealModel] = {name: m.full for name, m in MODELS.items()}
"""The benchmark's spec of each model."""
TINY: dict[str, RealModel] = {name: m.tiny for name, m in MODELS.items()}
"""The tests' spec of each model (the same architecture, tiny)."""
INT8 = [name for name, m in MODELS.items() if m.int8]
"""The models the int8 suite quantizes: the CNNs and the text encoders."""


def model_stats(path: str, x: Any) -> tuple[int, int]:
    """The parameters (elements of the float initializers) and the FLOPs of the products
    (2 x multiply-adds of every Conv, MatMul and Gemm; elementwise work, norms and softmax
    not counted) of the ONNX model at ``path`` on input ``x``, the sizes read from an
    onnxruntime run that also outputs the products' operands (shape inference alone
    leaves the sizes after computed pads and reshapes unknown)."""
    import math

    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    model = onnx.load(path)
    graph = model.graph
    params = sum(math.prod(i.dims) for i in graph.initializer
                 if i.data_type == TensorProto.FLOAT)
    init = {i.name: list(i.dims) for i in graph.initializer}
    products = [n for n in graph.node if n.op_type in ("Conv", "MatMul", "Gemm")]
    have = {o.name for o in graph.output}
    wanted = {t for n in products for t in (n.input[0], n.input[1], n.output[0])
              if t not in init and t not in have}
    graph.output.extend(helper.make_empty_tensor_value_info(t) for t in sorted(wanted))
    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = onnxruntime.InferenceSession(model.SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    shapes = {**init, **{n: list(v.shape) for n, v in zip(names, sess.run(
        None, {sess.get_inputs()[0].name: x}), strict=True)}}
    flops = 0
    for n in products:
        out, a, w = (shapes.get(t) for t in (n.output[0], n.input[0], n.input[1]))
        if out is None or a is None or w is None:
            continue
        if n.op_type == "Conv":
            flops += 2 * math.prod(out) * math.prod(w[1:])
        else:
            trans = n.op_type == "Gemm" and any(at.name == "transA" and at.i
                                                for at in n.attribute)
            flops += 2 * math.prod(out) * (a[-2] if trans else a[-1])
    return params, flops


def stats_table(paths: dict[str, Any]) -> str:
    """The docs' table of the suite: name, family, input, parameters and FLOPs (of the
    ONNX files in ``paths``, by name), and the note."""
    lines = ["| name | family | input | parameters | GFLOPs | what |", "|---|---|---|---|---|---|"]
    for name, m in MODELS.items():
        params, flops = model_stats(str(paths[name]), real_models.make_input(m.full))
        shape = "x".join(str(d) for d in m.full.shape)
        lines.append(f"| {name} | {m.family} | {m.full.dtype} {shape} | {params / 1e6:.1f} M "
                     f"| {flops / 1e9:.2f} | {m.full.note} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(stats_table(real_models.export_cached(list(MODELS), suite="broad")))
