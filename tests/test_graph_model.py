"""A graph is its model: the stages below `lowtide.pipeline` work on the graph they are handed, its name and its
bytes, and open no model file (an edited graph's source file is not its model)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

from conftest import SHARED_MODELS
from lowtide import validation
from lowtide.compile import compile_model
from lowtide.model.edit import with_outputs
from lowtide.model.ir import sha256_hex
from lowtide.model.schema import fb
from lowtide.pipeline.measure import measure
from lowtide.project import PROJECT_SPEC, Runtime, project_files
from lowtide.runtimes import RUNTIMES
from lowtide.settings import read_settings
from lowtide.validation import load_model

PACKAGE = Path(__file__).resolve().parents[1] / "host" / "lowtide"
# The stages that take a model in from a file (`lowtide.validation.load_model`), and what runs above them.
AT_ENTRY = ("pipeline/", "cli/", "hil/", "mlperf/", "testing/", "__main__.py", "validation.py")
# Where a file is read as what it is, not as a model: the reader's and writer's own bytes, lowtide's shipped
# resources and its caches.
READS_FILES = ("model/reader.py", "model/writer.py", "resources.py", "storage.py")
FILE_READS = {"read_bytes", "read_text", "stat", "open"}
MODEL_LOADERS = {"load_model", "load_checked", "load_bytes"}


def _edited(tmp_path: Path):
    """hello_world with its hidden layers' outputs made model outputs, read from a file that is then deleted."""
    source = tmp_path / "hello.tflite"
    shutil.copy(SHARED_MODELS / "tflm_hello_world_int8.tflite", source)
    graph = load_model(source)
    hidden = [t for op in graph.main.operators[:-1] for t in op.outputs]
    edited = with_outputs(graph, hidden)
    source.unlink()
    return graph, edited


def test_an_edited_graph_whose_file_is_gone_is_sized_compiled_and_made_a_project(tmp_path):
    graph, edited = _edited(tmp_path)
    assert edited.name == "hello.tflite" and edited.sha256 != graph.sha256
    # The oracle: the same bytes written to a file of the same name and read the usual way.
    written = tmp_path / "copy" / "hello.tflite"
    written.parent.mkdir()
    written.write_bytes(edited.data)
    reread = load_model(written)
    assert reread.sha256 == edited.sha256

    compiled = compile_model(edited)
    assert len(compiled.outputs) == len(graph.main.outputs) + 2  # the edit's outputs, not the source's
    assert compiled.files == compile_model(reread).files

    for runtime in RUNTIMES.values():
        assert runtime.estimate_footprint(edited) == runtime.estimate_footprint(reread)
        assert runtime.estimate_footprint(edited).model == "hello"

    settings = read_settings()
    compiled_runtime = RUNTIMES[Runtime.COMPILED]
    files = project_files("qemu-m4", None, "test", edited, compiled_runtime, "cortex-m4", None, settings)
    assert files == project_files("qemu-m4", None, "test", reread, compiled_runtime, "cortex-m4", None, settings)
    spec = json.loads(files[PROJECT_SPEC])
    assert spec["model"] == "hello.tflite"
    assert ["LT_MODEL_SHA256", sha256_hex(edited.data)] in spec["string_defines"]
    assert ["LT_MODEL_SIZE", f"{len(edited.data)}u"] in spec["defines"]
    assert files["model/model.c"].decode() == compiled.files["model.c"]


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                yield node, func.attr, ast.unparse(func.value)
            elif isinstance(func, ast.Name):
                yield node, func.id, " ".join(ast.unparse(a) for a in node.args[:1])


def test_no_stage_below_the_pipeline_opens_a_model_file():
    """Below `lowtide.pipeline`, no module loads a model from a file, reads or stats a file it names by a model
    or graph, or takes a model by its path; what a stage needs of the model it asks the graph."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith(AT_ENTRY):
            continue
        tree = ast.parse(path.read_text(), module)
        for node, name, receiver in _calls(tree):
            if name in MODEL_LOADERS and module not in READS_FILES:
                found.append(f"{module}:{node.lineno}: {name}")
            if name in FILE_READS and module not in READS_FILES:
                if any(word in receiver.lower() for word in ("model", "graph")):
                    found.append(f"{module}:{node.lineno}: {receiver}.{name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.annotation is not None:
                if "model" in node.arg and "Path" in ast.unparse(node.annotation):
                    found.append(f"{module}:{node.lineno}: parameter {node.arg}: {ast.unparse(node.annotation)}")
    assert found == []


def test_the_scan_finds_a_model_read():
    """The scan above is not blind: the reader's own file read is one it would report."""
    tree = ast.parse((PACKAGE / "model" / "reader.py").read_text())
    reads = [(name, receiver) for _, name, receiver in _calls(tree) if name in FILE_READS | MODEL_LOADERS]
    assert ("read_bytes", "path") in reads
    probe = ast.parse("def f(model_path: Path):\n    return model_path.read_bytes()\n")
    assert [(n, r) for _, n, r in _calls(probe)] == [("read_bytes", "model_path")]


def test_only_the_reader_and_the_writer_reach_the_object_tree():
    """The schema's object tree underneath a graph is private to it: every other stage reads the typed graph, and
    edits build on the writer's copy (`writer.editable_tree`)."""
    owners = ("model/ir.py", "model/reader.py", "model/writer.py")
    reached = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), module)):
            if isinstance(node, ast.Attribute) and node.attr in {"_tree", "raw"}:
                reached.setdefault(module, []).append(node.lineno)
    assert set(reached) == set(owners), reached  # the owners do reach it: the scan is not blind


def test_tensors_carry_their_quantization_typed():
    """Every tensor's scales, zero points and axis as the flatbuffer stores them (read here through the schema's
    table accessors, not the object tree the reader uses), per channel on the convolutions' weights."""
    path = SHARED_MODELS / "mlperf_kws_dscnn_int8.tflite"
    graph = load_model(path)
    stored = fb.Model.GetRootAs(path.read_bytes(), 0).Subgraphs(0)
    per_channel = 0
    for t in graph.main.tensors:
        table = stored.Tensors(t.index).Quantization()
        if table is None:
            assert t.quantization is None
            continue
        assert t.quantization is not None
        scales = tuple(float(s) for s in table.ScaleAsNumpy()) if table.ScaleLength() else ()
        zero_points = tuple(int(z) for z in table.ZeroPointAsNumpy()) if table.ZeroPointLength() else ()
        assert (t.quantization.scales, t.quantization.zero_points) == (scales, zero_points)
        assert t.quantization.axis == table.QuantizedDimension()
        per_channel += len(t.quantization.scales) > 1
    assert per_channel >= 5
    edited = with_outputs(graph, [graph.main.operators[0].outputs[0]])
    assert [t.quantization for t in edited.main.tensors] == [t.quantization for t in graph.main.tensors]


def test_measuring_a_model_reads_its_file_once(monkeypatch):
    """`lowtide measure`'s model read and validated once, at entry, then handed down as the graph (the host-tflm
    board's own process, the board, reads the file it is given)."""
    reads = []
    load_bytes = validation.load_bytes
    monkeypatch.setattr(validation, "load_bytes", lambda path: reads.append(path) or load_bytes(path))
    path = SHARED_MODELS / "tflm_hello_world_int8.tflite"
    result = measure(path, "host-tflm", iterations=1, warmup=0, timeout=60)
    assert result.outputs_match and reads == [path]
