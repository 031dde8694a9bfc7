"""Each job's accuracy bar: how close a fast mode's answer must stay to float32's.

float32 is the reference: what transformers and sentence-transformers compute. A fast mode (bfloat16, int8)
changes the last digits; a bar says how many may change before the job's answer does:

| job | compared on | bfloat16 | int8 |
|---|---|---|---|
| embeddings | min cosine of a text's vector to float32's | >= 0.9999 | >= 0.995 |
| scores (rerank, classify) | max difference of the activated scores (a logit's over max(1, abs)) | <= 1e-2 | <= 5e-2 |
|  | and a query's documents keep float32's order, except those within that bar of each other | | |
| sparse (SPLADE) | max abs difference of a weight over the vector's largest weight | <= 2e-2 | <= 5e-2 |
|  | and every weight above that share of the largest is active in both | | |
| multi-vector (ColBERT) | max relative difference of MaxSim (over max(score, query tokens)) | <= 2e-3 | <= 1e-2 |

`dtype="auto"` keeps bfloat16 only where the model meets its job's bar on CALIBRATION_TEXTS with AUTO_MARGIN to
spare (a few texts at load stand for every text after it); the tests hold each mode to the bar on other,
held-out texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Held out from every test and benchmark text: short and long, plain and technical, a few languages.
CALIBRATION_TEXTS = (
    "The cat sat on the mat.",
    "How do I reset my password?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "The committee postponed its decision until the budget figures for the third quarter were audited.",
    "def add(a, b): return a + b",
    "Quarterly revenue rose 12% year over year, driven by subscriptions in Asia and Europe.",
    "What is the capital of Australia?",
    "Canberra is the capital city of Australia, chosen as a compromise between Sydney and Melbourne.",
    "Le train de 8 h 15 pour Lyon partira avec vingt minutes de retard.",
    "Symptoms include fever, a dry cough and fatigue; most patients recover within two weeks.",
    "A B-tree keeps keys sorted and allows searches, insertions and deletions in logarithmic time.",
    "ok",
    "Please find attached the signed contract and the invoice for March.",
    "The mitochondria is the powerhouse of the cell, producing ATP through oxidative phosphorylation.",
    "¿Dónde está la estación de tren más cercana?",
    "In 1969, Apollo 11 landed the first humans on the Moon, and Neil Armstrong stepped onto its surface.",
    "Rust's borrow checker enforces that references never outlive the data they point to.",
    "Mix the flour and butter, add cold water a spoonful at a time, and chill the dough for an hour.",
    "The defendant's appeal was dismissed because it was filed after the statutory deadline had passed.",
    "Neural networks learn representations by adjusting weights to reduce a loss on training examples, and "
    "modern encoders such as BERT are pretrained on large corpora by predicting masked words from their "
    "context before they are fine-tuned for retrieval, classification or question answering.",
    "Wind turbines convert the kinetic energy of moving air into electricity.",
    "Error 404: the page you requested could not be found.",
    "She played the cello in the city orchestra for twenty years before she began to teach.",
)

# How far inside a bar auto's check on CALIBRATION_TEXTS must land: the bar's distance from float32 over this.
AUTO_MARGIN = 1.5
EMBEDDING_MIN_COSINE = {"bfloat16": 0.9999, "int8": 0.995}
SCORE_MAX_DIFFERENCE = {"bfloat16": 1e-2, "int8": 5e-2}
SPARSE_MAX_DIFFERENCE = {"bfloat16": 2e-2, "int8": 5e-2}
MAXSIM_MAX_RELATIVE = {"bfloat16": 2e-3, "int8": 1e-2}


@dataclass(frozen=True)
class Measured:
    """A fast mode's answer held to its job's bar."""

    passed: bool
    summary: str  # one line: the measured value against the bar


def embeddings(reference: np.ndarray, fast: np.ndarray, mode: str, margin: float = 1.0) -> Measured:
    """Hold vectors to the embeddings bar: min cosine to float32's.

    Args:
        reference: (n, d) float32 vectors.
        fast: (n, d) the fast mode's vectors of the same texts.
        mode: "bfloat16" or "int8".
        margin: hold it this many times inside the bar (AUTO_MARGIN for auto's check at load).

    Returns:
        The Measured min cosine.
    """
    a, b = np.asarray(reference, np.float64), np.asarray(fast, np.float64)
    norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
    cosine = float(((a * b).sum(1) / norms).min())
    bar = 1 - (1 - EMBEDDING_MIN_COSINE[mode]) / margin
    return Measured(
        cosine >= bar, f"min cosine to float32 {cosine:.6f} ({_bar('>=', EMBEDDING_MIN_COSINE[mode], margin)})"
    )


def scores(
    reference: np.ndarray, fast: np.ndarray, mode: str, groups: Sequence[Sequence[int]] = (), margin: float = 1.0
) -> Measured:
    """Hold scores to the scores bar: the activated scores close, and each group's (a query's documents') order kept.

    A logit, unbounded, is compared in units of max(1, |float32's|); a probability in absolute terms.

    Args:
        reference: (n,) or (n, labels) float32 scores.
        fast: the fast mode's scores of the same pairs.
        mode: "bfloat16" or "int8".
        margin: hold it this many times inside the bar (AUTO_MARGIN for auto's check at load).
        groups: index lists of the pairs that share a query, whose order must hold.

    Returns:
        The Measured largest difference, and the first order broken, if any.
    """
    a, b = np.asarray(reference, np.float64), np.asarray(fast, np.float64)
    bar = SCORE_MAX_DIFFERENCE[mode] / margin
    difference = float((np.abs(a - b) / np.maximum(1.0, np.abs(a))).max()) if a.size else 0.0
    broken = _broken_order(a, b, bar, groups) if a.ndim == 1 else None
    summary = f"max score difference {difference:.2e} ({_bar('<=', SCORE_MAX_DIFFERENCE[mode], margin)})"
    if broken:
        summary += f"; documents {broken[0]} and {broken[1]} swap places"
    return Measured(difference <= bar and not broken, summary)


def _broken_order(a: np.ndarray, b: np.ndarray, bar: float, groups: Sequence[Sequence[int]]) -> tuple[int, int] | None:
    """The first pair in a group that float32 orders apart by more than `bar` and the fast mode orders the other way."""
    for group in groups:
        for i in group:
            for j in group:
                if a[i] - a[j] > bar and b[i] < b[j]:
                    return i, j
    return None


def sparse(
    reference: Sequence[tuple[np.ndarray, np.ndarray]],
    fast: Sequence[tuple[np.ndarray, np.ndarray]],
    mode: str,
    margin: float = 1.0,
) -> Measured:
    """Hold SPLADE vectors to the sparse bar: weights close to float32's, the same active dimensions above the bar.

    Args:
        reference: per text (indices, values), float32's.
        fast: per text (indices, values), the fast mode's.
        mode: "bfloat16" or "int8".
        margin: hold it this many times inside the bar (AUTO_MARGIN for auto's check at load).

    Returns:
        The Measured largest difference over a vector's largest weight.
    """
    bar = SPARSE_MAX_DIFFERENCE[mode] / margin
    worst, missing = 0.0, None
    for row, ((ref_ids, ref_values), (fast_ids, fast_values)) in enumerate(zip(reference, fast, strict=True)):
        scale = float(np.abs(ref_values).max()) if len(ref_values) else 1.0
        dims = np.union1d(ref_ids, fast_ids)
        a, b = np.zeros(len(dims)), np.zeros(len(dims))
        a[np.searchsorted(dims, ref_ids)] = ref_values
        b[np.searchsorted(dims, fast_ids)] = fast_values
        if len(dims):
            worst = max(worst, float(np.abs(a - b).max()) / max(scale, 1e-30))
        lost = (a > bar * scale) & (b == 0)
        if missing is None and lost.any():
            missing = (row, int(dims[np.argmax(lost)]))
    summary = (
        f"max weight difference {worst:.2e} of the largest weight ({_bar('<=', SPARSE_MAX_DIFFERENCE[mode], margin)})"
    )
    if missing:
        summary += f"; text {missing[0]} loses dimension {missing[1]}"
    return Measured(worst <= bar and missing is None, summary)


def maxsim(reference: Sequence[np.ndarray], fast: Sequence[np.ndarray], mode: str, margin: float = 1.0) -> Measured:
    """Hold multi-vectors to the MaxSim bar: every text's MaxSim score against every other close to float32's,
    relative to the score, or to the query's token count where that is larger.

    Args:
        reference: per text a (tokens, dim) float32 array.
        fast: per text the fast mode's array, the same shape.
        mode: "bfloat16" or "int8".
        margin: hold it this many times inside the bar (AUTO_MARGIN for auto's check at load).

    Returns:
        The Measured largest relative difference.
    """
    bar = MAXSIM_MAX_RELATIVE[mode] / margin
    worst = 0.0
    for q in range(len(reference)):
        # A score near 0 (tokens that point every way) is held in units of the query's tokens, the largest a score
        # of unit vectors can be, so the bar does not divide by almost nothing.
        unit = max(1.0, float(len(reference[q])))
        for d in range(len(reference)):
            a = _maxsim(reference[q], reference[d])
            b = _maxsim(fast[q], fast[d])
            worst = max(worst, abs(a - b) / max(abs(a), unit))
    summary = f"max MaxSim relative difference {worst:.2e} ({_bar('<=', MAXSIM_MAX_RELATIVE[mode], margin)})"
    return Measured(worst <= bar, summary)


def _maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """ColBERT's late interaction: each query vector's best dot product with the document's, summed."""
    if not len(query) or not len(document):
        return 0.0
    return float((np.asarray(query, np.float64) @ np.asarray(document, np.float64).T).max(1).sum())


def _bar(sign: str, bar: float, margin: float) -> str:
    """The bar in words, with the margin it was held to."""
    return f"bar {sign} {bar}" if margin == 1.0 else f"bar {sign} {bar} with a {margin}x margin"


def calibration_pairs() -> tuple[list[tuple[str, str]], list[list[int]]]:
    """Pairs for a scoring job's bar: each of the first texts as a query against the others.

    Returns:
        (pairs, groups): the (query, document) pairs, and the pair indices of each query.
    """
    texts = CALIBRATION_TEXTS
    pairs, groups = [], []
    for q in range(4):
        groups.append(list(range(len(pairs), len(pairs) + len(texts) - 1)))
        pairs += [(texts[q], texts[d]) for d in range(len(texts)) if d != q]
    return pairs, groups
