import base64
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from conftest import need  # noqa: E402

from optimizer.foundation.allocation import Allocation
from optimizer.foundation.memory import memory_quantity
from optimizer.reports.k8s import (  # noqa: E402
    PLACEHOLDER_IMAGE,
    cpu_quantity,
    dns_label,
    k8s_job_yaml,
    k8s_resources_yaml,
)
from optimizer.reports.render import Report, dollars, format_value  # noqa: E402

yaml = need("yaml")


def test_quantities():
    assert memory_quantity(4.5) == "4608Mi"
    assert memory_quantity(0.25) == "256Mi"
    assert memory_quantity(13.0) == "13Gi"
    assert memory_quantity(400 / 1024) == "400Mi"
    assert cpu_quantity(2) == "2"
    assert cpu_quantity(1.5) == "1500m"
    assert dns_label("Train_MLP.py") == "train-mlp-py"
    assert dns_label("___") == "training"


@pytest.mark.parametrize("gpus", [0, 2])
def test_k8s_yaml_is_valid_and_complete(gpus):
    alloc = Allocation(gpus=gpus, cpus=3, memory_gb=6.0, batch_size=128)
    env = {"OMP_NUM_THREADS": "3", "CUDA_VISIBLE_DEVICES": "" if gpus == 0 else "0,1",
           "WEIRD": 'a "quoted": value'}
    doc = yaml.safe_load(k8s_resources_yaml(alloc, env, name="train_mlp", comment="line1\nline2"))
    res = doc["resources"]
    assert res["requests"] == {"cpu": "3", "memory": "6Gi"}
    assert res["limits"]["memory"] == "6Gi"
    assert ("nvidia.com/gpu" in res["limits"]) == (gpus > 0)
    if gpus:
        assert res["limits"]["nvidia.com/gpu"] == "2"
    got = {e["name"]: e["value"] for e in doc["env"]}
    assert got == env
    assert doc["name"] == "train-mlp"


