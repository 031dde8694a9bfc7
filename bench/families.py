"""The throughput job's families: each family of bertlite.config.FAMILIES (RoBERTa, XLM-RoBERTa, ELECTRA, ...)
as a random checkpoint built here, timed as bertlite, transformers sdpa (length-sorted) and sentence-transformers.

No family checkpoint ships with the repository and the bench runs offline, so each one is a transformers model
of the family with random weights, at a chosen shape, saved by sentence-transformers (mean pooling, L2
normalized) with all-MiniLM-L6-v2's WordPiece tokenizer: every engine reads the same tokens, and the time is
the family's model. Random weights run at the speed of trained ones.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from bench.common import default_model_path
from bench.harness import bench_throughput
from bench.runners import MAX_LENGTH
from bench.runners.bertlite import bertlite_runner

# The configs each family runs (bench.configs.CONFIGS): bertlite against what its users run now; transformers
# with sdpa, or eager for a family its sdpa does not run (family_configs).
FAMILY_CONFIGS = ["bertlite_fp32", "hf_sdpa_fp32_sorted", "sentence_transformers_fp32"]
# Layer shapes: all-MiniLM-L6-v2's, so the numbers sit beside the default table's, and a tiny one for smoke runs.
SHAPES: dict[str, dict[str, int]] = {
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37),
}
VOCAB_SIZE = 30522  # the WordPiece tokenizer's
# What a family's config takes beyond the shape: ELECTRA's embeddings are narrower than its layers, as in ELECTRA-small.
FAMILY_OVERRIDES: dict[str, dict[str, Any]] = {
    "electra": {"embedding_size": 128},
    # ModernBERT's special tokens are those of its own 50,368-entry vocabulary: here the WordPiece one's.
    "modernbert": dict(pad_token_id=0, bos_token_id=101, cls_token_id=101, eos_token_id=102, sep_token_id=102),
    # EuroBERT's are those of its 128,256-entry vocabulary: here the WordPiece one's.
    "eurobert": dict(pad_token_id=0, bos_token_id=101, eos_token_id=102, mask_token_id=103),
    # DeBERTa-v3's disentangled attention, as its checkpoints set it (transformers' default DeBERTa-v2 config has
    # no relative positions).
    "deberta-v2": dict(
        relative_attention=True,
        position_buckets=256,
        max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"],
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        position_biased_input=False,
        type_vocab_size=0,
    ),
}
# Families whose models take no token_type_ids: their tokenizer gives none, as their own tokenizers do.
NO_TOKEN_TYPES = ("distilbert", "mpnet")
# Families transformers has no module for (their checkpoints run remote code): bertlite alone runs, its vectors
# compared with bertlite's eager fp32.
NO_TRANSFORMERS_MODULE = ("jina_bert",)


def family_names() -> list[str]:
    """The families bertlite has beside BERT, in FAMILIES' order."""
    from bertlite.config import FAMILIES

    return [model_type for model_type in FAMILIES if model_type != "bert"]


def parse_families(spec: str) -> list[str]:
    """Family names from a comma-separated list, or "all" for every family beside BERT.

    Args:
        spec: e.g. "roberta,electra", "all", or "" for none.

    Returns:
        The names, each once.

    Raises:
        ValueError: a name that is not a family bertlite has.
    """
    known = family_names()
    names = list(dict.fromkeys(n for part in spec.split(",") if part for n in (known if part == "all" else [part])))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown families {unknown}; choose from {', '.join(known)} or all")
    return names


def family_configs(model_type: str) -> list[str]:
    """FAMILY_CONFIGS for a family: transformers' length-sorted run with eager attention where its model class
    has no sdpa (MPNet's), as its users run it.

    Args:
        model_type: a family's model_type.

    Returns:
        The config names.
    """
    import transformers

    from bertlite.config import FAMILIES

    if model_type in NO_TRANSFORMERS_MODULE:
        return FAMILY_CONFIGS[:1]
    if getattr(transformers, FAMILIES[model_type].prefix + "Model")._supports_sdpa:
        return FAMILY_CONFIGS
    return [name.replace("hf_sdpa_", "hf_eager_") for name in FAMILY_CONFIGS]


