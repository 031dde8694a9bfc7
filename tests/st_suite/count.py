"""The in-scope pass count of sentence-transformers' own tests, by file, under bertlite and under
sentence-transformers' own classes (the reference).

    HF_HUB_OFFLINE=1 .venv/bin/python -m tests.st_suite.count [--only bertlite|reference] [pytest args...]

Each run is a pytest process over tests/st_suite (out-of-scope tests deselected); a strict xfail (a known
failure) counts as not passing, and an xfail that passes counts as passing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODES = {"bertlite": "0", "reference": "1"}


def run(mode: str, pytest_args: list[str]) -> tuple[Counter, Counter]:
    """(in-scope tests, passing tests) by file, for one mode."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        env = {**os.environ, "BERTLITE_ST_SUITE_REFERENCE": MODES[mode]}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
        subprocess.run([*command, "tests/st_suite", *pytest_args], cwd=ROOT, env=env, check=False)
        total, passed = Counter(), Counter()
        for case in ET.parse(report).iter("testcase"):
            module = case.get("classname", "").split("vendor.tests.", 1)[-1]
            name = module.split(".")[0] + "/" + module.split(".")[1] + ".py" if "." in module else module
            outcomes = {child.tag for child in case}
            total[name] += 1
            # A passing strict xfail is reported as a failure whose message says [XPASS(strict)].
            xpass = any("XPASS(strict)" in (child.get("message") or "") for child in case)
            if not outcomes & {"failure", "error", "skipped"} or xpass:
                passed[name] += 1
        return total, passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(MODES), help="run one mode, not both")
    args, pytest_args = parser.parse_known_args()
    results = {mode: run(mode, pytest_args) for mode in MODES if args.only in (None, mode)}
    files = sorted({name for total, _ in results.values() for name in total})
    header = f"{'file':45} {'in scope':>9}" + "".join(f" {mode:>10}" for mode in results)
    print("\n" + header + "\n" + "-" * len(header))
    for name in [*files, "all"]:
        total = next(iter(results.values()))[0]
        count = sum(total.values()) if name == "all" else total[name]
        row = f"{name:45} {count:>9}"
        for _, passed in results.values():
            row += f" {sum(passed.values()) if name == 'all' else passed[name]:>10}"
        print(row)


if __name__ == "__main__":
    main()
