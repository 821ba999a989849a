import base64
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from optimizer.allocation import Allocation
from optimizer.k8s import cpu_quantity, dns_label, k8s_resources_yaml, memory_quantity  # noqa: E402
from optimizer.report import Report, format_value  # noqa: E402

yaml = pytest.importorskip("yaml")


def test_quantities():
    assert memory_quantity(4.5) == "4608Mi"
    assert memory_quantity(0.25) == "256Mi"
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
    assert res["requests"] == {"cpu": "3", "memory": "6144Mi"}
    assert res["limits"]["memory"] == "6144Mi"
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
    assert "| config | time_s |" in text and "1.235" in text and "—" in text
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
    assert format_value(0.00001234) == "1.234e-05"
    assert format_value(12.3456) == "12.35"
