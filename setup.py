"""Packaging that pyproject.toml cannot express (everything else lives there).

The repository's ``configs/`` stays the one copy of the configuration and workload presets; in
a wheel it ships as the package data of ``optimizer.configs`` (``optimizer.foundation.config.configs_dir``
finds it either way).
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["optimizer*", "envs*", "agents*", "phases*"])
    + ["optimizer.configs", "optimizer.configs.workloads"],
    package_dir={"optimizer.configs": "configs"},
    package_data={"optimizer.configs": ["*.toml", "workloads/*.toml"],
                  "phases": ["models/*/*"],
                  # the vendored CRD schema the TrainJob is checked against
                  "optimizer.reports": ["schemas/*.json"],
                  # the probe's site directory is loaded by path, not imported as a package
                  "optimizer.trials.probe": ["site/*.py"]},
)
