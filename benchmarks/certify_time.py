"""Wall time of each target's full certification (every area), measured in the same run.

Runs ``sbconform certify`` on the in-process reference, then on the SDK target against
``sbconform serve`` (``--option serve=true``: virtual time, the default there) with ``--jobs`` processes, each into a temporary
report directory, and prints the seconds each took with its verdict line. The reference run is
the baseline measured in the same run; the SDK run is what CI and users wait for. The last line
is ``reference_s=<n> sdk_s=<n>``.

    .venv/bin/python benchmarks/certify_time.py [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def certify(args: list[str], report_dir: Path) -> tuple[float, str, dict]:
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "sbconform.cli", "certify", *args, "--report-dir", str(report_dir)],
                         cwd=REPO, capture_output=True, text=True)
    took = time.monotonic() - started
    verdict = next((line for line in reversed(run.stdout.splitlines()) if line.startswith("sbconform: ") and " pass" in line),
                   run.stdout[-300:] + run.stderr[-300:])
    summary = {}
    report = report_dir / "report.json"
    if report.exists():
        summary = json.loads(report.read_text())["summary"]
    return took, verdict.strip(), summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ref_s, ref_verdict, _ = certify(["--target", "reference"], Path(tmp) / "reference")
        print(f"reference: {ref_s:.1f} s  {ref_verdict}", flush=True)
        sdk_s, sdk_verdict, summary = certify(["--target", "sdk", "--option", "serve=true", "--jobs", str(args.jobs)], Path(tmp) / "sdk")
        print(f"sdk (serve=true, --jobs {args.jobs}): {sdk_s:.1f} s  {sdk_verdict}", flush=True)
        if summary:
            print(f"sdk clauses: {summary.get('pass')} pass, {summary.get('fail')} fail, {summary.get('skip')} skip", flush=True)
    print(f"reference_s={ref_s:.1f} sdk_s={sdk_s:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
