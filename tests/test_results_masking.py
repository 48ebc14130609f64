"""results.json, the raw results certify leaves in the report directory beside the reports, masks
the run's keys verbatim as report.json does (sbconform.secrets): it was written as the test
processes wrote it, where only 'SharedAccessKey=...' and 'sig=...' forms were masked."""

from __future__ import annotations

import json
from pathlib import Path


def test_a_key_in_a_failure_reason_is_masked_verbatim_in_results_json(tmp_path: Path, monkeypatch) -> None:
    import sbconform.certify as certify_module

    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "sb_leak.py").write_text(
        "def pytest_runtest_call(item):\n"
        "    if 'deferred' in item.name:\n"
        "        raise AssertionError('the broker refused token VERBATIMKEY42')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(plugin))
    # the keys a connection string or a secondary= option would carry (the reference takes neither)
    monkeypatch.setattr(certify_module, "secrets_of", lambda connection_string, options: ("VERBATIMKEY42",))
    code = certify_module.certify("reference", tmp_path / "report", clauses=["SETTLE-DEFR-001"], jobs=1,
                                  pytest_args=["-p", "sb_leak", "tests/test_features.py"])
    assert code == 1
    results = (tmp_path / "report" / "results.json").read_text(encoding="utf-8")
    assert "the broker refused token ***" in results
    leaked = [p.name for p in (tmp_path / "report").rglob("*") if p.is_file() and "VERBATIMKEY42" in p.read_text(errors="replace")]
    assert not leaked, leaked
    assert json.loads(results)["tests"]
