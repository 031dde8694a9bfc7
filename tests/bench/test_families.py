"""python -m bench throughput --families: each family's random checkpoint, timed as bertlite, transformers and
sentence-transformers, whose vectors agree with transformers eager fp32."""

from __future__ import annotations

import pytest

from bench import families
from bench.common import read_corpus


def test_a_family_transformers_runs_without_sdpa_is_timed_with_eager() -> None:
    # transformers' MPNetModel has no sdpa
    assert families.family_configs("mpnet") == ["bertlite_fp32", "hf_eager_fp32_sorted", "sentence_transformers_fp32"]
    assert families.family_configs("electra") == families.FAMILY_CONFIGS


def test_families_parse_by_name_and_all() -> None:
    assert families.parse_families("electra,roberta,electra") == ["electra", "roberta"]
    assert {"roberta", "xlm-roberta", "camembert", "electra"} <= set(families.parse_families("all"))
    assert "bert" not in families.parse_families("all")
    assert families.parse_families("") == []
    with pytest.raises(ValueError, match=r"unknown families \['gpt2'\]"):
        families.parse_families("gpt2")


@pytest.mark.slow  # a benchmark run, if a short one
def test_each_family_runs_its_three_configs_on_its_own_checkpoint() -> None:
    texts = read_corpus(6)
    names = ["electra", "roberta", "modernbert"]  # modernbert: its special tokens moved into the WordPiece vocabulary
    result = families.bench_families(names, texts, 1, "tiny", 0.0, {"fp32": 1.0, "bf16": 1.0})
    for model_type in names:
        family = result["families"][model_type]
        assert family["texts"] == len(texts) and family["skipped"] == {}
        assert list(family["configs"]) == families.family_configs(model_type) == families.FAMILY_CONFIGS
        for r in family["configs"].values():  # against transformers eager fp32 on the same folder, in this run
            assert r["min_cosine_vs_hf_eager_fp32"] >= 0.9999
    table = families.format_families(result).splitlines()
    assert table[0].startswith("Families: random checkpoints, hidden 32, 2 layers")
    assert sum(line.startswith("electra ") for line in table) == 3


@pytest.mark.slow  # a benchmark run, if a short one
def test_a_family_without_a_transformers_module_runs_bertlite_alone() -> None:
    """JinaBERT-v2 runs remote code under transformers: bertlite's row only, compared with bertlite eager fp32."""
    assert families.family_configs("jina_bert") == ["bertlite_fp32"]
    result = families.bench_families(["jina_bert"], read_corpus(6), 1, "tiny", 0.0, {"fp32": 1.0, "bf16": 1.0})
    family = result["families"]["jina_bert"]
    assert list(family["configs"]) == ["bertlite_fp32"] and family["skipped"] == {}
    assert family["configs"]["bertlite_fp32"]["min_cosine_vs_hf_eager_fp32"] >= 0.9999
    assert "jina_bert           no transformers module" in families.format_families(result)
