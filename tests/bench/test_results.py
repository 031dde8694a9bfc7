"""bench/results: every result file tracked in git is cited in the docs (bench/results/README.md: "Commit only a
result the docs cite ... and remove it when the docs stop citing it")."""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "CHANGELOG.md", "bench/results/README.md", "docs/*.md"]
# a cited pattern, e.g. bench/results/2026-12-05-epyc-zen4-{01338bc,c72d213}-profile-*.json
PATTERN = re.compile(r"[\w.*{},-]+\.json")


def expand(pattern: str) -> list[str]:
    """A brace pattern's alternatives: "a-{b,c}-*.json" -> ["a-b-*.json", "a-c-*.json"]."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    return [
        name
        for part in match[1].split(",")
        for name in expand(pattern[: match.start()] + part + pattern[match.end() :])
    ]


def cited(name: str, text: str, patterns: list[str]) -> bool:
    """Whether the docs name the file, or a glob of theirs (with braces) matches it."""
    return name in text or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def test_expand_and_cited_read_a_brace_glob_and_an_exact_name():
    patterns = expand("2026-12-05-epyc-zen4-{01338bc,c72d213}-profile-*.json")
    assert patterns == ["2026-12-05-epyc-zen4-01338bc-profile-*.json", "2026-12-05-epyc-zen4-c72d213-profile-*.json"]
    assert cited("2026-12-05-epyc-zen4-c72d213-profile-4.json", "", patterns)
    assert cited("a-peers.json", "see bench/results/a-peers.json", [])
    assert not cited("a-peers.json", "see bench/results/b-peers.json", patterns)


def test_every_tracked_result_file_is_cited_in_the_docs():
    try:
        listed = subprocess.run(
            ["git", "ls-files", "bench/results"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    text = "\n".join(path.read_text(encoding="utf-8") for doc in DOCS for path in sorted(ROOT.glob(doc)))
    patterns = [p for found in PATTERN.findall(text) if "*" in found or "{" in found for p in expand(found)]
    tracked = [Path(path).name for path in listed if path.endswith(".json")]
    uncited = [name for name in tracked if not cited(name, text, patterns)]
    assert not uncited, (
        f"tracked in git but cited in none of {DOCS}: {uncited}; cite each by name, or untrack it "
        "(git rm --cached FILE: results are ignored)"
    )
