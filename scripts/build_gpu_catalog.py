"""Build costmodels/data/gpus.yaml from the shared reference table of GPU specs.

Peaks, memory size and bandwidth, links and TDP come from ../shared/data/reference/gpu_specs.csv
(each row names its primary sources: NVIDIA/AMD datasheets, aiconfigurator's system files).
What that table does not hold (the memory the driver reports, the architecture, GPUs per node,
on-demand prices, and whether a price rents a GPU on its own or only with its whole node:
``price_per``) is in OVERLAY below, each value with its source.

    python scripts/build_gpu_catalog.py [--specs PATH] [--out PATH]
"""

from __future__ import annotations

import argparse
import copy
import csv
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SPECS = ROOT.parent / "shared" / "data" / "reference" / "gpu_specs.csv"
DEFAULT_OUT = ROOT / "costmodels" / "data" / "gpus.yaml"

# memory_gib: total device memory as torch.cuda.mem_get_info reports it (what vLLM's
# gpu_memory_utilization multiplies), not the marketing GB. Sources: vLLM start-up logs
# (H100: 79.19 GiB in shared/data/measured/memory), nvidia-smi totals (MiB) for the others.
OVERLAY: dict[str, dict] = {
    "A100-80GB-SXM": {
        "name": "a100-80gb", "display_name": "NVIDIA A100-SXM4-80GB", "vendor": "nvidia",
        "architecture": "ampere", "memory_gib": 79.15, "interconnect": "nvlink3",
        "interconnect_gbps": 300.0, "gpus_per_node": 8, "int4_dense_tops": 1248.0,
        "price_per_gpu_hour": 1.79,
        "price_source": "Lambda on-demand, 8x A100 SXM 80GB instance, per GPU-hour (lambda.ai/pricing)",
        "price_per": "node",
        "price_date": "2025-06",
        "aliases": ["a100", "a100_sxm", "a100-sxm", "a100-80gb-sxm", "a100-sxm4-80gb"],
    },
    "H100-SXM": {
        "name": "h100", "display_name": "NVIDIA H100 80GB HBM3 (SXM5)", "vendor": "nvidia",
        "architecture": "hopper", "memory_gib": 79.19, "interconnect": "nvlink4",
        "interconnect_gbps": 450.0, "gpus_per_node": 8,
        "price_per_gpu_hour": 2.99,
        "price_source": "Lambda on-demand, 8x H100 SXM instance, per GPU-hour (lambda.ai/pricing)",
        "price_per": "node",
        "price_date": "2025-06",
        "aliases": ["h100_sxm", "h100-sxm", "h100-80gb", "h100-sxm5"],
    },
    "H100-PCIe": {
        "name": "h100-pcie", "display_name": "NVIDIA H100 PCIe 80GB", "vendor": "nvidia",
        "architecture": "hopper", "memory_gib": 79.19, "interconnect": "pcie5",
        "interconnect_gbps": 64.0, "gpus_per_node": 8,
        "price_per_gpu_hour": 2.49,
        "price_source": "Lambda on-demand, 1x H100 PCIe instance (lambda.ai/pricing)",
        "price_date": "2025-06",
        "aliases": ["h100_pcie"],
    },
    "H200-SXM": {
        "name": "h200", "display_name": "NVIDIA H200 141GB HBM3e (SXM)", "vendor": "nvidia",
        "architecture": "hopper", "memory_gib": 139.81, "interconnect": "nvlink4",
        "interconnect_gbps": 450.0, "gpus_per_node": 8,
        "price_per_gpu_hour": 3.99,
        "price_source": "RunPod secure cloud on-demand, H200 SXM (runpod.io/pricing)",
        "price_date": "2025-06",
        "aliases": ["h200_sxm", "h200-sxm"],
    },
    "B200 (HGX/DGX)": {
        "name": "b200", "display_name": "NVIDIA B200 (HGX)", "vendor": "nvidia",
        "architecture": "blackwell", "memory_gib": 179.06, "interconnect": "nvlink5",
        "interconnect_gbps": 900.0, "gpus_per_node": 8,
        "price_per_gpu_hour": 5.99,
        "price_source": "RunPod secure cloud on-demand, B200 (runpod.io/pricing)",
        "price_date": "2025-06",
        "aliases": ["b200_sxm", "b200-sxm"],
    },
    "L4": {
        "name": "l4", "display_name": "NVIDIA L4 24GB", "vendor": "nvidia",
        "architecture": "ada", "memory_gib": 22.05, "interconnect": "pcie4",
        "interconnect_gbps": 32.0, "gpus_per_node": 8, "int4_dense_tops": 485.0,
        "price_per_gpu_hour": 0.805,
        "price_source": "AWS EC2 on-demand g6.xlarge (1x L4), us-east-1 (aws.amazon.com/ec2/pricing)",
        "price_date": "2025-06",
        "aliases": [],
    },
    "L40S": {
        "name": "l40s", "display_name": "NVIDIA L40S 48GB", "vendor": "nvidia",
        "architecture": "ada", "memory_gib": 44.39, "interconnect": "pcie4",
        "interconnect_gbps": 32.0, "gpus_per_node": 8, "int4_dense_tops": 1466.0,
        "price_per_gpu_hour": 1.861,
        "price_source": "AWS EC2 on-demand g6e.xlarge (1x L40S), us-east-1 (aws.amazon.com/ec2/pricing)",
        "price_date": "2025-06",
        "aliases": [],
    },
    "RTX-4090": {
        "name": "rtx4090", "display_name": "NVIDIA GeForce RTX 4090 24GB", "vendor": "nvidia",
        "architecture": "ada", "memory_gib": 23.99, "interconnect": "pcie4",
        "interconnect_gbps": 32.0, "gpus_per_node": 8, "int4_dense_tops": 1321.0,
        "price_per_gpu_hour": 0.69,
        "price_source": "RunPod secure cloud on-demand, RTX 4090 (runpod.io/pricing)",
        "price_date": "2025-06",
        "aliases": ["rtx-4090", "4090"],
    },
    "A10G": {
        "name": "a10g", "display_name": "NVIDIA A10G 24GB", "vendor": "nvidia",
        "architecture": "ampere", "memory_gib": 22.19, "interconnect": "pcie4",
        "interconnect_gbps": 32.0, "gpus_per_node": 8, "tdp_w": 300.0,
        "price_per_gpu_hour": 1.006,
        "price_source": "AWS EC2 on-demand g5.xlarge (1x A10G), us-east-1 (aws.amazon.com/ec2/pricing)",
        "price_date": "2025-06",
        "aliases": [],
    },
    "MI300X": {
        "name": "mi300x", "display_name": "AMD Instinct MI300X 192GB", "vendor": "amd",
        "architecture": "cdna3", "memory_gib": 191.98, "interconnect": "infinity-fabric",
        "interconnect_gbps": 448.0, "gpus_per_node": 8,
        "price_per_gpu_hour": 2.49,
        "price_source": "RunPod secure cloud on-demand, MI300X (runpod.io/pricing)",
        "price_date": "2025-06",
        "aliases": ["mi300"],
    },
}