def build_family_folder(model_type: str, folder: Path, shape: str, seed: int = 0) -> Path:
    """A random transformers model of the family, saved as a sentence-transformers folder (mean pooling, L2
    normalized) with all-MiniLM-L6-v2's tokenizer.

    Args:
        model_type: a family's model_type ("roberta", "electra", ...).
        folder: where to write it (created).
        shape: a key of SHAPES.
        seed: the random weights' seed.

    Returns:
        The sentence-transformers folder (folder / "st").
    """
    import transformers
    from sentence_transformers import SentenceTransformer, models

    from bertlite.config import CONFIG_CLASSES

    values = {**SHAPES[shape], **FAMILY_OVERRIDES.get(model_type, {}), "vocab_size": VOCAB_SIZE}
    names = getattr(CONFIG_CLASSES[model_type], "attribute_map", {})  # DistilBERT's dim, hidden_dim, ...
    values = {names.get(key, key): value for key, value in values.items()}
    torch.manual_seed(seed)
    if model_type in NO_TRANSFORMERS_MODULE:
        import bertlite

        config = CONFIG_CLASSES[model_type](**values)
        model = bertlite.AutoModel.from_config(config)
    else:
        config = transformers.AutoConfig.for_model(model_type, **values)
        model = transformers.AutoModel.from_config(config)
    base = folder / "model"
    model.save_pretrained(base)
    tokenizer = Path(default_model_path())
    for name in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(tokenizer / name, base / name)
    settings = json.loads((tokenizer / "tokenizer_config.json").read_text(encoding="utf-8"))
    if model_type in NO_TOKEN_TYPES:
        settings["model_input_names"] = ["input_ids", "attention_mask"]
    (base / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    if model_type in NO_TRANSFORMERS_MODULE:
        return write_st_folder(base, folder / "st", config.hidden_size)
    transformer = models.Transformer(str(base), max_seq_length=MAX_LENGTH)
    pooling = models.Pooling(config.hidden_size, "mean")
    st = SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu")
    st.save(str(folder / "st"))
    return folder / "st"


def write_st_folder(base: Path, folder: Path, hidden_size: int) -> Path:
    """The sentence-transformers folder build_family_folder's save writes (Transformer, mean Pooling, Normalize),
    written by hand for a model sentence-transformers cannot load without its remote code.

    Args:
        base: the model's folder (config.json, weights, tokenizer).
        folder: the sentence-transformers folder to write (created).
        hidden_size: the vectors' width.

    Returns:
        folder.
    """
    shutil.copytree(base, folder)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": hidden_size, "pooling_mode_mean_tokens": True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling), encoding="utf-8")
    (folder / "2_Normalize").mkdir()
    settings = {"max_seq_length": MAX_LENGTH, "do_lower_case": False}
    (folder / "sentence_bert_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return folder


def bench_families(
    families: list[str], texts: list[str], rounds: int, shape: str, pause_s: float, peaks: dict[str, float]
) -> dict[str, Any]:
    """bench_throughput's FAMILY_CONFIGS on each family's random checkpoint.

    Args:
        families: model_type values (parse_families).
        texts: the texts every config embeds in each round.
        rounds: timed rounds.
        shape: a key of SHAPES.
        pause_s: seconds idle before each timed run.
        peaks: the GEMM peaks the main table measured (bench.flops.gemm_peak), by dtype.

    Returns:
        {"shape", "families": {model_type: bench_throughput's result (of family_configs) without its vectors}}.
    """
    results = {}
    for model_type in families:
        print(f"  family {model_type}: building a random {shape}-shaped checkpoint", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix=f"bench-{model_type}-") as tmp:
            folder = build_family_folder(model_type, Path(tmp), shape)
            reference = None
            if model_type in NO_TRANSFORMERS_MODULE:
                reference = bertlite_runner(str(folder), "float32", attn_implementation="eager")
            configs = family_configs(model_type)
            result = bench_throughput(str(folder), texts, configs, rounds, pause_s, peaks=peaks, reference=reference)
        result.pop("vectors")
        results[model_type] = result
    return {"shape": SHAPES[shape], "families": results}


def format_families(result: dict[str, Any]) -> str:
    """The families' table: one line per family and config.

    Args:
        result: bench_families()'s result.

    Returns:
        The table.
    """
    shape = result["shape"]
    lines = [
        f"Families: random checkpoints, hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers; "
        "x hf: texts/s over transformers length-sorted (sdpa, or eager where it has none); min cos: to transformers "
        "eager fp32",
        f"{'family':<20}{'config':<30}{'texts/s':>9}{'x hf':>8}{'min cos':>10}",
    ]
    for model_type, family in result["families"].items():
        configs = family["configs"]
        base = next((r["texts_per_s"] for name, r in configs.items() if name.startswith("hf_")), None)
        for name, r in configs.items():
            ratio = f"{r['texts_per_s'] / base:.2f}x" if base else "-"
            lines.append(
                f"{model_type:<20}{name:<30}{r['texts_per_s']:>9.1f}{ratio:>8}{r['min_cosine_vs_hf_eager_fp32']:>10.6f}"
            )
        lines += [f"{model_type:<20}skipped {name}: {why}" for name, why in family["skipped"].items()]
        if model_type in NO_TRANSFORMERS_MODULE:
            lines.append(f"{model_type:<20}no transformers module: bertlite alone, min cos to bertlite eager fp32")
    return "\n".join(lines)
