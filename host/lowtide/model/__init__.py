"""Stage 1: read and write .tflite files as a typed graph (`ir`), and build small test models (`builder`)."""

from lowtide.model.ir import Graph, Operator, Subgraph, Tensor, TensorKind
from lowtide.model.reader import read_model
from lowtide.model.writer import model_bytes

__all__ = [
    "Graph",
    "Operator",
    "Subgraph",
    "Tensor",
    "TensorKind",
    "read_model",
    "model_bytes",
]
