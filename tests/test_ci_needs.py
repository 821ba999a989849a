"""A test's missing dependency is a skip on a newcomer's machine and a failure in CI, where
``make test`` installs it (tests/conftest.py: ``need``, ``missing``), so CI cannot pass the
Kubernetes, CEL, Ray and browser checks by skipping them."""

from __future__ import annotations

import pytest
from conftest import in_ci, missing, need


@pytest.mark.parametrize("value,ci", [("true", True), ("1", True), ("", False), ("0", False),
                                      ("false", False)])
def test_ci_is_read_from_the_environment(monkeypatch, value, ci):
    monkeypatch.setenv("CI", value)
    assert in_ci() is ci


def test_a_missing_module_skips_outside_ci_and_fails_in_it(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="cloudopt_absent_module"):
        need("cloudopt_absent_module")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI installs it"):
        need("cloudopt_absent_module")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        missing("Chromium", "Debian: apt-get install chromium")
    assert need("json").dumps([]) == "[]"  # present: the module itself
