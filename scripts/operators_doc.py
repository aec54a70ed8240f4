"""Rewrite docs/operators.md from the compiler's kernel table: `python scripts/operators_doc.py`."""

from pathlib import Path

from lowtide.cli.compile_cmd import support_table_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "operators.md"
HEADER = """# Operators `lowtide compile` runs

Generated from the kernel table in `host/lowtide/compile/lowering/` by `python scripts/operators_doc.py` (the
table alone: `lowtide compile --support-table`); `tests/test_compile_ops.py` fails when this file is stale.
Every kernel is bit-exact with TFLM's reference kernel for the types listed (float32 within the host check's
1e-5 relative tolerance: libm's functions may differ between the host and a target), checked on models built in
the tests. Types: `T` is input and output of type T; `A → B` converts. An operator or type missing here gives
one line naming the operator, its index and its types; `lowtide compile --check MODEL` lists them all.

"""


def document() -> str:
    return HEADER + support_table_markdown()


if __name__ == "__main__":
    DOC.write_text(document())
    print(f"wrote {DOC}")
