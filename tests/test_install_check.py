"""A foreign or shadowing top-level package stops the command with one line, before any trial."""

import subprocess
import sys

from optimizer.foundation.install_check import MARKER, PACKAGES, foreign_packages


def test_this_checkout_is_one_installation(repo_root):
    assert foreign_packages() == []
    for name in PACKAGES:
        assert MARKER in (repo_root / name / "__init__.py").read_text()


def test_envs_folder_in_the_working_directory_is_named(tmp_path, repo_root):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("raise SystemExit('someone else')\n")
    env = {"PYTHONPATH": str(repo_root), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "optimizer", "--train-file", "x.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "package 'envs' resolves to" in lines[0]
    assert str(tmp_path / "envs") in lines[0] and "run from another folder" in lines[0]


def test_package_without_the_marker_is_foreign(tmp_path):
    root = tmp_path / "site"
    for name in PACKAGES:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(MARKER + "\n" if name != "agents" else "x = 1\n")
    sys.path.insert(0, str(root))
    saved = {n: sys.modules.pop(n) for n in list(sys.modules)
             if n.split(".")[0] in PACKAGES}
    try:
        problems = foreign_packages(root)
    finally:
        sys.path.remove(str(root))
        sys.modules.update(saved)
    assert len(problems) == 1 and "is not cloudopt's 'agents'" in problems[0]
