"""The operator schemas onnx 1.23.2 defines, as the importer's checks use them.

Written by ``python tools/gen_onnx_op_specs.py``: do not edit.  Each row is an
:class:`~plait.frontend.onnx.op_specs.OpSpec` (since, input names, input options, at most
inputs, at most outputs, attributes as (name, type, required), has a function body).
"""
# ruff: noqa: E501


ONNX_VERSION = '1.23.2'
"""The onnx release the table was written from."""

MAX_OPSETS: dict[str, int] = {'': 28, 'ai.onnx.ml': 5, 'ai.onnx.preview': 1, 'ai.onnx.preview.training': 1, 'ai.onnx.training': 1}
"""The newest opset of each domain that release knows: the table answers for these."""

SPECS: dict[tuple[str, str], tuple[tuple, ...]] = {
    ('', 'Abs'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'Acos'): (
        (7, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Acosh'): (
        (9, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Add'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('consumed_inputs', 7, False), ('broadcast', 2, False)), False),
        (6, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
        (13, ('A', 'B'), 'SS', 2, 1, (), False),
        (14, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'AffineGrid'): (
        (20, ('theta', 'size'), 'SS', 2, 1, (('align_corners', 2, False),), True),
    ),
    ('', 'And'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'ArgMax'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axis', 2, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axis', 2, False)), False),
        (12, ('data',), 'S', 1, 1, (('select_last_index', 2, False), ('keepdims', 2, False), ('axis', 2, False)), False),
        (13, ('data',), 'S', 1, 1, (('select_last_index', 2, False), ('keepdims', 2, False), ('axis', 2, False)), False),
    ),
    ('', 'ArgMin'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axis', 2, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axis', 2, False)), False),
        (12, ('data',), 'S', 1, 1, (('select_last_index', 2, False), ('keepdims', 2, False), ('axis', 2, False)), False),
        (13, ('data',), 'S', 1, 1, (('select_last_index', 2, False), ('keepdims', 2, False), ('axis', 2, False)), False),
    ),
    ('', 'Asin'): (
        (7, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Asinh'): (
        (9, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Atan'): (
        (7, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Atanh'): (
        (9, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Attention'): (
        (23, ('Q', 'K', 'V', 'attn_mask', 'past_key', 'past_value'), 'SSSOOO', 6, 4, (('qk_matmul_output_mode', 2, False), ('softcap', 1, False), ('softmax_precision', 2, False), ('kv_num_heads', 2, False), ('q_num_heads', 2, False), ('scale', 1, False), ('is_causal', 2, False)), True),
        (24, ('Q', 'K', 'V', 'attn_mask', 'past_key', 'past_value', 'nonpad_kv_seqlen'), 'SSSOOOO', 7, 4, (('qk_matmul_output_mode', 2, False), ('softcap', 1, False), ('softmax_precision', 2, False), ('kv_num_heads', 2, False), ('q_num_heads', 2, False), ('scale', 1, False), ('is_causal', 2, False)), True),
        (25, ('Q', 'K', 'V', 'attn_mask', 'past_key', 'past_value', 'nonpad_kv_seqlen'), 'SSSOOOO', 7, 4, (('right_window_size', 2, False), ('left_window_size', 2, False), ('qk_matmul_output_mode', 2, False), ('softcap', 1, False), ('softmax_precision', 2, False), ('kv_num_heads', 2, False), ('q_num_heads', 2, False), ('scale', 1, False), ('is_causal', 2, False)), True),
    ),
    ('', 'AveragePool'): (
        (1, ('X',), 'S', 1, 1, (('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (7, ('X',), 'S', 1, 1, (('count_include_pad', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (10, ('X',), 'S', 1, 1, (('count_include_pad', 2, False), ('ceil_mode', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (11, ('X',), 'S', 1, 1, (('count_include_pad', 2, False), ('ceil_mode', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (19, ('X',), 'S', 1, 1, (('count_include_pad', 2, False), ('dilations', 7, False), ('ceil_mode', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (22, ('X',), 'S', 1, 1, (('count_include_pad', 2, False), ('dilations', 7, False), ('ceil_mode', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
    ),
    ('', 'BatchNormalization'): (
        (1, ('X', 'scale', 'B', 'mean', 'var'), 'SSSSS', 5, 5, (('consumed_inputs', 7, True), ('momentum', 1, False), ('epsilon', 1, False), ('is_test', 2, False), ('spatial', 2, False)), False),
        (6, ('X', 'scale', 'B', 'mean', 'var'), 'SSSSS', 5, 5, (('momentum', 1, False), ('epsilon', 1, False), ('is_test', 2, False), ('spatial', 2, False)), False),
        (7, ('X', 'scale', 'B', 'mean', 'var'), 'SSSSS', 5, 5, (('momentum', 1, False), ('epsilon', 1, False), ('spatial', 2, False)), False),
        (9, ('X', 'scale', 'B', 'mean', 'var'), 'SSSSS', 5, 5, (('momentum', 1, False), ('epsilon', 1, False)), False),
        (14, ('X', 'scale', 'B', 'input_mean', 'input_var'), 'SSSSS', 5, 3, (('training_mode', 2, False), ('momentum', 1, False), ('epsilon', 1, False)), False),
        (15, ('X', 'scale', 'B', 'input_mean', 'input_var'), 'SSSSS', 5, 3, (('training_mode', 2, False), ('momentum', 1, False), ('epsilon', 1, False)), False),
    ),
    ('', 'Bernoulli'): (
        (15, ('input',), 'S', 1, 1, (('dtype', 2, False), ('seed', 1, False)), True),
        (22, ('input',), 'S', 1, 1, (('dtype', 2, False), ('seed', 1, False)), True),
    ),
    ('', 'BitCast'): (
        (26, ('input',), 'S', 1, 1, (('to', 2, True),), False),
    ),
    ('', 'BitShift'): (
        (11, ('X', 'Y'), 'SS', 2, 1, (('direction', 3, True),), False),
        (28, ('X', 'Y'), 'SS', 2, 1, (('direction', 3, True),), False),
    ),
    ('', 'BitwiseAnd'): (
        (18, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'BitwiseNot'): (
        (18, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'BitwiseOr'): (
        (18, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'BitwiseXor'): (
        (18, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'BlackmanWindow'): (
        (17, ('size',), 'S', 1, 1, (('periodic', 2, False), ('output_datatype', 2, False)), True),
    ),
    ('', 'Cast'): (
        (1, ('input',), 'S', 1, 1, (('to', 3, True),), False),
        (6, ('input',), 'S', 1, 1, (('to', 2, True),), False),
        (9, ('input',), 'S', 1, 1, (('to', 2, True),), False),
        (13, ('input',), 'S', 1, 1, (('to', 2, True),), False),
        (19, ('input',), 'S', 1, 1, (('saturate', 2, False), ('to', 2, True)), False),
        (21, ('input',), 'S', 1, 1, (('saturate', 2, False), ('to', 2, True)), False),
        (23, ('input',), 'S', 1, 1, (('saturate', 2, False), ('to', 2, True)), False),
        (24, ('input',), 'S', 1, 1, (('round_mode', 3, False), ('saturate', 2, False), ('to', 2, True)), False),
        (25, ('input',), 'S', 1, 1, (('round_mode', 3, False), ('saturate', 2, False), ('to', 2, True)), False),
        (28, ('input',), 'S', 1, 1, (('round_mode', 3, False), ('saturate', 2, False), ('to', 2, True)), False),
    ),
    ('', 'CastLike'): (
        (15, ('input', 'target_type'), 'SS', 2, 1, (), True),
        (19, ('input', 'target_type'), 'SS', 2, 1, (('saturate', 2, False),), True),
        (21, ('input', 'target_type'), 'SS', 2, 1, (('saturate', 2, False),), True),
        (23, ('input', 'target_type'), 'SS', 2, 1, (('saturate', 2, False),), True),
        (24, ('input', 'target_type'), 'SS', 2, 1, (('round_mode', 3, False), ('saturate', 2, False)), True),
        (25, ('input', 'target_type'), 'SS', 2, 1, (('round_mode', 3, False), ('saturate', 2, False)), True),
    ),
    ('', 'CausalConvWithState'): (
        (27, ('input', 'weight', 'bias', 'past_state'), 'SSOO', 4, 2, (('activation', 3, False),), True),
    ),
    ('', 'Ceil'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'Celu'): (
        (12, ('X',), 'S', 1, 1, (('alpha', 1, False),), True),
        (28, ('X',), 'S', 1, 1, (('alpha', 1, False),), True),
    ),
    ('', 'CenterCropPad'): (
        (18, ('input_data', 'shape'), 'SS', 2, 1, (('axes', 7, False),), True),
    ),
    ('', 'Clip'): (
        (1, ('input',), 'S', 1, 1, (('consumed_inputs', 7, False), ('max', 1, False), ('min', 1, False)), False),
        (6, ('input',), 'S', 1, 1, (('max', 1, False), ('min', 1, False)), False),
        (11, ('input', 'min', 'max'), 'SOO', 3, 1, (), False),
        (12, ('input', 'min', 'max'), 'SOO', 3, 1, (), False),
        (13, ('input', 'min', 'max'), 'SOO', 3, 1, (), True),
    ),
    ('', 'Col2Im'): (
        (18, ('input', 'image_shape', 'block_shape'), 'SSS', 3, 1, (('strides', 7, False), ('pads', 7, False), ('dilations', 7, False)), False),
    ),
    ('', 'Compress'): (
        (9, ('input', 'condition'), 'SS', 2, 1, (('axis', 2, False),), False),
        (11, ('input', 'condition'), 'SS', 2, 1, (('axis', 2, False),), False),
        (28, ('input', 'condition'), 'SS', 2, 1, (('axis', 2, False),), False),
    ),
    ('', 'Concat'): (
        (1, ('inputs',), 'V', 2147483647, 1, (('axis', 2, False),), False),
        (4, ('inputs',), 'V', 2147483647, 1, (('axis', 2, True),), False),
        (11, ('inputs',), 'V', 2147483647, 1, (('axis', 2, True),), False),
        (13, ('inputs',), 'V', 2147483647, 1, (('axis', 2, True),), False),
    ),
    ('', 'ConcatFromSequence'): (
        (11, ('input_sequence',), 'S', 1, 1, (('new_axis', 2, False), ('axis', 2, True)), False),
    ),
    ('', 'Constant'): (
        (1, (), '', 0, 1, (('value', 4, True),), False),
        (9, (), '', 0, 1, (('value', 4, True),), False),
        (11, (), '', 0, 1, (('sparse_value', 11, False), ('value', 4, False)), False),
        (12, (), '', 0, 1, (('value_strings', 8, False), ('value_string', 3, False), ('value_floats', 6, False), ('value_float', 1, False), ('value_ints', 7, False), ('value_int', 2, False), ('sparse_value', 11, False), ('value', 4, False)), False),
        (13, (), '', 0, 1, (('value_strings', 8, False), ('value_string', 3, False), ('value_floats', 6, False), ('value_float', 1, False), ('value_ints', 7, False), ('value_int', 2, False), ('sparse_value', 11, False), ('value', 4, False)), False),
        (19, (), '', 0, 1, (('value_strings', 8, False), ('value_string', 3, False), ('value_floats', 6, False), ('value_float', 1, False), ('value_ints', 7, False), ('value_int', 2, False), ('sparse_value', 11, False), ('value', 4, False)), False),
        (21, (), '', 0, 1, (('value_strings', 8, False), ('value_string', 3, False), ('value_floats', 6, False), ('value_float', 1, False), ('value_ints', 7, False), ('value_int', 2, False), ('sparse_value', 11, False), ('value', 4, False)), False),
        (23, (), '', 0, 1, (('value_strings', 8, False), ('value_string', 3, False), ('value_floats', 6, False), ('value_float', 1, False), ('value_ints', 7, False), ('value_int', 2, False), ('sparse_value', 11, False), ('value', 4, False)), False),
        (24, (), '', 0, 1, (('value_strings', 8, False), ('value_string', 3, False), ('value_floats', 6, False), ('value_float', 1, False), ('value_ints', 7, False), ('value_int', 2, False), ('sparse_value', 11, False), ('value', 4, False)), False),
        (25, (), '', 0, 1, (('value_strings', 8, False), ('value_string', 3, False), ('value_floats', 6, False), ('value_float', 1, False), ('value_ints', 7, False), ('value_int', 2, False), ('sparse_value', 11, False), ('value', 4, False)), False),
    ),
    ('', 'ConstantOfShape'): (
        (9, ('input',), 'S', 1, 1, (('value', 4, False),), False),
        (20, ('input',), 'S', 1, 1, (('value', 4, False),), False),
        (21, ('input',), 'S', 1, 1, (('value', 4, False),), False),
        (23, ('input',), 'S', 1, 1, (('value', 4, False),), False),
        (24, ('input',), 'S', 1, 1, (('value', 4, False),), False),
        (25, ('input',), 'S', 1, 1, (('value', 4, False),), False),
    ),
    ('', 'Conv'): (
        (1, ('X', 'W', 'B'), 'SSO', 3, 1, (('group', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('dilations', 7, False), ('kernel_shape', 7, False)), False),
        (11, ('X', 'W', 'B'), 'SSO', 3, 1, (('group', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('dilations', 7, False), ('kernel_shape', 7, False)), False),
        (22, ('X', 'W', 'B'), 'SSO', 3, 1, (('group', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('dilations', 7, False), ('kernel_shape', 7, False)), False),
    ),
    ('', 'ConvInteger'): (
        (10, ('x', 'w', 'x_zero_point', 'w_zero_point'), 'SSOO', 4, 1, (('group', 2, False), ('pads', 7, False), ('strides', 7, False), ('dilations', 7, False), ('kernel_shape', 7, False), ('auto_pad', 3, False)), False),
    ),
    ('', 'ConvTranspose'): (
        (1, ('X', 'W', 'B'), 'SSO', 3, 1, (('group', 2, False), ('auto_pad', 3, False), ('strides', 7, False), ('pads', 7, False), ('output_padding', 7, False), ('dilations', 7, False), ('output_shape', 7, False), ('kernel_shape', 7, False)), False),
        (11, ('X', 'W', 'B'), 'SSO', 3, 1, (('group', 2, False), ('auto_pad', 3, False), ('strides', 7, False), ('pads', 7, False), ('output_padding', 7, False), ('dilations', 7, False), ('output_shape', 7, False), ('kernel_shape', 7, False)), False),
        (22, ('X', 'W', 'B'), 'SSO', 3, 1, (('group', 2, False), ('auto_pad', 3, False), ('strides', 7, False), ('pads', 7, False), ('output_padding', 7, False), ('dilations', 7, False), ('output_shape', 7, False), ('kernel_shape', 7, False)), False),
    ),
    ('', 'Cos'): (
        (7, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Cosh'): (
        (9, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'CumProd'): (
        (26, ('x', 'axis'), 'SS', 2, 1, (('reverse', 2, False), ('exclusive', 2, False)), False),
    ),
    ('', 'CumSum'): (
        (11, ('x', 'axis'), 'SS', 2, 1, (('reverse', 2, False), ('exclusive', 2, False)), False),
        (14, ('x', 'axis'), 'SS', 2, 1, (('reverse', 2, False), ('exclusive', 2, False)), False),
    ),
    ('', 'DFT'): (
        (17, ('input', 'dft_length'), 'SO', 2, 1, (('inverse', 2, False), ('axis', 2, False), ('onesided', 2, False)), False),
        (20, ('input', 'dft_length', 'axis'), 'SOO', 3, 1, (('inverse', 2, False), ('onesided', 2, False)), False),
    ),
    ('', 'DeformConv'): (
        (19, ('X', 'W', 'offset', 'B', 'mask'), 'SSSOO', 5, 1, (('strides', 7, False), ('pads', 7, False), ('offset_group', 2, False), ('kernel_shape', 7, False), ('group', 2, False), ('dilations', 7, False)), False),
        (22, ('X', 'W', 'offset', 'B', 'mask'), 'SSSOO', 5, 1, (('strides', 7, False), ('pads', 7, False), ('offset_group', 2, False), ('kernel_shape', 7, False), ('group', 2, False), ('dilations', 7, False)), False),
    ),
    ('', 'DepthToSpace'): (
        (1, ('input',), 'S', 1, 1, (('blocksize', 2, True),), False),
        (11, ('input',), 'S', 1, 1, (('mode', 3, False), ('blocksize', 2, True)), False),
        (13, ('input',), 'S', 1, 1, (('mode', 3, False), ('blocksize', 2, True)), False),
        (28, ('input',), 'S', 1, 1, (('mode', 3, False), ('blocksize', 2, True)), True),
    ),
    ('', 'DequantizeLinear'): (
        (10, ('x', 'x_scale', 'x_zero_point'), 'SSO', 3, 1, (), False),
        (13, ('x', 'x_scale', 'x_zero_point'), 'SSO', 3, 1, (('axis', 2, False),), False),
        (19, ('x', 'x_scale', 'x_zero_point'), 'SSO', 3, 1, (('axis', 2, False),), False),
        (21, ('x', 'x_scale', 'x_zero_point'), 'SSO', 3, 1, (('block_size', 2, False), ('axis', 2, False)), False),
        (23, ('x', 'x_scale', 'x_zero_point'), 'SSO', 3, 1, (('output_dtype', 2, False), ('block_size', 2, False), ('axis', 2, False)), False),
        (24, ('x', 'x_scale', 'x_zero_point'), 'SSO', 3, 1, (('output_dtype', 2, False), ('block_size', 2, False), ('axis', 2, False)), False),
        (25, ('x', 'x_scale', 'x_zero_point'), 'SSO', 3, 1, (('output_dtype', 2, False), ('block_size', 2, False), ('axis', 2, False)), False),
        (28, ('x', 'x_scale', 'x_zero_point'), 'SSO', 3, 1, (('output_dtype', 2, False), ('block_size', 2, False), ('axis', 2, False)), False),
    ),
    ('', 'Det'): (
        (11, ('X',), 'S', 1, 1, (), False),
        (22, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'Div'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('consumed_inputs', 7, False), ('broadcast', 2, False)), False),
        (6, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
        (13, ('A', 'B'), 'SS', 2, 1, (), False),
        (14, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'Dropout'): (
        (1, ('data',), 'S', 1, 2, (('is_test', 2, False), ('consumed_inputs', 7, False), ('ratio', 1, False)), False),
        (6, ('data',), 'S', 1, 2, (('is_test', 2, False), ('ratio', 1, False)), False),
        (7, ('data',), 'S', 1, 2, (('ratio', 1, False),), False),
        (10, ('data',), 'S', 1, 2, (('ratio', 1, False),), False),
        (12, ('data', 'ratio', 'training_mode'), 'SOO', 3, 2, (('seed', 2, False),), False),
        (13, ('data', 'ratio', 'training_mode'), 'SOO', 3, 2, (('seed', 2, False),), False),
        (22, ('data', 'ratio', 'training_mode'), 'SOO', 3, 2, (('seed', 2, False),), False),
    ),
    ('', 'DynamicQuantizeLinear'): (
        (11, ('x',), 'S', 1, 3, (), True),
    ),
    ('', 'Einsum'): (
        (12, ('Inputs',), 'V', 2147483647, 1, (('equation', 3, True),), False),
        (28, ('Inputs',), 'V', 2147483647, 1, (('equation', 3, True),), False),
    ),
    ('', 'Elu'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False), ('alpha', 1, False)), False),
        (6, ('X',), 'S', 1, 1, (('alpha', 1, False),), True),
        (22, ('X',), 'S', 1, 1, (('alpha', 1, False),), True),
    ),
    ('', 'Equal'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
        (11, ('A', 'B'), 'SS', 2, 1, (), False),
        (13, ('A', 'B'), 'SS', 2, 1, (), False),
        (19, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'Erf'): (
        (9, ('input',), 'S', 1, 1, (), False),
        (13, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Exp'): (
        (1, ('input',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('input',), 'S', 1, 1, (), False),
        (13, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Expand'): (
        (8, ('input', 'shape'), 'SS', 2, 1, (), False),
        (13, ('input', 'shape'), 'SS', 2, 1, (), False),
    ),
    ('', 'EyeLike'): (
        (9, ('input',), 'S', 1, 1, (('dtype', 2, False), ('k', 2, False)), False),
        (22, ('input',), 'S', 1, 1, (('dtype', 2, False), ('k', 2, False)), False),
    ),
    ('', 'Flatten'): (
        (1, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (9, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (11, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (13, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (21, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (23, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (24, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (25, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
    ),
    ('', 'Floor'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'GRU'): (
        (1, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('output_sequence', 2, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('activations', 8, False)), False),
        (3, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('output_sequence', 2, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('linear_before_reset', 2, False), ('activations', 8, False)), False),
        (7, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('linear_before_reset', 2, False), ('activations', 8, False)), False),
        (14, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('layout', 2, False), ('direction', 3, False), ('linear_before_reset', 2, False), ('activations', 8, False)), False),
        (22, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('layout', 2, False), ('direction', 3, False), ('linear_before_reset', 2, False), ('activations', 8, False)), False),
    ),
    ('', 'Gather'): (
        (1, ('data', 'indices'), 'SS', 2, 1, (('axis', 2, False),), False),
        (11, ('data', 'indices'), 'SS', 2, 1, (('axis', 2, False),), False),
        (13, ('data', 'indices'), 'SS', 2, 1, (('axis', 2, False),), False),
    ),
    ('', 'GatherElements'): (
        (11, ('data', 'indices'), 'SS', 2, 1, (('axis', 2, False),), False),
        (13, ('data', 'indices'), 'SS', 2, 1, (('axis', 2, False),), False),
    ),
    ('', 'GatherND'): (
        (11, ('data', 'indices'), 'SS', 2, 1, (), False),
        (12, ('data', 'indices'), 'SS', 2, 1, (('batch_dims', 2, False),), False),
        (13, ('data', 'indices'), 'SS', 2, 1, (('batch_dims', 2, False),), False),
    ),
    ('', 'Gelu'): (
        (20, ('X',), 'S', 1, 1, (('approximate', 3, False),), True),
    ),
    ('', 'Gemm'): (
        (1, ('A', 'B', 'C'), 'SSS', 3, 1, (('beta', 1, False), ('broadcast', 2, False), ('transB', 2, False), ('alpha', 1, False), ('transA', 2, False)), False),
        (6, ('A', 'B', 'C'), 'SSS', 3, 1, (('beta', 1, False), ('broadcast', 2, False), ('transB', 2, False), ('alpha', 1, False), ('transA', 2, False)), False),
        (7, ('A', 'B', 'C'), 'SSS', 3, 1, (('beta', 1, False), ('transB', 2, False), ('alpha', 1, False), ('transA', 2, False)), False),
        (9, ('A', 'B', 'C'), 'SSS', 3, 1, (('beta', 1, False), ('transB', 2, False), ('alpha', 1, False), ('transA', 2, False)), False),
        (11, ('A', 'B', 'C'), 'SSO', 3, 1, (('beta', 1, False), ('transB', 2, False), ('alpha', 1, False), ('transA', 2, False)), False),
        (13, ('A', 'B', 'C'), 'SSO', 3, 1, (('beta', 1, False), ('transB', 2, False), ('alpha', 1, False), ('transA', 2, False)), False),
    ),
    ('', 'GlobalAveragePool'): (
        (1, ('X',), 'S', 1, 1, (), False),
        (22, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'GlobalLpPool'): (
        (1, ('X',), 'S', 1, 1, (('p', 1, False),), False),
        (2, ('X',), 'S', 1, 1, (('p', 2, False),), False),
        (22, ('X',), 'S', 1, 1, (('p', 2, False),), False),
    ),
    ('', 'GlobalMaxPool'): (
        (1, ('X',), 'S', 1, 1, (), False),
        (22, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'Greater'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
        (9, ('A', 'B'), 'SS', 2, 1, (), False),
        (13, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'GreaterOrEqual'): (
        (12, ('A', 'B'), 'SS', 2, 1, (), True),
        (16, ('A', 'B'), 'SS', 2, 1, (), True),
    ),
    ('', 'GridSample'): (
        (16, ('X', 'grid'), 'SS', 2, 1, (('align_corners', 2, False), ('padding_mode', 3, False), ('mode', 3, False)), False),
        (20, ('X', 'grid'), 'SS', 2, 1, (('align_corners', 2, False), ('padding_mode', 3, False), ('mode', 3, False)), False),
        (22, ('X', 'grid'), 'SS', 2, 1, (('align_corners', 2, False), ('padding_mode', 3, False), ('mode', 3, False)), False),
    ),
    ('', 'GroupNormalization'): (
        (18, ('X', 'scale', 'bias'), 'SSS', 3, 1, (('num_groups', 2, True), ('epsilon', 1, False)), True),
        (21, ('X', 'scale', 'bias'), 'SSS', 3, 1, (('stash_type', 2, False), ('num_groups', 2, True), ('epsilon', 1, False)), True),
    ),
    ('', 'HammingWindow'): (
        (17, ('size',), 'S', 1, 1, (('periodic', 2, False), ('output_datatype', 2, False)), True),
    ),
    ('', 'HannWindow'): (
        (17, ('size',), 'S', 1, 1, (('periodic', 2, False), ('output_datatype', 2, False)), True),
    ),
    ('', 'HardSigmoid'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False), ('beta', 1, False), ('alpha', 1, False)), False),
        (6, ('X',), 'S', 1, 1, (('beta', 1, False), ('alpha', 1, False)), True),
        (22, ('X',), 'S', 1, 1, (('beta', 1, False), ('alpha', 1, False)), True),
    ),
    ('', 'HardSwish'): (
        (14, ('X',), 'S', 1, 1, (), True),
        (22, ('X',), 'S', 1, 1, (), True),
    ),
    ('', 'Hardmax'): (
        (1, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (11, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (13, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
    ),
    ('', 'Identity'): (
        (1, ('input',), 'S', 1, 1, (), False),
        (13, ('input',), 'S', 1, 1, (), False),
        (14, ('input',), 'S', 1, 1, (), False),
        (16, ('input',), 'S', 1, 1, (), False),
        (19, ('input',), 'S', 1, 1, (), False),
        (21, ('input',), 'S', 1, 1, (), False),
        (23, ('input',), 'S', 1, 1, (), False),
        (24, ('input',), 'S', 1, 1, (), False),
        (25, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'If'): (
        (1, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
        (11, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
        (13, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
        (16, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
        (19, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
        (21, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
        (23, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
        (24, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
        (25, ('cond',), 'S', 1, 2147483647, (('else_branch', 5, True), ('then_branch', 5, True)), False),
    ),
    ('', 'ImageDecoder'): (
        (20, ('encoded_stream',), 'S', 1, 1, (('pixel_format', 3, False),), False),
    ),
    ('', 'InstanceNormalization'): (
        (1, ('input', 'scale', 'B'), 'SSS', 3, 1, (('epsilon', 1, False), ('consumed_inputs', 7, False)), False),
        (6, ('input', 'scale', 'B'), 'SSS', 3, 1, (('epsilon', 1, False),), False),
        (22, ('input', 'scale', 'B'), 'SSS', 3, 1, (('epsilon', 1, False),), False),
    ),
    ('', 'IsInf'): (
        (10, ('X',), 'S', 1, 1, (('detect_negative', 2, False), ('detect_positive', 2, False)), False),
        (20, ('X',), 'S', 1, 1, (('detect_negative', 2, False), ('detect_positive', 2, False)), False),
    ),
    ('', 'IsNaN'): (
        (9, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
        (20, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'LRN'): (
        (1, ('X',), 'S', 1, 1, (('bias', 1, False), ('beta', 1, False), ('alpha', 1, False), ('size', 2, True)), False),
        (13, ('X',), 'S', 1, 1, (('bias', 1, False), ('beta', 1, False), ('alpha', 1, False), ('size', 2, True)), False),
    ),
    ('', 'LSTM'): (
        (1, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h', 'initial_c', 'P'), 'SSSOOOOO', 8, 3, (('clip', 1, False), ('activation_beta', 6, False), ('output_sequence', 2, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('input_forget', 2, False), ('activations', 8, False)), False),
        (7, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h', 'initial_c', 'P'), 'SSSOOOOO', 8, 3, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('input_forget', 2, False), ('activations', 8, False)), False),
        (14, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h', 'initial_c', 'P'), 'SSSOOOOO', 8, 3, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('input_forget', 2, False), ('layout', 2, False), ('activations', 8, False)), False),
        (22, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h', 'initial_c', 'P'), 'SSSOOOOO', 8, 3, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('input_forget', 2, False), ('layout', 2, False), ('activations', 8, False)), False),
    ),
    ('', 'LayerNormalization'): (
        (17, ('X', 'Scale', 'B'), 'SSO', 3, 3, (('stash_type', 2, False), ('epsilon', 1, False), ('axis', 2, False)), True),
    ),
    ('', 'LeakyRelu'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False), ('alpha', 1, False)), False),
        (6, ('X',), 'S', 1, 1, (('alpha', 1, False),), False),
        (16, ('X',), 'S', 1, 1, (('alpha', 1, False),), True),
    ),
    ('', 'Less'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
        (9, ('A', 'B'), 'SS', 2, 1, (), False),
        (13, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'LessOrEqual'): (
        (12, ('A', 'B'), 'SS', 2, 1, (), True),
        (16, ('A', 'B'), 'SS', 2, 1, (), True),
    ),
    ('', 'LinearAttention'): (
        (27, ('query', 'key', 'value', 'past_state', 'decay', 'beta'), 'SSSOOO', 6, 2, (('chunk_size', 2, False), ('kv_num_heads', 2, True), ('q_num_heads', 2, True), ('scale', 1, False), ('update_rule', 3, False)), True),
    ),
    ('', 'Log'): (
        (1, ('input',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('input',), 'S', 1, 1, (), False),
        (13, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'LogSoftmax'): (
        (1, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (11, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (13, ('input',), 'S', 1, 1, (('axis', 2, False),), True),
    ),
    ('', 'Loop'): (
        (1, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
        (11, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
        (13, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
        (16, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
        (19, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
        (21, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
        (23, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
        (24, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
        (25, ('M', 'cond', 'v_initial'), 'OOV', 2147483647, 2147483647, (('body', 5, True),), False),
    ),
    ('', 'LpNormalization'): (
        (1, ('input',), 'S', 1, 1, (('p', 2, False), ('axis', 2, False)), False),
        (22, ('input',), 'S', 1, 1, (('p', 2, False), ('axis', 2, False)), False),
    ),
    ('', 'LpPool'): (
        (1, ('X',), 'S', 1, 1, (('p', 1, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, False)), False),
        (2, ('X',), 'S', 1, 1, (('p', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (11, ('X',), 'S', 1, 1, (('p', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (18, ('X',), 'S', 1, 1, (('p', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('ceil_mode', 2, False), ('dilations', 7, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (22, ('X',), 'S', 1, 1, (('p', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('ceil_mode', 2, False), ('dilations', 7, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
    ),
    ('', 'MatMul'): (
        (1, ('A', 'B'), 'SS', 2, 1, (), False),
        (9, ('A', 'B'), 'SS', 2, 1, (), False),
        (13, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'MatMulInteger'): (
        (10, ('A', 'B', 'a_zero_point', 'b_zero_point'), 'SSOO', 4, 1, (), False),
    ),
    ('', 'Max'): (
        (1, ('data_0',), 'V', 2147483647, 1, (('consumed_inputs', 7, False),), False),
        (6, ('data_0',), 'V', 2147483647, 1, (), False),
        (8, ('data_0',), 'V', 2147483647, 1, (), False),
        (12, ('data_0',), 'V', 2147483647, 1, (), False),
        (13, ('data_0',), 'V', 2147483647, 1, (), False),
    ),
    ('', 'MaxPool'): (
        (1, ('X',), 'S', 1, 1, (('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (8, ('X',), 'S', 1, 2, (('storage_order', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (10, ('X',), 'S', 1, 2, (('storage_order', 2, False), ('dilations', 7, False), ('ceil_mode', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (11, ('X',), 'S', 1, 2, (('storage_order', 2, False), ('dilations', 7, False), ('ceil_mode', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (12, ('X',), 'S', 1, 2, (('storage_order', 2, False), ('dilations', 7, False), ('ceil_mode', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (22, ('X',), 'S', 1, 2, (('storage_order', 2, False), ('dilations', 7, False), ('ceil_mode', 2, False), ('pads', 7, False), ('auto_pad', 3, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
    ),
    ('', 'MaxRoiPool'): (
        (1, ('X', 'rois'), 'SS', 2, 1, (('spatial_scale', 1, False), ('pooled_shape', 7, True)), False),
        (22, ('X', 'rois'), 'SS', 2, 1, (('spatial_scale', 1, False), ('pooled_shape', 7, True)), False),
    ),
    ('', 'MaxUnpool'): (
        (9, ('X', 'I', 'output_shape'), 'SSO', 3, 1, (('pads', 7, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (11, ('X', 'I', 'output_shape'), 'SSO', 3, 1, (('pads', 7, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
        (22, ('X', 'I', 'output_shape'), 'SSO', 3, 1, (('pads', 7, False), ('strides', 7, False), ('kernel_shape', 7, True)), False),
    ),
    ('', 'Mean'): (
        (1, ('data_0',), 'V', 2147483647, 1, (('consumed_inputs', 7, False),), False),
        (6, ('data_0',), 'V', 2147483647, 1, (), False),
        (8, ('data_0',), 'V', 2147483647, 1, (), False),
        (13, ('data_0',), 'V', 2147483647, 1, (), False),
    ),
    ('', 'MeanVarianceNormalization'): (
        (9, ('X',), 'S', 1, 1, (('axes', 7, False),), True),
        (13, ('X',), 'S', 1, 1, (('axes', 7, False),), True),
    ),
    ('', 'MelWeightMatrix'): (
        (17, ('num_mel_bins', 'dft_length', 'sample_rate', 'lower_edge_hertz', 'upper_edge_hertz'), 'SSSSS', 5, 1, (('output_datatype', 2, False),), False),
    ),
    ('', 'Min'): (
        (1, ('data_0',), 'V', 2147483647, 1, (('consumed_inputs', 7, False),), False),
        (6, ('data_0',), 'V', 2147483647, 1, (), False),
        (8, ('data_0',), 'V', 2147483647, 1, (), False),
        (12, ('data_0',), 'V', 2147483647, 1, (), False),
        (13, ('data_0',), 'V', 2147483647, 1, (), False),
    ),
    ('', 'Mish'): (
        (18, ('X',), 'S', 1, 1, (), True),
        (22, ('X',), 'S', 1, 1, (), True),
    ),
    ('', 'Mod'): (
        (10, ('A', 'B'), 'SS', 2, 1, (('fmod', 2, False),), False),
        (13, ('A', 'B'), 'SS', 2, 1, (('fmod', 2, False),), False),
        (28, ('A', 'B'), 'SS', 2, 1, (('fmod', 2, False),), False),
    ),
    ('', 'Mul'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('consumed_inputs', 7, False), ('broadcast', 2, False)), False),
        (6, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
        (13, ('A', 'B'), 'SS', 2, 1, (), False),
        (14, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'Multinomial'): (
        (7, ('input',), 'S', 1, 1, (('dtype', 2, False), ('seed', 1, False), ('sample_size', 2, False)), False),
        (22, ('input',), 'S', 1, 1, (('dtype', 2, False), ('seed', 1, False), ('sample_size', 2, False)), False),
    ),
    ('', 'Neg'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'NegativeLogLikelihoodLoss'): (
        (12, ('input', 'target', 'weight'), 'SSO', 3, 1, (('ignore_index', 2, False), ('reduction', 3, False)), True),
        (13, ('input', 'target', 'weight'), 'SSO', 3, 1, (('ignore_index', 2, False), ('reduction', 3, False)), True),
        (22, ('input', 'target', 'weight'), 'SSO', 3, 1, (('ignore_index', 2, False), ('reduction', 3, False)), True),
    ),
    ('', 'NonMaxSuppression'): (
        (10, ('boxes', 'scores', 'max_output_boxes_per_class', 'iou_threshold', 'score_threshold'), 'SSOOO', 5, 1, (('center_point_box', 2, False),), False),
        (11, ('boxes', 'scores', 'max_output_boxes_per_class', 'iou_threshold', 'score_threshold'), 'SSOOO', 5, 1, (('center_point_box', 2, False),), False),
    ),
    ('', 'NonZero'): (
        (9, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'Not'): (
        (1, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'OneHot'): (
        (9, ('indices', 'depth', 'values'), 'SSS', 3, 1, (('axis', 2, False),), False),
        (11, ('indices', 'depth', 'values'), 'SSS', 3, 1, (('axis', 2, False),), False),
        (28, ('indices', 'depth', 'values'), 'SSS', 3, 1, (('axis', 2, False),), False),
    ),
    ('', 'Optional'): (
        (15, ('input',), 'O', 1, 1, (('type', 13, False),), False),
        (28, ('input',), 'O', 1, 1, (('type', 13, False),), False),
    ),
    ('', 'OptionalGetElement'): (
        (15, ('input',), 'S', 1, 1, (), False),
        (18, ('input',), 'S', 1, 1, (), False),
        (28, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'OptionalHasElement'): (
        (15, ('input',), 'S', 1, 1, (), False),
        (18, ('input',), 'O', 1, 1, (), False),
        (28, ('input',), 'O', 1, 1, (), False),
    ),
    ('', 'Or'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'PRelu'): (
        (1, ('X', 'slope'), 'SS', 2, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X', 'slope'), 'SS', 2, 1, (), False),
        (7, ('X', 'slope'), 'SS', 2, 1, (), False),
        (9, ('X', 'slope'), 'SS', 2, 1, (), False),
        (16, ('X', 'slope'), 'SS', 2, 1, (), True),
    ),
    ('', 'Pad'): (
        (1, ('data',), 'S', 1, 1, (('value', 1, False), ('mode', 3, False), ('paddings', 7, True)), False),
        (2, ('data',), 'S', 1, 1, (('value', 1, False), ('mode', 3, False), ('pads', 7, True)), False),
        (11, ('data', 'pads', 'constant_value'), 'SSO', 3, 1, (('mode', 3, False),), False),
        (13, ('data', 'pads', 'constant_value'), 'SSO', 3, 1, (('mode', 3, False),), False),
        (18, ('data', 'pads', 'constant_value', 'axes'), 'SSOO', 4, 1, (('mode', 3, False),), False),
        (19, ('data', 'pads', 'constant_value', 'axes'), 'SSOO', 4, 1, (('mode', 3, False),), False),
        (21, ('data', 'pads', 'constant_value', 'axes'), 'SSOO', 4, 1, (('mode', 3, False),), False),
        (23, ('data', 'pads', 'constant_value', 'axes'), 'SSOO', 4, 1, (('mode', 3, False),), False),
        (24, ('data', 'pads', 'constant_value', 'axes'), 'SSOO', 4, 1, (('mode', 3, False),), False),
        (25, ('data', 'pads', 'constant_value', 'axes'), 'SSOO', 4, 1, (('mode', 3, False),), False),
    ),
    ('', 'Pow'): (
        (1, ('X', 'Y'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('X', 'Y'), 'SS', 2, 1, (), False),
        (12, ('X', 'Y'), 'SS', 2, 1, (), False),
        (13, ('X', 'Y'), 'SS', 2, 1, (), False),
        (15, ('X', 'Y'), 'SS', 2, 1, (), False),
    ),
    ('', 'QLinearConv'): (
        (10, ('x', 'x_scale', 'x_zero_point', 'w', 'w_scale', 'w_zero_point', 'y_scale', 'y_zero_point', 'B'), 'SSSSSSSSO', 9, 1, (('group', 2, False), ('pads', 7, False), ('strides', 7, False), ('dilations', 7, False), ('kernel_shape', 7, False), ('auto_pad', 3, False)), False),
    ),
    ('', 'QLinearMatMul'): (
        (10, ('a', 'a_scale', 'a_zero_point', 'b', 'b_scale', 'b_zero_point', 'y_scale', 'y_zero_point'), 'SSSSSSSS', 8, 1, (), False),
        (21, ('a', 'a_scale', 'a_zero_point', 'b', 'b_scale', 'b_zero_point', 'y_scale', 'y_zero_point'), 'SSSSSSSS', 8, 1, (), False),
    ),
    ('', 'QuantizeLinear'): (
        (10, ('x', 'y_scale', 'y_zero_point'), 'SSO', 3, 1, (), False),
        (13, ('x', 'y_scale', 'y_zero_point'), 'SSO', 3, 1, (('axis', 2, False),), False),
        (19, ('x', 'y_scale', 'y_zero_point'), 'SSO', 3, 1, (('saturate', 2, False), ('axis', 2, False)), False),
        (21, ('x', 'y_scale', 'y_zero_point'), 'SSO', 3, 1, (('output_dtype', 2, False), ('block_size', 2, False), ('saturate', 2, False), ('axis', 2, False)), False),
        (23, ('x', 'y_scale', 'y_zero_point'), 'SSO', 3, 1, (('precision', 2, False), ('output_dtype', 2, False), ('block_size', 2, False), ('saturate', 2, False), ('axis', 2, False)), False),
        (24, ('x', 'y_scale', 'y_zero_point'), 'SSO', 3, 1, (('precision', 2, False), ('output_dtype', 2, False), ('block_size', 2, False), ('saturate', 2, False), ('axis', 2, False)), False),
        (25, ('x', 'y_scale', 'y_zero_point'), 'SSO', 3, 1, (('precision', 2, False), ('output_dtype', 2, False), ('block_size', 2, False), ('saturate', 2, False), ('axis', 2, False)), False),
        (28, ('x', 'y_scale', 'y_zero_point'), 'SSO', 3, 1, (('precision', 2, False), ('output_dtype', 2, False), ('block_size', 2, False), ('saturate', 2, False), ('axis', 2, False)), False),
    ),
    ('', 'RMSNormalization'): (
        (23, ('X', 'scale'), 'SS', 2, 1, (('stash_type', 2, False), ('epsilon', 1, False), ('axis', 2, False)), True),
    ),
    ('', 'RNN'): (
        (1, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('output_sequence', 2, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('activations', 8, False)), False),
        (7, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('direction', 3, False), ('activations', 8, False)), False),
        (14, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('layout', 2, False), ('direction', 3, False), ('activations', 8, False)), False),
        (22, ('X', 'W', 'R', 'B', 'sequence_lens', 'initial_h'), 'SSSOOO', 6, 2, (('clip', 1, False), ('activation_beta', 6, False), ('activation_alpha', 6, False), ('hidden_size', 2, False), ('layout', 2, False), ('direction', 3, False), ('activations', 8, False)), False),
    ),
    ('', 'RandomNormal'): (
        (1, (), '', 0, 1, (('shape', 7, True), ('dtype', 2, False), ('seed', 1, False), ('scale', 1, False), ('mean', 1, False)), False),
        (22, (), '', 0, 1, (('shape', 7, True), ('dtype', 2, False), ('seed', 1, False), ('scale', 1, False), ('mean', 1, False)), False),
    ),
    ('', 'RandomNormalLike'): (
        (1, ('input',), 'S', 1, 1, (('dtype', 2, False), ('seed', 1, False), ('scale', 1, False), ('mean', 1, False)), False),
        (22, ('input',), 'S', 1, 1, (('dtype', 2, False), ('seed', 1, False), ('scale', 1, False), ('mean', 1, False)), False),
    ),
    ('', 'RandomUniform'): (
        (1, (), '', 0, 1, (('shape', 7, True), ('dtype', 2, False), ('seed', 1, False), ('high', 1, False), ('low', 1, False)), False),
        (22, (), '', 0, 1, (('shape', 7, True), ('dtype', 2, False), ('seed', 1, False), ('high', 1, False), ('low', 1, False)), False),
    ),
    ('', 'RandomUniformLike'): (
        (1, ('input',), 'S', 1, 1, (('dtype', 2, False), ('seed', 1, False), ('high', 1, False), ('low', 1, False)), False),
        (22, ('input',), 'S', 1, 1, (('dtype', 2, False), ('seed', 1, False), ('high', 1, False), ('low', 1, False)), False),
    ),
    ('', 'Range'): (
        (11, ('start', 'limit', 'delta'), 'SSS', 3, 1, (), True),
        (27, ('start', 'limit', 'delta'), 'SSS', 3, 1, (('stash_type', 2, False),), True),
    ),
    ('', 'Reciprocal'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'ReduceL1'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), True),
    ),
    ('', 'ReduceL2'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), True),
    ),
    ('', 'ReduceLogSum'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), True),
        (28, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), True),
    ),
    ('', 'ReduceLogSumExp'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), True),
        (28, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), True),
    ),
    ('', 'ReduceMax'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (12, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), False),
        (20, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), False),
    ),
    ('', 'ReduceMean'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), False),
    ),
    ('', 'ReduceMin'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (12, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), False),
        (20, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), False),
    ),
    ('', 'ReduceProd'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), False),
    ),
    ('', 'ReduceSum'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), False),
    ),
    ('', 'ReduceSumSquare'): (
        (1, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (11, ('data',), 'S', 1, 1, (('keepdims', 2, False), ('axes', 7, False)), False),
        (13, ('data',), 'S', 1, 1, (('axes', 7, False), ('keepdims', 2, False)), False),
        (18, ('data', 'axes'), 'SO', 2, 1, (('noop_with_empty_axes', 2, False), ('keepdims', 2, False)), True),
    ),
    ('', 'RegexFullMatch'): (
        (20, ('X',), 'S', 1, 1, (('pattern', 3, False),), False),
    ),
    ('', 'Relu'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
        (14, ('X',), 'S', 1, 1, (), True),
    ),
    ('', 'Reshape'): (
        (1, ('data',), 'S', 1, 1, (('consumed_inputs', 7, False), ('shape', 7, False)), False),
        (5, ('data', 'shape'), 'SS', 2, 1, (), False),
        (13, ('data', 'shape'), 'SS', 2, 1, (), False),
        (14, ('data', 'shape'), 'SS', 2, 1, (('allowzero', 2, False),), False),
        (19, ('data', 'shape'), 'SS', 2, 1, (('allowzero', 2, False),), False),
        (21, ('data', 'shape'), 'SS', 2, 1, (('allowzero', 2, False),), False),
        (23, ('data', 'shape'), 'SS', 2, 1, (('allowzero', 2, False),), False),
        (24, ('data', 'shape'), 'SS', 2, 1, (('allowzero', 2, False),), False),
        (25, ('data', 'shape'), 'SS', 2, 1, (('allowzero', 2, False),), False),
    ),
    ('', 'Resize'): (
        (10, ('X', 'scales'), 'SS', 2, 1, (('mode', 3, False),), False),
        (11, ('X', 'roi', 'scales', 'sizes'), 'SSSO', 4, 1, (('extrapolation_value', 1, False), ('exclude_outside', 2, False), ('nearest_mode', 3, False), ('coordinate_transformation_mode', 3, False), ('cubic_coeff_a', 1, False), ('mode', 3, False)), False),
        (13, ('X', 'roi', 'scales', 'sizes'), 'SOOO', 4, 1, (('extrapolation_value', 1, False), ('exclude_outside', 2, False), ('nearest_mode', 3, False), ('coordinate_transformation_mode', 3, False), ('cubic_coeff_a', 1, False), ('mode', 3, False)), False),
        (18, ('X', 'roi', 'scales', 'sizes'), 'SOOO', 4, 1, (('keep_aspect_ratio_policy', 3, False), ('axes', 7, False), ('antialias', 2, False), ('extrapolation_value', 1, False), ('exclude_outside', 2, False), ('nearest_mode', 3, False), ('coordinate_transformation_mode', 3, False), ('cubic_coeff_a', 1, False), ('mode', 3, False)), False),
        (19, ('X', 'roi', 'scales', 'sizes'), 'SOOO', 4, 1, (('keep_aspect_ratio_policy', 3, False), ('axes', 7, False), ('antialias', 2, False), ('extrapolation_value', 1, False), ('exclude_outside', 2, False), ('nearest_mode', 3, False), ('coordinate_transformation_mode', 3, False), ('cubic_coeff_a', 1, False), ('mode', 3, False)), False),
    ),
    ('', 'ReverseSequence'): (
        (10, ('input', 'sequence_lens'), 'SS', 2, 1, (('batch_axis', 2, False), ('time_axis', 2, False)), False),
        (28, ('input', 'sequence_lens'), 'SS', 2, 1, (('batch_axis', 2, False), ('time_axis', 2, False)), False),
    ),
    ('', 'RoiAlign'): (
        (10, ('X', 'rois', 'batch_indices'), 'SSS', 3, 1, (('mode', 3, False), ('output_height', 2, False), ('sampling_ratio', 2, False), ('output_width', 2, False), ('spatial_scale', 1, False)), False),
        (16, ('X', 'rois', 'batch_indices'), 'SSS', 3, 1, (('coordinate_transformation_mode', 3, False), ('mode', 3, False), ('output_height', 2, False), ('sampling_ratio', 2, False), ('output_width', 2, False), ('spatial_scale', 1, False)), False),
        (22, ('X', 'rois', 'batch_indices'), 'SSS', 3, 1, (('coordinate_transformation_mode', 3, False), ('mode', 3, False), ('output_height', 2, False), ('sampling_ratio', 2, False), ('output_width', 2, False), ('spatial_scale', 1, False)), False),
    ),
    ('', 'RotaryEmbedding'): (
        (23, ('X', 'cos_cache', 'sin_cache', 'position_ids'), 'SSSO', 4, 1, (('num_heads', 2, False), ('rotary_embedding_dim', 2, False), ('interleaved', 2, False)), True),
    ),
    ('', 'Round'): (
        (11, ('X',), 'S', 1, 1, (), False),
        (22, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'STFT'): (
        (17, ('signal', 'frame_step', 'window', 'frame_length'), 'SSOO', 4, 1, (('onesided', 2, False),), False),
    ),
    ('', 'Scan'): (
        (8, ('sequence_lens', 'initial_state_and_scan_inputs'), 'OV', 2147483647, 2147483647, (('directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
        (9, ('initial_state_and_scan_inputs',), 'V', 2147483647, 2147483647, (('scan_input_axes', 7, False), ('scan_output_axes', 7, False), ('scan_output_directions', 7, False), ('scan_input_directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
        (11, ('initial_state_and_scan_inputs',), 'V', 2147483647, 2147483647, (('scan_input_axes', 7, False), ('scan_output_axes', 7, False), ('scan_output_directions', 7, False), ('scan_input_directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
        (16, ('initial_state_and_scan_inputs',), 'V', 2147483647, 2147483647, (('scan_input_axes', 7, False), ('scan_output_axes', 7, False), ('scan_output_directions', 7, False), ('scan_input_directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
        (19, ('initial_state_and_scan_inputs',), 'V', 2147483647, 2147483647, (('scan_input_axes', 7, False), ('scan_output_axes', 7, False), ('scan_output_directions', 7, False), ('scan_input_directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
        (21, ('initial_state_and_scan_inputs',), 'V', 2147483647, 2147483647, (('scan_input_axes', 7, False), ('scan_output_axes', 7, False), ('scan_output_directions', 7, False), ('scan_input_directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
        (23, ('initial_state_and_scan_inputs',), 'V', 2147483647, 2147483647, (('scan_input_axes', 7, False), ('scan_output_axes', 7, False), ('scan_output_directions', 7, False), ('scan_input_directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
        (24, ('initial_state_and_scan_inputs',), 'V', 2147483647, 2147483647, (('scan_input_axes', 7, False), ('scan_output_axes', 7, False), ('scan_output_directions', 7, False), ('scan_input_directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
        (25, ('initial_state_and_scan_inputs',), 'V', 2147483647, 2147483647, (('scan_input_axes', 7, False), ('scan_output_axes', 7, False), ('scan_output_directions', 7, False), ('scan_input_directions', 7, False), ('num_scan_inputs', 2, True), ('body', 5, True)), False),
    ),
    ('', 'Scatter'): (
        (9, ('data', 'indices', 'updates'), 'SSS', 3, 1, (('axis', 2, False),), False),
        (11, ('data', 'indices', 'updates'), 'SSS', 3, 1, (('axis', 2, False),), False),
    ),
    ('', 'ScatterElements'): (
        (11, ('data', 'indices', 'updates'), 'SSS', 3, 1, (('axis', 2, False),), False),
        (13, ('data', 'indices', 'updates'), 'SSS', 3, 1, (('axis', 2, False),), False),
        (16, ('data', 'indices', 'updates'), 'SSS', 3, 1, (('reduction', 3, False), ('axis', 2, False)), False),
        (18, ('data', 'indices', 'updates'), 'SSS', 3, 1, (('reduction', 3, False), ('axis', 2, False)), False),
    ),
    ('', 'ScatterND'): (
        (11, ('data', 'indices', 'updates'), 'SSS', 3, 1, (), False),
        (13, ('data', 'indices', 'updates'), 'SSS', 3, 1, (), False),
        (16, ('data', 'indices', 'updates'), 'SSS', 3, 1, (('reduction', 3, False),), False),
        (18, ('data', 'indices', 'updates'), 'SSS', 3, 1, (('reduction', 3, False),), False),
    ),
    ('', 'Selu'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False), ('gamma', 1, False), ('alpha', 1, False)), False),
        (6, ('X',), 'S', 1, 1, (('gamma', 1, False), ('alpha', 1, False)), True),
        (22, ('X',), 'S', 1, 1, (('gamma', 1, False), ('alpha', 1, False)), True),
    ),
    ('', 'SequenceAt'): (
        (11, ('input_sequence', 'position'), 'SS', 2, 1, (), False),
    ),
    ('', 'SequenceConstruct'): (
        (11, ('inputs',), 'V', 2147483647, 1, (), False),
    ),
    ('', 'SequenceEmpty'): (
        (11, (), '', 0, 1, (('dtype', 2, False),), False),
    ),
    ('', 'SequenceErase'): (
        (11, ('input_sequence', 'position'), 'SO', 2, 1, (), False),
    ),
    ('', 'SequenceInsert'): (
        (11, ('input_sequence', 'tensor', 'position'), 'SSO', 3, 1, (), False),
    ),
    ('', 'SequenceLength'): (
        (11, ('input_sequence',), 'S', 1, 1, (), False),
    ),
    ('', 'SequenceMap'): (
        (17, ('input_sequence', 'additional_inputs'), 'SV', 2147483647, 2147483647, (('body', 5, True),), True),
    ),
    ('', 'Shape'): (
        (1, ('data',), 'S', 1, 1, (), False),
        (13, ('data',), 'S', 1, 1, (), False),
        (15, ('data',), 'S', 1, 1, (('end', 2, False), ('start', 2, False)), False),
        (19, ('data',), 'S', 1, 1, (('end', 2, False), ('start', 2, False)), False),
        (21, ('data',), 'S', 1, 1, (('end', 2, False), ('start', 2, False)), False),
        (23, ('data',), 'S', 1, 1, (('end', 2, False), ('start', 2, False)), False),
        (24, ('data',), 'S', 1, 1, (('end', 2, False), ('start', 2, False)), False),
        (25, ('data',), 'S', 1, 1, (('end', 2, False), ('start', 2, False)), False),
    ),
    ('', 'Shrink'): (
        (9, ('input',), 'S', 1, 1, (('bias', 1, False), ('lambd', 1, False)), True),
    ),
    ('', 'Sigmoid'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'Sign'): (
        (9, ('input',), 'S', 1, 1, (), False),
        (13, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Sin'): (
        (7, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Sinh'): (
        (9, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Size'): (
        (1, ('data',), 'S', 1, 1, (), False),
        (13, ('data',), 'S', 1, 1, (), False),
        (19, ('data',), 'S', 1, 1, (), False),
        (21, ('data',), 'S', 1, 1, (), False),
        (23, ('data',), 'S', 1, 1, (), False),
        (24, ('data',), 'S', 1, 1, (), False),
        (25, ('data',), 'S', 1, 1, (), False),
    ),
    ('', 'Slice'): (
        (1, ('data',), 'S', 1, 1, (('ends', 7, True), ('starts', 7, True), ('axes', 7, False)), False),
        (10, ('data', 'starts', 'ends', 'axes', 'steps'), 'SSSOO', 5, 1, (), False),
        (11, ('data', 'starts', 'ends', 'axes', 'steps'), 'SSSOO', 5, 1, (), False),
        (13, ('data', 'starts', 'ends', 'axes', 'steps'), 'SSSOO', 5, 1, (), False),
    ),
    ('', 'Softmax'): (
        (1, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (11, ('input',), 'S', 1, 1, (('axis', 2, False),), False),
        (13, ('input',), 'S', 1, 1, (('axis', 2, False),), True),
    ),
    ('', 'SoftmaxCrossEntropyLoss'): (
        (12, ('scores', 'labels', 'weights'), 'SSO', 3, 2, (('ignore_index', 2, False), ('reduction', 3, False)), True),
        (13, ('scores', 'labels', 'weights'), 'SSO', 3, 2, (('ignore_index', 2, False), ('reduction', 3, False)), True),
    ),
    ('', 'Softplus'): (
        (1, ('X',), 'S', 1, 1, (), True),
        (22, ('X',), 'S', 1, 1, (), True),
    ),
    ('', 'Softsign'): (
        (1, ('input',), 'S', 1, 1, (), True),
        (22, ('input',), 'S', 1, 1, (), True),
    ),
    ('', 'SpaceToDepth'): (
        (1, ('input',), 'S', 1, 1, (('blocksize', 2, True),), False),
        (13, ('input',), 'S', 1, 1, (('blocksize', 2, True),), False),
        (28, ('input',), 'S', 1, 1, (('mode', 3, False), ('blocksize', 2, True)), True),
    ),
    ('', 'Split'): (
        (1, ('input', 'split'), 'SO', 2, 2147483647, (('split', 7, False), ('axis', 2, False)), False),
        (2, ('input',), 'S', 1, 2147483647, (('split', 7, False), ('axis', 2, False)), False),
        (11, ('input',), 'S', 1, 2147483647, (('split', 7, False), ('axis', 2, False)), False),
        (13, ('input', 'split'), 'SO', 2, 2147483647, (('axis', 2, False),), False),
        (18, ('input', 'split'), 'SO', 2, 2147483647, (('num_outputs', 2, False), ('axis', 2, False)), False),
    ),
    ('', 'SplitToSequence'): (
        (11, ('input', 'split'), 'SO', 2, 1, (('keepdims', 2, False), ('axis', 2, False)), False),
        (24, ('input', 'split'), 'SO', 2, 1, (('keepdims', 2, False), ('axis', 2, False)), False),
    ),
    ('', 'Sqrt'): (
        (1, ('X',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('X',), 'S', 1, 1, (), False),
        (13, ('X',), 'S', 1, 1, (), False),
    ),
    ('', 'Squeeze'): (
        (1, ('data',), 'S', 1, 1, (('axes', 7, False),), False),
        (11, ('data',), 'S', 1, 1, (('axes', 7, False),), False),
        (13, ('data', 'axes'), 'SO', 2, 1, (), False),
        (21, ('data', 'axes'), 'SO', 2, 1, (), False),
        (23, ('data', 'axes'), 'SO', 2, 1, (), False),
        (24, ('data', 'axes'), 'SO', 2, 1, (), False),
        (25, ('data', 'axes'), 'SO', 2, 1, (), False),
    ),
    ('', 'StringConcat'): (
        (20, ('X', 'Y'), 'SS', 2, 1, (), False),
    ),
    ('', 'StringNormalizer'): (
        (10, ('X',), 'S', 1, 1, (('stopwords', 8, False), ('locale', 3, False), ('is_case_sensitive', 2, False), ('case_change_action', 3, False)), False),
    ),
    ('', 'StringSplit'): (
        (20, ('X',), 'S', 1, 2, (('maxsplit', 2, False), ('delimiter', 3, False)), False),
    ),
    ('', 'Sub'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('consumed_inputs', 7, False), ('broadcast', 2, False)), False),
        (6, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
        (13, ('A', 'B'), 'SS', 2, 1, (), False),
        (14, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('', 'Sum'): (
        (1, ('data_0',), 'V', 2147483647, 1, (('consumed_inputs', 7, False),), False),
        (6, ('data_0',), 'V', 2147483647, 1, (), False),
        (8, ('data_0',), 'V', 2147483647, 1, (), False),
        (13, ('data_0',), 'V', 2147483647, 1, (), False),
    ),
    ('', 'SwiGLU'): (
        (28, ('A', 'B'), 'SS', 2, 1, (('alpha', 1, False),), True),
    ),
    ('', 'Swish'): (
        (24, ('X',), 'S', 1, 1, (('alpha', 1, False),), True),
    ),
    ('', 'Tan'): (
        (7, ('input',), 'S', 1, 1, (), False),
        (22, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'Tanh'): (
        (1, ('input',), 'S', 1, 1, (('consumed_inputs', 7, False),), False),
        (6, ('input',), 'S', 1, 1, (), False),
        (13, ('input',), 'S', 1, 1, (), False),
    ),
    ('', 'TensorScatter'): (
        (24, ('past_cache', 'update', 'write_indices'), 'SSO', 3, 1, (('mode', 3, False), ('axis', 2, False)), False),
    ),
    ('', 'TfIdfVectorizer'): (
        (9, ('X',), 'S', 1, 1, (('mode', 3, True), ('ngram_indexes', 7, True), ('weights', 6, False), ('ngram_counts', 7, True), ('pool_int64s', 7, False), ('pool_strings', 8, False), ('max_skip_count', 2, True), ('min_gram_length', 2, True), ('max_gram_length', 2, True)), False),
    ),
    ('', 'ThresholdedRelu'): (
        (10, ('X',), 'S', 1, 1, (('alpha', 1, False),), True),
        (22, ('X',), 'S', 1, 1, (('alpha', 1, False),), True),
    ),
    ('', 'Tile'): (
        (1, ('input', 'tiles', 'axis'), 'SSS', 3, 1, (), False),
        (6, ('input', 'repeats'), 'SS', 2, 1, (), False),
        (13, ('input', 'repeats'), 'SS', 2, 1, (), False),
    ),
    ('', 'TopK'): (
        (1, ('X',), 'S', 1, 2, (('axis', 2, False), ('k', 2, True)), False),
        (10, ('X', 'K'), 'SS', 2, 2, (('axis', 2, False),), False),
        (11, ('X', 'K'), 'SS', 2, 2, (('sorted', 2, False), ('largest', 2, False), ('axis', 2, False)), False),
        (24, ('X', 'K'), 'SS', 2, 2, (('sorted', 2, False), ('largest', 2, False), ('axis', 2, False)), False),
    ),
    ('', 'Transpose'): (
        (1, ('data',), 'S', 1, 1, (('perm', 7, False),), False),
        (13, ('data',), 'S', 1, 1, (('perm', 7, False),), False),
        (21, ('data',), 'S', 1, 1, (('perm', 7, False),), False),
        (23, ('data',), 'S', 1, 1, (('perm', 7, False),), False),
        (24, ('data',), 'S', 1, 1, (('perm', 7, False),), False),
        (25, ('data',), 'S', 1, 1, (('perm', 7, False),), False),
    ),
    ('', 'Trilu'): (
        (14, ('input', 'k'), 'SO', 2, 1, (('upper', 2, False),), False),
    ),
    ('', 'Unique'): (
        (11, ('X',), 'S', 1, 4, (('axis', 2, False), ('sorted', 2, False)), False),
        (28, ('X',), 'S', 1, 4, (('axis', 2, False), ('sorted', 2, False)), False),
    ),
    ('', 'Unsqueeze'): (
        (1, ('data',), 'S', 1, 1, (('axes', 7, True),), False),
        (11, ('data',), 'S', 1, 1, (('axes', 7, True),), False),
        (13, ('data', 'axes'), 'SS', 2, 1, (), False),
        (21, ('data', 'axes'), 'SS', 2, 1, (), False),
        (23, ('data', 'axes'), 'SS', 2, 1, (), False),
        (24, ('data', 'axes'), 'SS', 2, 1, (), False),
        (25, ('data', 'axes'), 'SS', 2, 1, (), False),
    ),
    ('', 'Upsample'): (
        (1, ('X',), 'S', 1, 1, (('mode', 3, False), ('height_scale', 1, True), ('width_scale', 1, True)), False),
        (7, ('X',), 'S', 1, 1, (('mode', 3, False), ('scales', 6, True)), False),
        (9, ('X', 'scales'), 'SS', 2, 1, (('mode', 3, False),), False),
        (10, ('X', 'scales'), 'SS', 2, 1, (('mode', 3, False),), False),
    ),
    ('', 'Where'): (
        (9, ('condition', 'X', 'Y'), 'SSS', 3, 1, (), False),
        (16, ('condition', 'X', 'Y'), 'SSS', 3, 1, (), False),
    ),
    ('', 'Xor'): (
        (1, ('A', 'B'), 'SS', 2, 1, (('axis', 2, False), ('broadcast', 2, False)), False),
        (7, ('A', 'B'), 'SS', 2, 1, (), False),
    ),
    ('ai.onnx.ml', 'ArrayFeatureExtractor'): (
        (1, ('X', 'Y'), 'SS', 2, 1, (), False),
    ),
    ('ai.onnx.ml', 'Binarizer'): (
        (1, ('X',), 'S', 1, 1, (('threshold', 1, False),), False),
    ),
    ('ai.onnx.ml', 'CastMap'): (
        (1, ('X',), 'S', 1, 1, (('max_map', 2, False), ('map_form', 3, False), ('cast_to', 3, False)), False),
    ),
    ('ai.onnx.ml', 'CategoryMapper'): (
        (1, ('X',), 'S', 1, 1, (('default_int64', 2, False), ('default_string', 3, False), ('cats_int64s', 7, False), ('cats_strings', 8, False)), False),
    ),
    ('ai.onnx.ml', 'DictVectorizer'): (
        (1, ('X',), 'S', 1, 1, (('int64_vocabulary', 7, False), ('string_vocabulary', 8, False)), False),
    ),
    ('ai.onnx.ml', 'FeatureVectorizer'): (
        (1, ('X',), 'V', 2147483647, 1, (('inputdimensions', 7, False),), False),
    ),
    ('ai.onnx.ml', 'Imputer'): (
        (1, ('X',), 'S', 1, 1, (('replaced_value_int64', 2, False), ('imputed_value_int64s', 7, False), ('replaced_value_float', 1, False), ('imputed_value_floats', 6, False)), False),
    ),
    ('ai.onnx.ml', 'LabelEncoder'): (
        (1, ('X',), 'S', 1, 1, (('default_string', 3, False), ('default_int64', 2, False), ('classes_strings', 8, False)), False),
        (2, ('X',), 'S', 1, 1, (('default_int64', 2, False), ('default_float', 1, False), ('default_string', 3, False), ('values_int64s', 7, False), ('values_strings', 8, False), ('keys_floats', 6, False), ('values_floats', 6, False), ('keys_int64s', 7, False), ('keys_strings', 8, False)), False),
        (4, ('X',), 'S', 1, 1, (('default_tensor', 4, False), ('default_int64', 2, False), ('default_float', 1, False), ('default_string', 3, False), ('values_int64s', 7, False), ('values_strings', 8, False), ('values_tensor', 4, False), ('keys_floats', 6, False), ('keys_strings', 8, False), ('values_floats', 6, False), ('keys_int64s', 7, False), ('keys_tensor', 4, False)), False),
    ),
    ('ai.onnx.ml', 'LinearClassifier'): (
        (1, ('X',), 'S', 1, 2, (('post_transform', 3, False), ('classlabels_ints', 7, False), ('classlabels_strings', 8, False), ('multi_class', 2, False), ('intercepts', 6, False), ('coefficients', 6, True)), False),
    ),
    ('ai.onnx.ml', 'LinearRegressor'): (
        (1, ('X',), 'S', 1, 1, (('targets', 2, False), ('intercepts', 6, False), ('coefficients', 6, False), ('post_transform', 3, False)), False),
    ),
    ('ai.onnx.ml', 'Normalizer'): (
        (1, ('X',), 'S', 1, 1, (('norm', 3, False),), False),
    ),
    ('ai.onnx.ml', 'OneHotEncoder'): (
        (1, ('X',), 'S', 1, 1, (('zeros', 2, False), ('cats_strings', 8, False), ('cats_int64s', 7, False)), False),
    ),
    ('ai.onnx.ml', 'SVMClassifier'): (
        (1, ('X',), 'S', 1, 2, (('classlabels_ints', 7, False), ('rho', 6, False), ('prob_b', 6, False), ('coefficients', 6, False), ('classlabels_strings', 8, False), ('prob_a', 6, False), ('support_vectors', 6, False), ('vectors_per_class', 7, False), ('post_transform', 3, False), ('kernel_params', 6, False), ('kernel_type', 3, False)), False),
    ),
    ('ai.onnx.ml', 'SVMRegressor'): (
        (1, ('X',), 'S', 1, 1, (('rho', 6, False), ('coefficients', 6, False), ('n_supports', 2, False), ('one_class', 2, False), ('support_vectors', 6, False), ('post_transform', 3, False), ('kernel_params', 6, False), ('kernel_type', 3, False)), False),
    ),
    ('ai.onnx.ml', 'Scaler'): (
        (1, ('X',), 'S', 1, 1, (('scale', 6, False), ('offset', 6, False)), False),
    ),
    ('ai.onnx.ml', 'TreeEnsemble'): (
        (5, ('X',), 'S', 1, 1, (('aggregate_function', 2, False), ('post_transform', 2, False), ('tree_roots', 7, True), ('nodes_hitrates', 4, False), ('nodes_missing_value_tracks_true', 7, False), ('nodes_modes', 4, True), ('leaf_weights', 4, True), ('leaf_targetids', 7, True), ('nodes_falsenodeids', 7, True), ('n_targets', 2, False), ('nodes_trueleafs', 7, True), ('nodes_featureids', 7, True), ('nodes_splits', 4, True), ('nodes_falseleafs', 7, True), ('nodes_truenodeids', 7, True), ('membership_values', 4, False)), False),
    ),
    ('ai.onnx.ml', 'TreeEnsembleClassifier'): (
        (1, ('X',), 'S', 1, 2, (('post_transform', 3, False), ('classlabels_int64s', 7, False), ('nodes_nodeids', 7, False), ('classlabels_strings', 8, False), ('class_ids', 7, False), ('class_weights', 6, False), ('nodes_treeids', 7, False), ('nodes_featureids', 7, False), ('nodes_values', 6, False), ('nodes_falsenodeids', 7, False), ('nodes_hitrates', 6, False), ('base_values', 6, False), ('nodes_missing_value_tracks_true', 7, False), ('nodes_modes', 8, False), ('nodes_truenodeids', 7, False), ('class_treeids', 7, False), ('class_nodeids', 7, False)), False),
        (3, ('X',), 'S', 1, 2, (('base_values_as_tensor', 4, False), ('post_transform', 3, False), ('classlabels_int64s', 7, False), ('class_weights_as_tensor', 4, False), ('class_weights', 6, False), ('classlabels_strings', 8, False), ('class_ids', 7, False), ('nodes_nodeids', 7, False), ('nodes_treeids', 7, False), ('nodes_featureids', 7, False), ('nodes_values_as_tensor', 4, False), ('nodes_falsenodeids', 7, False), ('nodes_hitrates', 6, False), ('base_values', 6, False), ('nodes_missing_value_tracks_true', 7, False), ('nodes_values', 6, False), ('nodes_hitrates_as_tensor', 4, False), ('nodes_modes', 8, False), ('nodes_truenodeids', 7, False), ('class_treeids', 7, False), ('class_nodeids', 7, False)), False),
        (5, ('X',), 'S', 1, 2, (('base_values_as_tensor', 4, False), ('post_transform', 3, False), ('classlabels_int64s', 7, False), ('class_weights_as_tensor', 4, False), ('class_weights', 6, False), ('classlabels_strings', 8, False), ('class_ids', 7, False), ('nodes_nodeids', 7, False), ('nodes_treeids', 7, False), ('nodes_featureids', 7, False), ('nodes_values_as_tensor', 4, False), ('nodes_falsenodeids', 7, False), ('nodes_hitrates', 6, False), ('base_values', 6, False), ('nodes_missing_value_tracks_true', 7, False), ('nodes_values', 6, False), ('nodes_hitrates_as_tensor', 4, False), ('nodes_modes', 8, False), ('nodes_truenodeids', 7, False), ('class_treeids', 7, False), ('class_nodeids', 7, False)), False),
    ),
    ('ai.onnx.ml', 'TreeEnsembleRegressor'): (
        (1, ('X',), 'S', 1, 1, (('aggregate_function', 3, False), ('post_transform', 3, False), ('n_targets', 2, False), ('nodes_nodeids', 7, False), ('target_nodeids', 7, False), ('nodes_treeids', 7, False), ('nodes_featureids', 7, False), ('nodes_values', 6, False), ('target_weights', 6, False), ('nodes_falsenodeids', 7, False), ('nodes_hitrates', 6, False), ('base_values', 6, False), ('nodes_missing_value_tracks_true', 7, False), ('nodes_modes', 8, False), ('nodes_truenodeids', 7, False), ('target_treeids', 7, False), ('target_ids', 7, False)), False),
        (3, ('X',), 'S', 1, 1, (('base_values_as_tensor', 4, False), ('aggregate_function', 3, False), ('post_transform', 3, False), ('n_targets', 2, False), ('target_weights_as_tensor', 4, False), ('target_ids', 7, False), ('nodes_nodeids', 7, False), ('nodes_treeids', 7, False), ('nodes_featureids', 7, False), ('target_nodeids', 7, False), ('nodes_values_as_tensor', 4, False), ('target_weights', 6, False), ('nodes_falsenodeids', 7, False), ('nodes_hitrates', 6, False), ('base_values', 6, False), ('nodes_missing_value_tracks_true', 7, False), ('nodes_values', 6, False), ('nodes_hitrates_as_tensor', 4, False), ('nodes_modes', 8, False), ('nodes_truenodeids', 7, False), ('target_treeids', 7, False)), False),
        (5, ('X',), 'S', 1, 1, (('base_values_as_tensor', 4, False), ('aggregate_function', 3, False), ('post_transform', 3, False), ('n_targets', 2, False), ('target_weights_as_tensor', 4, False), ('target_ids', 7, False), ('nodes_nodeids', 7, False), ('nodes_treeids', 7, False), ('nodes_featureids', 7, False), ('target_nodeids', 7, False), ('nodes_values_as_tensor', 4, False), ('target_weights', 6, False), ('nodes_falsenodeids', 7, False), ('nodes_hitrates', 6, False), ('base_values', 6, False), ('nodes_missing_value_tracks_true', 7, False), ('nodes_values', 6, False), ('nodes_hitrates_as_tensor', 4, False), ('nodes_modes', 8, False), ('nodes_truenodeids', 7, False), ('target_treeids', 7, False)), False),
    ),
    ('ai.onnx.ml', 'ZipMap'): (
        (1, ('X',), 'S', 1, 1, (('classlabels_int64s', 7, False), ('classlabels_strings', 8, False)), False),
    ),
    ('ai.onnx.preview', 'FlexAttention'): (
        (1, ('Q', 'K', 'V'), 'SSS', 3, 1, (('prob_mod', 5, False), ('score_mod', 5, False), ('softmax_precision', 2, False), ('scale', 1, False)), True),
    ),
    ('ai.onnx.preview.training', 'Adagrad'): (
        (1, ('R', 'T', 'inputs'), 'SSV', 2147483647, 2147483647, (('norm_coefficient', 1, False), ('decay_factor', 1, False), ('epsilon', 1, False)), False),
    ),
    ('ai.onnx.preview.training', 'Adam'): (
        (1, ('R', 'T', 'inputs'), 'SSV', 2147483647, 2147483647, (('epsilon', 1, False), ('norm_coefficient_post', 1, False), ('norm_coefficient', 1, False), ('beta', 1, False), ('alpha', 1, False)), False),
    ),
    ('ai.onnx.preview.training', 'Gradient'): (
        (1, ('Inputs',), 'V', 2147483647, 2147483647, (('y', 3, True), ('zs', 8, False), ('xs', 8, True)), False),
    ),
    ('ai.onnx.preview.training', 'Momentum'): (
        (1, ('R', 'T', 'inputs'), 'SSV', 2147483647, 2147483647, (('norm_coefficient', 1, True), ('beta', 1, True), ('mode', 3, True), ('alpha', 1, True)), False),
    ),
}
"""(domain, op type) -> its schemas, oldest first."""
