#!/usr/bin/env bash
# On a machine with a CUDA GPU and PyTorch: time the kernels (quick sweep, or the full one with
# FULL=1), fit a profile to them, and compare it with the shipped profile of that GPU on the same
# table. Outputs go to ${OUT:-gpu-calibration}/ (commit the table and the profile).
set -euo pipefail
out="${OUT:-gpu-calibration}"
mkdir -p "$out"
quick="--quick"; [[ "${FULL:-0}" == "1" ]] && quick=""
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible'; print(torch.cuda.get_device_name(0), torch.__version__)"
time servopt calibrate run --device cuda $quick --out "$out/kernels.csv"
gpu=$(python -c "import pandas as pd; print(pd.read_csv('$out/kernels.csv')['system'].iloc[0])")
echo "== fit on this GPU ($gpu)"
servopt calibrate fit "$out/kernels.csv" --gpu "$gpu" --framework torch --out "$out/$gpu.profile.json" | tee "$out/fit.txt"
echo "== this GPU's measurements predicted by the fitted profile"
servopt validate --kernels "$out/kernels.csv" --profile "$out/$gpu.profile.json" | tee "$out/validate-fitted.txt"
echo "== the same measurements predicted by the shipped (or spec-default) profile"
servopt validate --kernels "$out/kernels.csv" --out "$out/predictions-shipped.csv" | tee "$out/validate-shipped.txt"
