"""The kernel parameter structs' one definition (lowtide.compile.kernel_params): the checked-in header is the one it
generates, and the C compiler lays its structs out member after member as the initializers assume; a struct
cannot be made with a member missing, unknown or of the wrong kind; the generated C names every member, in the
struct's order."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from lowtide.compile import compile_model
from lowtide.compile.kernel_params import (
    MAX_DIMS,
    STRUCTS,
    ActivationParams,
    AxisParams,
    ConvParams,
    CopyParams,
    LstmParams,
    c_header,
    c_members,
    params_reading,
)
from lowtide.validation import load_model

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "firmware" / "runtime" / "lt_params.h"
MODELS = ROOT / ".." / "shared" / "models"

AXIS = {"outer": 2, "axis_size": 5, "inner": 3, "exclusive": 0, "reverse": 1}


def test_the_checked_in_header_is_the_one_the_definition_generates():
    assert HEADER.read_text() == c_header(), (
        "firmware/runtime/lt_params.h disagrees with host/lowtide/compile/kernel_params.py: regenerate it with "
        "`python scripts/kernel_params_header.py`"
    )


def test_the_compiler_lays_out_every_member_where_the_definition_puts_it(tmp_path):
    """offsetof and sizeof of every member, from the header alone (it includes what it needs): 4-byte members,
    one after another, arrays of their length."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "lt_params.h"', "int main(void) {"]
    for struct in STRUCTS:
        lines.append(f'printf("{struct.C_NAME} %zu\\n", sizeof({struct.C_NAME}));')
        lines += [
            f'printf("{struct.C_NAME}.{m.name} %zu %zu\\n", offsetof({struct.C_NAME}, {m.name}), '
            f'sizeof((({struct.C_NAME} *)0)->{m.name}));'
            for m in c_members(struct)
        ]
    (tmp_path / "layout.c").write_text("\n".join([*lines, "return 0;", "}"]) + "\n")
    cc = os.environ.get("CC", "gcc")
    subprocess.run(
        [
            cc,
            "-std=c99",
            "-Wall",
            "-Werror",
            "-I",
            str(HEADER.parent),
            str(tmp_path / "layout.c"),
            "-o",
            str(tmp_path / "layout"),
        ],
        check=True,
    )
    printed = subprocess.run([str(tmp_path / "layout")], check=True, capture_output=True, text=True).stdout
    expected = []
    for struct in STRUCTS:
        members = c_members(struct)
        expected.append(f"{struct.C_NAME} {4 * sum(max(m.length, 1) for m in members)}")
        at = 0
        for m in members:
            expected.append(f"{struct.C_NAME}.{m.name} {at} {4 * max(m.length, 1)}")
            at += 4 * max(m.length, 1)
    assert printed.splitlines() == expected
    assert "lt_conv_params 92" in expected and "lt_binary_params.dims 4 24" in expected  # 23 members; 6 dims


def test_a_missing_member_is_a_type_error():
    assert AxisParams(**AXIS).reverse == 1
    for name in AXIS:
        with pytest.raises(TypeError, match=name):
            AxisParams(**{k: v for k, v in AXIS.items() if k != name})


def test_an_unknown_member_is_a_type_error():
    with pytest.raises(TypeError, match="axis"):
        AxisParams(**AXIS, axis=1)
    with pytest.raises(TypeError):
        AxisParams(2, 5, 3, 0, 1)  # by name only


def test_a_struct_filled_by_what_its_kernel_reads_has_the_rest_zero():
    params = params_reading(ActivationParams, count=12, act_min=-128, act_max=127, alpha=0.25)
    assert (params.count, params.act_min, params.act_max, params.alpha) == (12, -128, 127, 0.25)
    unread = {m.name: getattr(params, m.name) for m in c_members(ActivationParams)} | {
        "count": 0,
        "act_min": 0,
        "act_max": 0,
        "alpha": 0,
    }
    assert set(unread.values()) == {0} and isinstance(params.multiplier, int) and isinstance(params.rescale, int)
    with pytest.raises(TypeError, match="axis"):
        params_reading(ActivationParams, count=1, axis=1)
    # The members several structs begin with are one group each, in the same place of every one of them.
    assert [m.name for m in c_members(ActivationParams)][:3] == ["count", "input_zero_point", "output_zero_point"]
    assert [m.name for m in c_members(CopyParams)][:2] == ["ndim", "dims"]


def test_a_member_of_the_wrong_kind_is_a_type_error():
    with pytest.raises(TypeError, match="lt_axis_params.inner must be an integer"):
        AxisParams(**{**AXIS, "inner": 3.0})
    with pytest.raises(TypeError, match="lt_copy_params.dims holds at most 6 values, not 7"):
        CopyParams(ndim=7, dims=[1] * 7, src_steps=[1], dst_steps=[1], elem_size=1)
    with pytest.raises(TypeError, match="lt_copy_params.src_steps must be a sequence of integers"):
        CopyParams(ndim=1, dims=[4], src_steps=[1.5], dst_steps=[1], elem_size=1)
    gates = {m.name: [0] * 4 if m.length else 0 for m in c_members(LstmParams)}
    assert LstmParams(**gates).input_round == [0] * 4
    with pytest.raises(TypeError, match="lt_lstm_params.input_shift holds 4 values, not 3"):
        LstmParams(**{**gates, "input_shift": [0] * 3})
    assert MAX_DIMS == 6 and "#define LT_MAX_DIMS 6" in c_header()


def test_the_generated_code_names_every_member_in_the_struct_order():
    """hello_world's first FULLY_CONNECTED runs as a 1x1 convolution: 1 input value to 16 outputs, int8 zero points
    -128 in and out."""
    model = MODELS / "tflm_hello_world_int8.tflite"
    if not model.is_file():
        pytest.skip("shared model tflm_hello_world_int8 not present")
    source = compile_model(load_model(model)).files["model.c"]
    line = re.search(r"^static const lt_conv_params op0_params = \{(.*)\};$", source, re.MULTILINE)
    assert line is not None
    members = dict(part.split(" = ") for part in line.group(1).lstrip(".").split(", ."))
    assert list(members) == [m.name for m in c_members(ConvParams)]
    assert {
        k: members[k]
        for k in ("in_c", "out_c", "filter_in_c", "input_offset", "output_offset", "act_min", "act_max", "act_min_f")
    } == {
        "in_c": "1",
        "out_c": "16",
        "filter_in_c": "1",
        "input_offset": "128",
        "output_offset": "-128",
        "act_min": "-128",
        "act_max": "127",
        "act_min_f": "0.0f",
    }
