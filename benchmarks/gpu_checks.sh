#!/usr/bin/env bash
# The GPU checks in one command, for a lent GPU machine whose python3 already holds PyTorch
# (the device tool's image): the GPU tests, the main job on the GPU script, and the probe's
# GPU path. Each step has its own time limit, so a slow one leaves the others' figures.
#
#   bash benchmarks/gpu_checks.sh OUT_DIR        # about 11 minutes on one H100/H200, 16 CPUs
#   STEPS="main_job main_time" bash benchmarks/gpu_checks.sh OUT_DIR    # some of the steps
#   STEPS="gpu_tests regret" bash benchmarks/gpu_checks.sh OUT_DIR     # the GPU script's regret
#   STEPS=regret REGRET_PREFERENCES=cost bash benchmarks/gpu_checks.sh OUT_DIR   # one row
#
# The regret step measures gpuresnet's grid once per cell (REGRET_REPEATS, default 1) and runs
# cloudopt and its peers on it; its cache comes back as OUT_DIR/regret.tgz, and a later call
# carrying that archive unpacked under runs/regret/ resumes where this one stopped.
#
# Packages the image lacks (gymnasium) are installed from wheels in .whl/ when that folder
# exists (see benchmarks/README.md, "GPU machine").
set -u
OUT=${1:?usage: gpu_checks.sh OUT_DIR}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:-}:$PWD"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PYTHONPATH"
fi
{ nvidia-smi -L; nproc; free -g | head -2; python3 -c "import torch, gymnasium, sklearn;
print('torch', torch.__version__, torch.cuda.get_device_name(0))"; } 2>&1 | tee "$OUT/machine.txt"

STEPS=${STEPS:-gpu_tests main_job main_time probe_agreement}
REGRET_LIMIT=${REGRET_LIMIT:-480}
REGRET_REPEATS=${REGRET_REPEATS:-1}
REGRET_PREFERENCES=${REGRET_PREFERENCES:-cost,time,balanced}  # about 5 minutes each
step() {  # step NAME SECONDS COMMAND...: one check, its log in OUT/NAME.log
    local name=$1 limit=$2; shift 2
    case " $STEPS " in *" $name "*) ;; *) return ;; esac
    local t0=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc $rc after $((SECONDS - t0)) s"
    tail -n 25 "$OUT/$name.log"
}

step gpu_tests 150 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py
step main_job 280 python3 -m optimizer --train-file benchmarks/workloads/gpu_resnet.py \
    --preference cost --batch-size-arg=--batch-size --budget 8 --agent-seconds 8 \
    --output runs/gpu_main --quiet
# The same folder under the time preference: its trials are reused, only new settings run.
step main_time 170 python3 -m optimizer --resume runs/gpu_main --preference time --quiet
step probe_agreement 170 python3 benchmarks/probe_agreement.py --scripts gpuresnet \
    --json "$OUT/probe_gpu.json"
step regret "$REGRET_LIMIT" python3 benchmarks/recommendation_regret.py --scripts gpuresnet \
    --repeats "$REGRET_REPEATS" --preferences "$REGRET_PREFERENCES" --budgets 4 \
    --json "$OUT/gpu_regret.json"
case " $STEPS " in *" regret "*)
    tar czf "$OUT/regret.tgz" --exclude='*.pt' runs/regret 2>/dev/null ;; esac
# The run folders come back as one archive (traces and summaries, no model weights).
tar czf "$OUT/runs.tgz" --exclude='*.pt' runs/gpu_main runs/probe_agreement 2>/dev/null
ls -la "$OUT"
