"""`lowtide compile`: ahead-of-time C for a model, on the lowtide runtime (firmware/runtime), checked bit-exact
against the host TFLM interpreter."""

from lowtide.compile.codegen import CompiledModel, IoTensor, compile_model
from lowtide.compile.hostcheck import OutputComparison, VerifyResult, verify_compiled

__all__ = ["CompiledModel", "IoTensor", "OutputComparison", "VerifyResult", "compile_model", "verify_compiled"]
