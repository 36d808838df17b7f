#!/usr/bin/env bash
# One-shot GPU check, run on a lent H100/H200 through the device tool (see README, "GPU").
# Installs the two wheels the GPU image lacks (carried in .whl/), then: the core test suite on
# CUDA (device="auto" picks the GPU), a CUDA-graph against eager refinement check, and the ImageNet-sized
# fit by phase and whole (benchmarks/gpu_fit.py). Outputs land in $OUT (gpu_fit.json and .log, pytest log).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, faiss, ot, sklearn; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0))"
echo "== the ImageNet-sized fit (C=1000, 16 shots x 5 views, d=512, beta CV + 200 steps)"
timeout 240 python3 -m benchmarks.gpu_fit --repeats 3 --profile 2>&1 | tee "$OUT/gpu_fit.log"
cp benchmarks/results/gpu_fit.json "$OUT/" 2>/dev/null
echo "== CUDA graph vs eager refinement: same problem, same start (support loss, hubness)"
python3 - <<'PY'
import torch, torch.nn.functional as F
from benchmarks.speed import synthetic
from lfa_index.core.solvers.loss import arerank_loss
from lfa_index.core.solvers.metrics import hubness
from lfa_index.core.solvers.procrustes import beta_procrustes, orthogonal_procrustes
from lfa_index.core.solvers.refine import refine
x, y, p = (t.cuda() for t in synthetic(100, 16, 5, 512))
w0 = beta_procrustes(orthogonal_procrustes(x[:, 0], p[y]), 0.5)
print("start", float(arerank_loss(x[:, 0] @ w0, p, y)), hubness(F.normalize(x[:, 0] @ w0, dim=1), p, y))
for graph in (True, False):
    g = torch.Generator(device="cuda").manual_seed(0)
    r = refine(w0, x, y, p, steps=200, generator=g, coin=torch.Generator().manual_seed(1), cuda_graph=graph)
    print("graph" if graph else "eager", float(arerank_loss(x[:, 0] @ r.W, p, y)),
          hubness(F.normalize(x[:, 0] @ r.W, dim=1), p, y), "W_tt-I", float((r.W_tt - torch.eye(512, device="cuda")).norm()))
PY
echo "== core tests on CUDA"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m "not vision and not slow" \
  tests/test_procrustes.py tests/test_loss.py tests/test_refine.py tests/test_unsupervised.py \
  tests/test_validation.py tests/test_estimator.py tests/test_geometry.py 2>&1 | tee "$OUT/pytest_cuda.log" | tail -15
