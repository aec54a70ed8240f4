"""Independent references for operator orders: written from TFLM's rules, not from the scheduler's code."""

from __future__ import annotations

import itertools
import random

import numpy as np

from lowtide.memory import tflm_plan
from lowtide.model import read_model
from lowtide.model.ir import Graph, Operator, Subgraph, Tensor, TensorKind
from lowtide.oracle import random_inputs, run
from lowtide.schedule import apply_order


def valid_orders(graph: Graph, sg_index: int = 0):
    """Every permutation that TFLM could run: each tensor read after it is written, variables and operators
    with side effects in stored relative order. Written from the rules, not from the scheduler's code."""
    sg = graph.subgraphs[sg_index]
    producer = {t: op.index for op in sg.operators for t in op.outputs}
    effectful = [op.index for op in sg.operators if op.has_side_effects]
    variable_users = [
        [op.index for op in sg.operators if t.index in (*op.inputs, *op.outputs)]
        for t in sg.tensors
        if t.kind is TensorKind.VARIABLE
    ]
    for order in itertools.permutations(range(len(sg.operators))):
        position = {op: i for i, op in enumerate(order)}
        if any(t in producer and position[producer[t]] > position[op.index] for op in sg.operators for t in op.inputs):
            continue
        if any(sorted(chain, key=position.get) != chain for chain in [effectful, *variable_users]):
            continue
        yield list(order)


def assert_valid(graph: Graph, order) -> None:
    """Data dependencies and side-effect order, checked directly on the IR."""
    assert set(order) == {sg.index for sg in graph.subgraphs}
    for sg in graph.subgraphs:
        ops = order[sg.index]
        assert sorted(ops) == list(range(len(sg.operators)))
        position = {op: i for i, op in enumerate(ops)}
        producer = {t: op.index for op in sg.operators for t in op.outputs}
        for op in sg.operators:
            for t in op.inputs:
                if t in producer:
                    assert position[producer[t]] < position[op.index]
        effectful = [op.index for op in sg.operators if op.has_side_effects]
        assert sorted(effectful, key=position.get) == effectful


def random_graph(op_count: int, seed: int, width: int = 3, effects: bool = False) -> Graph:
    """A random single-subgraph DAG at IR level: ops read 1-3 recent tensors and write 1-2 tensors of random
    sizes (multiples of 16 or not), some ops have side effects, one variable tensor is shared by two ops."""
    rng = random.Random(seed)

    def tensor(size: int, kind=TensorKind.ACTIVATION) -> int:
        tensors.append(Tensor(len(tensors), f"t{len(tensors)}", (size,), "int8", size, kind, 0))
        return len(tensors) - 1

    tensors: list[Tensor] = []
    graph_input = tensor(16 * rng.randint(1, 20))
    state = tensor(64, TensorKind.VARIABLE)
    state_users = set(rng.sample(range(op_count), 2)) if effects else set()
    ops = []
    for i in range(op_count):
        activations = [t.index for t in tensors if t.kind is TensorKind.ACTIVATION]
        pool = activations[-width:] if rng.random() < 0.8 else activations
        inputs = sorted({rng.choice(pool) for _ in range(rng.choice([1, 1, 2, 2, 3]))})
        if i in state_users:
            inputs.append(state)
        outputs = tuple(tensor(rng.randint(1, 64) * rng.choice([1, 16])) for _ in range(rng.choice([1, 1, 1, 2])))
        opcode = "CUSTOM:effect" if effects and rng.random() < 0.3 else "ADD"
        ops.append(Operator(i, opcode, tuple(inputs), outputs, (), ()))
    read = {t for op in ops for t in op.inputs}
    outputs = tuple(t.index for t in tensors[2:] if t.index not in read)
    sg = Subgraph(0, "main", tuple(tensors), tuple(ops), (graph_input,), outputs)
    return Graph("<random>", (sg,), {}, None)


def assert_reordered_model_runs_identically(graph: Graph, order) -> None:
    data = apply_order(graph, order).data
    reordered = read_model(data)  # as written
    assert [[op.opcode for op in sg.operators] for sg in reordered.subgraphs] == [
        [graph.subgraphs[sg].operators[i].opcode for i in ops] for sg, ops in sorted(order.items())
    ]
    inputs = random_inputs(graph)
    original_run = run(graph.data, inputs)
    reordered_run = run(data, inputs)
    for before, after in zip(original_run.outputs, reordered_run.outputs, strict=True):
        np.testing.assert_array_equal(before, after)
    assert reordered_run.head_bytes == tflm_plan(reordered).head_bytes
    assert tflm_plan(reordered).live_peak_bytes == tflm_plan(graph, order).live_peak_bytes
