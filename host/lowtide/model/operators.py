"""Operator families by what TFLM's kernels do with their operands: facts about the operators themselves, which the
model's validator (output shapes), rewrite (windows) and stale-memory analysis (dependence) read."""

from __future__ import annotations

CONV_OPCODES = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D"})
POOL_OPCODES = frozenset({"MAX_POOL_2D", "AVERAGE_POOL_2D"})
# One input, one output, each element on its own: a patch of the output needs the same patch of the input.
UNARY_OPCODES = frozenset({
    "QUANTIZE", "DEQUANTIZE", "CAST", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LEAKY_RELU", "LOGISTIC",
    "TANH", "HARD_SWISH", "ELU", "GELU", "ABS", "NEG", "SQUARE", "SQRT", "RSQRT", "EXP", "LOG", "FLOOR", "CEIL",
    "ROUND", "SIN", "COS", "LOGICAL_NOT",
})
# Two operands, element by element; either may be broadcast along channels, or be a per-channel or scalar constant.
BINARY_OPCODES = frozenset({"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE", "PRELU"})
# Reductions: global when they reduce over rows or columns (a squeeze-and-excitation block's pooling).
REDUCE_OPCODES = frozenset({"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"})
