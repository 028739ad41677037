import pytest

from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.quantization import builtin_accuracy_table, get_scheme, kv_bytes_per_value, math_dtype


def test_bytes_per_weight():
    assert get_scheme("bf16").weight_bytes_per_param == 2
    assert get_scheme("fp8").weight_bytes_per_param == 1
    assert get_scheme("int8").weight_bytes_per_param == 1
    # int4 plus an fp16 scale and a 4-bit zero per group of 128.
    assert get_scheme("awq").weight_bytes_per_param == pytest.approx(0.5 + 2.5 / 128)
    assert get_scheme("gptq").weight_bytes_per_param == get_scheme("awq").weight_bytes_per_param


@pytest.mark.parametrize("gpu,expected", [("a100-80gb", "bf16"), ("a10g", "bf16"), ("l4", "fp8"), ("l40s", "fp8"),
                                          ("rtx4090", "fp8"), ("h100", "fp8"), ("b200", "fp8"), ("mi300x", "fp8")])
def test_fp8_math_is_native_except_on_ampere(gpu, expected):
    assert math_dtype("fp8", get_gpu(gpu)) == expected


def test_int4_weight_only_uses_bf16_math_and_int8_uses_int8_cores():
    for gpu in ("h100", "a100-80gb", "l4"):
        assert math_dtype("awq", get_gpu(gpu)) == "bf16"
        assert math_dtype("gptq", get_gpu(gpu)) == "bf16"
        assert math_dtype("int8", get_gpu(gpu)) == "int8"


def test_kv_bytes():
    assert kv_bytes_per_value("auto", "bfloat16") == 2
    assert kv_bytes_per_value("auto", "float32") == 4
    assert kv_bytes_per_value("fp8", "bfloat16") == 1
    with pytest.raises(InputError):
        kv_bytes_per_value("int3", "bfloat16")


def test_accuracy_penalties_come_from_published_tables():
    table = builtin_accuracy_table()
    assert table.drop_pct("bf16", 8e9) == 0
    # Worst recovery on the Llama-3.1-8B cards: INT4 W4A16 keeps 93.0% on Arena-Hard.
    assert table.drop_pct("gptq", 8e9) == pytest.approx(7.0)
    assert table.drop_pct("gptq", 70e9) == pytest.approx(2.6)
    assert 0 <= table.drop_pct("fp8", 8e9) < table.drop_pct("gptq", 8e9)
    assert table.drop_pct("awq", 70e9) < table.drop_pct("gptq", 70e9)
    assert table.drop_pct("fp8", 8e9, "fp8") > table.drop_pct("fp8", 8e9, "auto")
    for entry in table.entries:
        assert entry.source and entry.source != "same" and entry.metric


def test_accuracy_overrides():
    table = builtin_accuracy_table().with_overrides({"fp8": 1.5, "kv_fp8": 0.5})
    assert table.drop_pct("fp8", 8e9, "fp8") == pytest.approx(2.0)
    with pytest.raises(InputError, match="unknown scheme"):
        builtin_accuracy_table().with_overrides({"int3": 1})