def test_report_markdown_and_self_contained_html(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    png = tmp_path / "plots" / "line.png"
    png.parent.mkdir()
    fig.savefig(png)
    plt.close(fig)
    rep = Report("Run report")
    rep.heading("Results").paragraph("a <b> & c").note("SLA cannot be met")
    rep.table(pd.DataFrame({"config": ["a", "b"], "time_s": [1.23456, float("nan")]}))
    rep.table([{"x": 1, "y": None}])
    rep.figure(png, "A line")
    md, page = rep.write(tmp_path)
    text = md.read_text()
    assert "| config | time (s) |" in text and "1.235" in text and "—" in text
    assert "](plots/line.png)" in text
    body = page.read_text()
    assert "a &lt;b&gt; &amp; c" in body
    encoded = base64.b64encode(png.read_bytes()).decode()
    assert f"data:image/png;base64,{encoded}" in body
    assert "plots/line.png" not in body  # nothing links outside the page


def test_format_value():
    assert format_value(None) == "—"
    assert format_value(math.nan) == "—"
    assert format_value(True) == "yes"
    assert format_value(0.00001234) == "0.0000123"  # a price per job, as people read it
    assert format_value(0.000866) == "0.000866" and format_value(-0.0005) == "-0.000500"
    assert format_value(3e-12) == "3.000e-12" and format_value(2.5e7) == "2.500e+07"
    assert dollars(8.666e-05) == "$0.0000867" and dollars(12.345) == "$12.35"
    assert format_value(12.3456) == "12.35" and format_value(10320.5) == "10,320"
    assert format_value((128, 256)) == "128 → 256"  # a (before, after) pair, not a repr
    assert format_value([]) == "none" and format_value(["a", 1.5]) == "a, 1.5"
    assert format_value(1.0000000000000002) == "1"


VPA_MODES = {"Off", "Initial", "Recreate", "Auto", "InPlaceOrRecreate"}


@pytest.mark.parametrize("gpus", [0, 1])
def test_k8s_job_and_vpa_are_complete_objects(tmp_path, gpus):
    alloc = Allocation(gpus=gpus, cpus=4, memory_gb=11.5, batch_size=256)
    text = k8s_job_yaml(alloc, {"OMP_NUM_THREADS": "4"}, name="ResNet_run", command=[
        "python", "train.py"], args=["--batch-size", "256"], memory_bounds_gb=(10.2, 14.0),
        cpu_bounds=(3.2, 16), comment="cloudopt")
    job, vpa = list(yaml.safe_load_all(text))
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert spec["restartPolicy"] == "Never" and container["image"] == PLACEHOLDER_IMAGE
    # The script never calls the API: no token; the pod passes the restricted profile
    # (tests/test_k8s_restricted.py checks every rule).
    assert spec["automountServiceAccountToken"] is False
    assert container["imagePullPolicy"] == "IfNotPresent" and not PLACEHOLDER_IMAGE.endswith(
        ":latest")
    assert job["spec"]["activeDeadlineSeconds"] > 0 and job["spec"]["backoffLimit"] == 0
    assert container["args"] == ["--batch-size", "256"]
    limits, requests = container["resources"]["limits"], container["resources"]["requests"]
    assert requests["memory"] == limits["memory"] == "11776Mi"
    assert ("nvidia.com/gpu" in limits) == bool(gpus) and "nvidia.com/gpu" not in requests
    # The VPA (a CRD, so checked here against its documented fields) targets the Job.
    assert (vpa["apiVersion"], vpa["kind"]) == ("autoscaling.k8s.io/v1",
                                                "VerticalPodAutoscaler")
    assert vpa["spec"]["targetRef"] == {"apiVersion": "batch/v1", "kind": "Job",
                                        "name": job["metadata"]["name"]}
    assert vpa["spec"]["updatePolicy"]["updateMode"] in VPA_MODES
    (policy,) = vpa["spec"]["resourcePolicy"]["containerPolicies"]
    assert policy["containerName"] == container["name"]
    assert set(policy) == {"containerName", "minAllowed", "maxAllowed", "controlledResources",
                           "controlledValues"}
    # The floor is the recommended request (11.5 GB, margin included), not the bare peak
    # (10.2 GB), and limits move with requests: neither falls under it.
    assert policy["minAllowed"] == {"cpu": "3200m", "memory": "11776Mi"}
    assert policy["controlledValues"] == "RequestsAndLimits"
    assert policy["maxAllowed"] == {"cpu": "16", "memory": "14Gi"}

    validate = need("kubernetes_validate")
    path = tmp_path / "job.yaml"
    path.write_text(text)
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"passed for resource job/{job['metadata']['name']}" in proc.stdout
    assert validate is not None


def test_human_headers_and_collapsed_decisions():
    from optimizer.reports.render import human_header
    from optimizer.reports.run_report import _collapse_repeats

    assert human_header("job_time_s") == "job time (s)"
    assert human_header("memory_gb") == "memory (GB)" and human_header("cpus") == "CPUs"
    assert human_header("trial") == "trial"
    steps = pd.DataFrame({"step": range(5), "description": ["grow", "keep", "keep", "keep", "keep"],
                          "effect": ["+1 CPU", "no change", "no change", "no change", "no change"],
                          "cpus": [2, 2, 2, 2, 2]})
    out = _collapse_repeats(steps)
    assert out["step"].tolist() == [0, "1–4"] and len(out) == 2


def test_answer_block_comes_first(tmp_path):
    r = Report("t").answer("Run it with 2 CPUs.\nMeasured: 3 s.").paragraph("details")
    md, page = r.write(tmp_path)
    text = md.read_text().splitlines()
    assert text[2] == "**Run it with 2 CPUs.**" and text[4] == "- Measured: 3 s."
    assert '<div class="answer"><b>Run it with 2 CPUs.</b><br>Measured: 3 s.</div>' in \
        page.read_text()


def _profile(cpu_scales, mem_peaks):
    from optimizer.trials.phase_profile import PhaseProfile

    stats = pd.DataFrame({"phase": range(len(cpu_scales)), "samples": 10,
                          "share": [1 / len(cpu_scales)] * len(cpu_scales),
                          "cpu_cores_mean": cpu_scales, "mem_gb_mean": mem_peaks,
                          "mem_gb_peak": mem_peaks, "cpu_scale": cpu_scales,
                          "mem_scale": [m / max(mem_peaks) for m in mem_peaks]})
    return PhaseProfile(np.zeros(20, dtype=int), [(0, 1.0)], {}, stats)


def test_phase_needs_scale_the_recommended_run_and_only_when_phases_differ():
    from optimizer.trials.phase_profile import phase_needs

    # data loading at 0.4x the mean CPU, training at 1.6x: the busiest phase comes first
    needs = phase_needs(_profile([0.4, 1.6], [1.0, 2.0]), cores_mean=1.0, mem_peak_gb=4.0)
    assert list(needs["phase"]) == [1, 0]
    assert needs["cpu_cores"].tolist() == pytest.approx([1.6, 0.4])
    assert needs["mem_gb"].tolist() == pytest.approx([4.0, 2.0])
    assert phase_needs(_profile([0.95, 1.05], [2.0, 1.9]), 1.0, 4.0).empty
    # never more cores than the run was given
    capped = phase_needs(_profile([0.4, 1.6], [1.0, 2.0]), cores_mean=1.0, mem_peak_gb=4.0,
                         cpus=1)
    assert capped["cpu_cores"].tolist() == pytest.approx([1.0, 0.4])


def test_a_trace_too_short_for_the_phase_model_is_told_without_loading_it(tmp_path):
    """The main job reads the model's history window from its meta.json and skips loading the
    model (scikit-learn and the CRBM, about 2 s) for a trace it could not label."""
    import json

    import pandas as pd

    from optimizer.trials.phase_profile import (
        detector_for,
        load_detector,
        samples_needed,
        too_short,
    )

    assert samples_needed() == load_detector().delay + 2
    (tmp_path / "meta.json").write_text(json.dumps({"delay": 1}))
    assert samples_needed(tmp_path) == 3
    assert samples_needed(tmp_path / "absent") is None
    assert too_short(2, 5) == "trace has 2 samples; phases need at least 5"
    # the folder holds no model: loading it would fail otherwise
    with pytest.raises(ValueError, match="trace has 2 samples; phases need at least 3"):
        detector_for(pd.DataFrame({"cpu_cores": [1.0, 1.0]}), tmp_path)
