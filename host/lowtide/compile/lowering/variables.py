"""CALL_ONCE, VAR_HANDLE, READ_VARIABLE and ASSIGN_VARIABLE: generated code on the state struct (no kernel)."""

from __future__ import annotations

from lowtide.compile.lowering.emitter import (
    C_TYPES,
    STATE_OBJECT,
    Kernel,
    ModelEmitter,
    Unsupported,
    attributes_of,
    require,
)
from lowtide.model.attributes import CallOnceAttributes
from lowtide.model.ir import Operator, resource_key


def lower_var_handle(e: ModelEmitter, op: Operator, name: str) -> str:
    """Handles are resolved at compile time: READ_VARIABLE and ASSIGN_VARIABLE name the state member."""
    variable = e.resources.get(resource_key(op))
    if variable is None:
        raise Unsupported(f"resource variable {resource_key(op)[1].decode(errors='replace')} is never assigned")
    return f"/* handle of {STATE_OBJECT}.{variable.member} */"


def lower_read_variable(e: ModelEmitter, op: Operator, name: str) -> str:
    t = e.tensor(op.outputs[0])
    return f"lt_copy({e.resource(0, op.inputs[0], t.nbytes)}, {e.pointer(op.outputs[0], True)}, {t.nbytes}u);"


def lower_assign_variable(e: ModelEmitter, op: Operator, name: str) -> str:
    t = e.tensor(op.inputs[1])
    return f"lt_copy({e.pointer(op.inputs[1])}, {e.resource(0, op.inputs[0], t.nbytes)}, {t.nbytes}u);"


def lower_call_once(e: ModelEmitter, op: Operator, name: str) -> str:
    """CALL_ONCE runs its init subgraph on the first invocation only (TFLM's has_run flag, which Reset() leaves
    set). The init subgraphs these models carry only assign constants to resource variables."""
    init = e.graph.subgraphs[attributes_of(op, CallOnceAttributes).init_subgraph]
    require(not init.inputs and not init.outputs, "the init subgraph has inputs or outputs")
    statements: list[str] = []
    for init_op in init.operators:
        if init_op.opcode == "VAR_HANDLE":
            continue
        require(init_op.opcode == "ASSIGN_VARIABLE", f"init subgraph operator {init_op.opcode}")
        value = init.tensors[init_op.inputs[1]]
        data = e.graph.constant_array(init_op.inputs[1], subgraph=init.index)
        if data is None or value.dtype not in C_TYPES:
            raise Unsupported("init subgraph assigns a non-constant value")
        source = e.array(f"{name}_value{len(statements)}", C_TYPES[value.dtype], data.reshape(-1))
        statements.append(
            f"lt_copy({source}, {e.resource(init.index, init_op.inputs[0], value.nbytes)}, {value.nbytes}u);"
        )
    flag = f"call_once{op.index}"
    e.call_once_flags.append(flag)
    return f"if (!{STATE_OBJECT}.{flag}) {{ {' '.join(statements)} {STATE_OBJECT}.{flag} = 1; }}"


KERNELS = (
    Kernel("CALL_ONCE", lower_call_once, (), "an init subgraph of constant ASSIGN_VARIABLEs"),
    Kernel("VAR_HANDLE", lower_var_handle, (), "resolved at compile time"),
    Kernel("READ_VARIABLE", lower_read_variable, (), "any element type: the bytes are copied"),
    Kernel("ASSIGN_VARIABLE", lower_assign_variable, (), "any element type: the bytes are copied"),
)
