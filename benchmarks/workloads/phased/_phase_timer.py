"""Measure the phases of one of these scripts from outside, without touching it.

Not a workload: a small driver used to fill the table in README.md. It loads the script as a
module (so its ``if __name__ == "__main__"`` block does not run), wraps the named top-level
functions with wall-clock and CPU timers, then calls the script's ``main()`` with the given
arguments. The script's own output is left as it is; the timings are written as one JSON
object to ``--json`` (or stderr): per phase its wall time, this process's CPU time, and the
CPU time the rest of the machine used meanwhile (``others_cpu_s``, from /proc/stat; a sign of
contention).

    taskset -c 0 env OMP_NUM_THREADS=1 python _phase_timer.py prep_heavy.py \\
        --phase prep=build_dataset --phase train=train_epoch -- --epochs 3
"""

import argparse
import functools
import json
import os
import resource
import sys
import time
import types
from pathlib import Path


def busy_cpu_s():
    """Seconds of CPU the whole machine has spent busy (all processes), from /proc/stat."""
    try:
        fields = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("script")
    p.add_argument("--phase", action="append", default=[],
                   help="LABEL=FUNC[,FUNC...]: time these top-level functions as one phase")
    p.add_argument("--json", default=None)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:cut])
    script_args = argv[cut + 1:]

    t_start = time.perf_counter()
    c_start = time.process_time()
    path = Path(a.script).resolve()
    mod = types.ModuleType("phase_target")
    mod.__file__ = str(path)
    sys.modules["phase_target"] = mod
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    t_loaded = time.perf_counter()

    totals = {}
    for spec in a.phase:
        label, funcs = spec.split("=", 1)
        totals[label] = {"wall_s": 0.0, "cpu_s": 0.0, "others_cpu_s": 0.0, "calls": 0}
        for name in funcs.split(","):
            fn = getattr(mod, name)

            @functools.wraps(fn)
            def timed(*args, _fn=fn, _acc=totals[label], **kwargs):
                t0, c0, b0 = time.perf_counter(), time.process_time(), busy_cpu_s()
                try:
                    return _fn(*args, **kwargs)
                finally:
                    _acc["wall_s"] += time.perf_counter() - t0
                    cpu = time.process_time() - c0
                    _acc["cpu_s"] += cpu
                    _acc["others_cpu_s"] += busy_cpu_s() - b0 - cpu
                    _acc["calls"] += 1

            setattr(mod, name, timed)

    import torch  # already imported by the script; only read here

    sys.argv = [str(path)] + script_args
    t0, c0, b0 = time.perf_counter(), time.process_time(), busy_cpu_s()
    mod.main()
    t1, c1, b1 = time.perf_counter(), time.process_time(), busy_cpu_s()
    phased = sum(v["wall_s"] for v in totals.values())
    out = {
        "script": path.name, "args": script_args, "torch_threads": torch.get_num_threads(),
        "import_s": round(t_loaded - t_start, 3), "main_s": round(t1 - t0, 3),
        "main_cpu_s": round(c1 - c0, 3), "main_others_cpu_s": round(b1 - b0 - (c1 - c0), 3),
        "total_s": round(t1 - t_start, 3), "total_cpu_s": round(c1 - c_start, 3),
        "phases": {k: {kk: round(vv, 3) for kk, vv in v.items()} for k, v in totals.items()},
        "other_s": round(t1 - t0 - phased, 3),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    text = json.dumps(out)
    if a.json:
        Path(a.json).write_text(text + "\n")
    else:
        print(text, file=sys.stderr)


if __name__ == "__main__":
    main()
