import pytest

from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import builtin_catalog, get_gpu, load_catalog

REQUIRED = ["a100-80gb", "h100", "h100-pcie", "h200", "b200", "l4", "l40s", "rtx4090", "a10g", "mi300x"]


@pytest.mark.parametrize("name", REQUIRED)
def test_catalog_has_required_gpus_with_prices_and_sources(name):
    gpu = get_gpu(name)
    assert gpu.peak_flops("bf16") > 0
    assert gpu.memory_bandwidth_tbps > 0 and gpu.memory_gib > 0
    assert gpu.price_per_gpu_hour > 0 and gpu.price_source and gpu.price_date
    assert gpu.interconnect_gbps > 0 and gpu.gpus_per_node >= 1


@pytest.mark.parametrize("alias,name", [("H100_SXM", "h100"), ("h200_sxm", "h200"), ("A100-80GB", "a100-80gb"),
                                        ("RTX4090", "rtx4090"), ("MI300X", "mi300x")])
def test_aliases_are_case_insensitive(alias, name):
    assert get_gpu(alias).name == name


def test_native_fp8_only_where_the_silicon_has_it():
    assert not get_gpu("a100-80gb").has_dtype("fp8")
    for name in ("h100", "l4", "l40s", "rtx4090", "b200", "mi300x"):
        assert get_gpu(name).has_dtype("fp8")


def test_seed_balance_point_of_h100():
    # Seed section 2.1: 989 TFLOP/s over 3.35 TB/s is about 295 FLOP/byte.
    assert get_gpu("h100").balance_point_flops_per_byte("bf16") == pytest.approx(295, rel=0.01)


def test_unknown_gpu_lists_known_ones():
    with pytest.raises(InputError, match=r"unknown GPU 'x100'.*h100.*mi300x"):
        get_gpu("x100")


def test_user_yaml_overrides_price_and_adds_gpu(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text("gpus:\n  H100: {price_per_gpu_hour: 1.5}\n  h100-nvl: {base: h100, memory_gib: 93.0, memory_bandwidth_tbps: 3.9}\n")
    catalog = load_catalog(path)
    assert catalog.get("h100").price_per_gpu_hour == 1.5
    nvl = catalog.get("H100-NVL")
    assert nvl.memory_gib == 93.0 and nvl.peak_flops("bf16") == get_gpu("h100").peak_flops("bf16")
    assert builtin_catalog().get("h100").price_per_gpu_hour != 1.5  # the shipped catalog is untouched


@pytest.mark.parametrize("text,match", [
    ("gpus: [1, 2]", "must be a mapping"),
    ("gpus:\n  h100: {price_per_gpu_hour: -1}", r"gpus.h100: price_per_gpu_hour"),
    ("gpus:\n  h100: {pricee: 1}", r"pricee: unknown key"),
    ("gpus:\n  new-gpu: {memory_gib: 10}", r"gpus.new-gpu"),
    ("nope: 1", "top-level 'gpus:'"),
    ("gpus: {h100: [", "not valid YAML"),
])
def test_bad_hardware_files_name_the_problem(tmp_path, text, match):
    path = tmp_path / "hw.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=match):
        load_catalog(path)


def test_blackwell_ultra_gpus_are_in_the_catalog_uncalibrated():
    from servopt.calibration.registry import load_profile

    b300, gb300 = get_gpu("b300_sxm"), get_gpu("gb300")
    assert b300.architecture == gb300.architecture == "blackwell"
    assert b300.peak_flops("fp4") > get_gpu("b200").peak_flops("fp4")
    assert not load_profile(b300).calibrated and "B200" in load_profile(b300).source
    # GB300 NVL72: four GPUs per host, one NVLink fabric over 72.
    assert (gb300.gpus_per_node, gb300.nvlink_gpus, b300.nvlink_gpus) == (4, 72, 8)