# GPUs that the reference table lacks but measured data uses, as a base GPU plus what differs.
DERIVED: dict[str, tuple[str, dict]] = {
    "a100-40gb": ("a100-80gb", {
        "display_name": "NVIDIA A100-SXM4-40GB", "memory_gb_nominal": 40.0, "memory_gib": 39.39,
        "memory_type": "HBM2", "memory_bandwidth_tbps": 1.555,
        "price_per_gpu_hour": 1.29,
        "price_source": "Lambda on-demand, 8x A100 SXM 40GB instance, per GPU-hour (lambda.ai/pricing)",
        "price_per": "node",
        "price_date": "2025-06", "aliases": ["a100-sxm4-40gb", "a100_40gb"],
        "spec_sources": "NVIDIA A100 datasheet (40GB SXM: 1,555 GB/s HBM2)",
        "notes": "no FP8; used by the vLLM benchmark runs in shared/data/measured/e2e",
    }),
    # Blackwell Ultra. Per-GPU dense peaks, usable memory and TDP from Verda's per-GPU table
    # (verda.com/blog/gb300-nvl72-architecture, "performance numbers without sparsity"), which agrees
    # with NVIDIA's platform totals: HGX B300 36 PF BF16 and 72 PF FP8 sparse over 8 GPUs; GB300 NVL72
    # 1,080 PF dense FP4, 360 PF dense FP8, 576 TB/s and 130 TB/s NVLink over 72 GPUs. Blackwell Ultra
    # cut INT8 to about 0.15 POPS. No kernel tables exist for either: both take the B200's fitted
    # efficiencies (calibration/registry.py, REFERENCE_BY_ARCHITECTURE) and stay UNCALIBRATED.
    "b300": ("b200", {
        "display_name": "NVIDIA B300 (HGX, Blackwell Ultra)",
        "peak_tflops": {"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0, "int8": 150.0, "fp4": 14000.0},
        "memory_gb_nominal": 288.0, "memory_gib": 270.0, "memory_type": "HBM3e", "memory_bandwidth_tbps": 7.7,
        "tdp_w": 1100.0,
        "price_per_gpu_hour": 6.13,
        "price_source": "Ornn GPU rental benchmark, B300 on-demand $5.00-7.25 per GPU-hour (neocloud range; "
                        "midpoint), ornnai.com/research/nvidia-b200-vs-b300-why-use-one-instead-of-the-other",
        "price_date": "2026-03", "aliases": ["b300_sxm", "b300-sxm", "blackwell-ultra"],
        "spec_sources": "Verda per-GPU table (dense: 14 PF FP4, 4.5 PF FP8, 2.25 PF BF16, 0.15 POPS INT8; 270 GB "
                        "usable HBM3e, 7.7 TB/s, 1.1 kW); NVIDIA HGX B300 datasheet (8 x 288 GB, NVLink 5 1.8 TB/s "
                        "per GPU)",
        "notes": "288 GB physical, ~270 GB usable; UNCALIBRATED (no kernel tables): B200's fitted efficiencies",
    }),
    "gb300": ("b200", {
        "display_name": "NVIDIA GB300 NVL72 (Blackwell Ultra)",
        "peak_tflops": {"bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0, "int8": 165.0, "fp4": 15000.0},
        "memory_gb_nominal": 288.0, "memory_gib": 279.0, "memory_type": "HBM3e", "memory_bandwidth_tbps": 8.0,
        "gpus_per_node": 4, "nvlink_domain_gpus": 72, "tdp_w": 1400.0,
        "price_per_gpu_hour": 6.13,
        "price_source": "no public per-GPU on-demand price found; the B300's (Ornn benchmark midpoint) stands in",
        "price_date": "2026-03", "aliases": ["gb300_nvl72", "gb300-nvl72"],
        "spec_sources": "Verda per-GPU table (dense: 15 PF FP4, 5 PF FP8, 2.5 PF BF16, 0.165 POPS INT8; 279 GB "
                        "usable HBM3e, 8 TB/s, 1.4 kW); NVIDIA GB300 NVL72 datasheet (72 GPUs, 1,080 PF dense FP4, "
                        "576 TB/s, 130 TB/s NVLink: one NVLink domain of 72 GPUs, 4 GPUs per compute tray)",
        "notes": "4 GPUs per host (compute tray), 72 in one NVLink domain; UNCALIBRATED (no kernel tables): "
                 "B200's fitted efficiencies",
    }),
}


def _first_number(text: str) -> float | None:
    """Spec cells carry notes ("70 (approx; ...)", "7.7-8.0"); the first number is the value used."""
    match = re.search(r"\d+(?:\.\d+)?", text or "")
    return float(match.group()) if match else None


def build(specs_path: Path) -> dict:
    gpus = {}
    with specs_path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            overlay = dict(OVERLAY[row["gpu"]])
            peaks = {"bf16": _first_number(row["bf16_dense_tflops"])}
            peaks["fp16"] = peaks["bf16"]
            for key, column in (("fp8", "fp8_dense_tflops"), ("int8", "int8_dense_tops"), ("fp4", "fp4_dense_tflops")):
                value = _first_number(row[column])
                if value:
                    peaks[key] = value
            int4 = overlay.pop("int4_dense_tops", None)
            if int4:
                peaks["int4"] = int4
            tdp = _first_number(row["tdp_w"]) or overlay.pop("tdp_w", None)
            overlay.pop("tdp_w", None)
            name = overlay.pop("name")
            gpus[name] = {
                **{k: overlay[k] for k in ("display_name", "vendor", "architecture")},
                "peak_tflops": peaks,
                "memory_gb_nominal": _first_number(row["mem_gb"]),
                "memory_gib": overlay["memory_gib"],
                "memory_type": row["mem_type"],
                "memory_bandwidth_tbps": _first_number(row["mem_bw_tbs"]),
                "interconnect": overlay["interconnect"],
                "interconnect_gbps": overlay["interconnect_gbps"],
                "gpus_per_node": overlay["gpus_per_node"],
                "tdp_w": tdp,
                "price_per_gpu_hour": overlay["price_per_gpu_hour"],
                "price_per": overlay.get("price_per", "gpu"),
                "price_source": overlay["price_source"],
                "price_date": overlay["price_date"],
                "aliases": overlay["aliases"],
                "spec_sources": row["primary_sources"],
                "notes": row["notes"],
            }
    for name, (base, overrides) in DERIVED.items():
        gpus[name] = copy.deepcopy({**gpus[base], **overrides})
    return gpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=Path, default=DEFAULT_SPECS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    header = (
        "# Generated by scripts/build_gpu_catalog.py from shared/data/reference/gpu_specs.csv\n"
        "# (NVIDIA and AMD datasheets; aiconfigurator system files, Apache-2.0). Do not edit by hand:\n"
        "# change the script's OVERLAY or the reference table and run it again.\n"
        "# Peaks are dense (no sparsity) TFLOP/s or TOP/s; bandwidths in TB/s and GB/s per direction.\n"
    )
    args.out.write_text(header + yaml.safe_dump({"gpus": build(args.specs)}, sort_keys=False, width=110))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
