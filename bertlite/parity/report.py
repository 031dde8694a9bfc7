"""What parity found: one Row per compared tensor, and the ParityReport that holds them, as JSON or as the
text table `bertlite parity` prints."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from bertlite import __version__


@dataclass
class Row:
    """One compared tensor of a ParityReport."""

    kind: str  # "weight" | "module" | "attention" | "output" | "logits"
    name: str
    max_abs: float
    mean_abs: float
    max_rel: float  # max |ours - ref| / (|ref| + atol)
    allowed: float  # the largest max_abs that passes (fp32: atol + rtol * |ref| at the worst element)
    ok: bool
    reference_error: float | None = None  # transformers' own error in --dtype vs fp32, when that is the bar


@dataclass
class ParityReport:
    """What check() compared and found; to_json() gives the schema docs/parity.md describes."""

    model: str
    options: dict[str, Any]
    head: str | None = None  # the task head whose weights and logits are compared (an architecture name)
    rows: list[Row] = field(default_factory=list)
    only_in_bertlite: list[str] = field(default_factory=list)
    only_in_transformers: list[str] = field(default_factory=list)
    first_divergence: str | None = None
    suggestions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    texts: int = 0
    tokens: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every row passed and both models have the same weights."""
        return all(r.ok for r in self.rows) and not self.only_in_bertlite and not self.only_in_transformers

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict, with "ok" and the library "versions"; non-finite errors are None."""
        out = dataclasses.asdict(self)
        for row in out["rows"]:  # strict JSON has no Infinity/NaN: a non-finite error becomes null
            for key, value in row.items():
                if isinstance(value, float) and not math.isfinite(value):
                    row[key] = None
        out["ok"] = self.ok
        out["versions"] = _versions()
        return out

    def to_json(self) -> str:
        """The report as strict JSON (to_dict())."""
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def format_table(self, all_weights: bool = False) -> str:
        """The report as the text table `bertlite parity` prints.

        Args:
            all_weights: list every weight row; False: only the failing ones.

        Returns:
            The table, with the first divergence, likely causes and the verdict.
        """
        opts = self.options
        reference = opts.get("reference")
        lines = [
            f"bertlite parity: {self.model}" + (f"  (transformers: {reference})" if reference != self.model else ""),
            f"dtype={opts['dtype']} attn={opts['attn']} atol={opts['atol']:g} rtol={opts['rtol']:g}  "
            f"texts={self.texts} tokens={self.tokens}",
        ]
        lines += [f"note: {n}" for n in self.notes]
        weights = [r for r in self.rows if r.kind == "weight"]
        bad = [r for r in weights if not r.ok]
        lines.append(
            f"\nweights: {len(weights)} compared, {len(weights) - len(bad)} equal, "
            f"{len(self.only_in_bertlite)} only in bertlite, {len(self.only_in_transformers)} only in transformers"
            f"  {'PASS' if not bad and not self.only_in_bertlite and not self.only_in_transformers else 'FAIL'}"
        )
        lines += [f"  only in bertlite: {k}" for k in self.only_in_bertlite]
        lines += [f"  only in transformers: {k}" for k in self.only_in_transformers]
        shown = [r for r in self.rows if r.kind != "weight" or all_weights or not r.ok]
        width = max([len(r.name) for r in shown] + [20])
        lines.append(f"\n{'tensor':<{width}}  {'max_abs':>9}  {'mean_abs':>9}  {'max_rel':>9}  {'allowed':>9}  result")
        for r in shown:
            lines.append(
                f"{r.name:<{width}}  {r.max_abs:9.3g}  {r.mean_abs:9.3g}  {r.max_rel:9.3g}  {r.allowed:9.3g}  "
                f"{'PASS' if r.ok else 'FAIL'}"
            )
        lines.append(f"\nfirst divergence: {self.first_divergence or 'none'}")
        lines += [f"likely cause: {s}" for s in self.suggestions]
        failed = sum(not r.ok for r in self.rows)
        verdict = "PARITY HOLDS" if self.ok else "PARITY FAILS"
        lines.append(f"verdict: {verdict} ({len(self.rows)} tensors compared, {failed} failed) in {self.seconds:.1f} s")
        return "\n".join(lines)


def _versions() -> dict[str, str]:
    import transformers

    return {"bertlite": __version__, "transformers": transformers.__version__, "torch": torch.__version__}
