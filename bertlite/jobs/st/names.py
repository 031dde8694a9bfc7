"""The names sentence-transformers 6 loads by: a bare model name under a class's hub organization
(resolve_model_name), and transformers' original checkpoints that stay bare. No sentence-transformers import.
"""

from __future__ import annotations

import os

__all__ = [
    "CROSS_ENCODER_ORGANIZATION",
    "ORIGINAL_TRANSFORMER_MODELS",
    "SENTENCE_TRANSFORMERS_ORGANIZATION",
    "SPARSE_ENCODER_ORGANIZATION",
    "resolve_model_name",
]

# The hub organization a bare name is looked up in, per class: each class's
# default_huggingface_organization (sentence-transformers'; its MultiVectorEncoder has none).
SENTENCE_TRANSFORMERS_ORGANIZATION = "sentence-transformers"
CROSS_ENCODER_ORGANIZATION = "cross-encoder"
SPARSE_ENCODER_ORGANIZATION = "sparse-encoder"

# Bare names that are transformers' own original checkpoints, never prefixed with an organization
# (sentence_transformers.util.misc.ORIGINAL_TRANSFORMER_MODELS).
ORIGINAL_TRANSFORMER_MODELS = frozenset(
    {
        "albert-base-v1",
        "albert-base-v2",
        "albert-large-v1",
        "albert-large-v2",
        "albert-xlarge-v1",
        "albert-xlarge-v2",
        "albert-xxlarge-v1",
        "albert-xxlarge-v2",
        "bert-base-cased-finetuned-mrpc",
        "bert-base-cased",
        "bert-base-chinese",
        "bert-base-german-cased",
        "bert-base-german-dbmdz-cased",
        "bert-base-german-dbmdz-uncased",
        "bert-base-multilingual-cased",
        "bert-base-multilingual-uncased",
        "bert-base-uncased",
        "bert-large-cased-whole-word-masking-finetuned-squad",
        "bert-large-cased-whole-word-masking",
        "bert-large-cased",
        "bert-large-uncased-whole-word-masking-finetuned-squad",
        "bert-large-uncased-whole-word-masking",
        "bert-large-uncased",
        "camembert-base",
        "ctrl",
        "distilbert-base-cased-distilled-squad",
        "distilbert-base-cased",
        "distilbert-base-german-cased",
        "distilbert-base-multilingual-cased",
        "distilbert-base-uncased-distilled-squad",
        "distilbert-base-uncased-finetuned-sst-2-english",
        "distilbert-base-uncased",
        "distilgpt2",
        "distilroberta-base",
        "gpt2-large",
        "gpt2-medium",
        "gpt2-xl",
        "gpt2",
        "openai-gpt",
        "roberta-base-openai-detector",
        "roberta-base",
        "roberta-large-mnli",
        "roberta-large-openai-detector",
        "roberta-large",
        "t5-11b",
        "t5-3b",
        "t5-base",
        "t5-large",
        "t5-small",
        "transfo-xl-wt103",
        "xlm-clm-ende-1024",
        "xlm-clm-enfr-1024",
        "xlm-mlm-100-1280",
        "xlm-mlm-17-1280",
        "xlm-mlm-en-2048",
        "xlm-mlm-ende-1024",
        "xlm-mlm-enfr-1024",
        "xlm-mlm-enro-1024",
        "xlm-mlm-tlm-xnli15-1024",
        "xlm-mlm-xnli15-1024",
        "xlm-roberta-base",
        "xlm-roberta-large-finetuned-conll02-dutch",
        "xlm-roberta-large-finetuned-conll02-spanish",
        "xlm-roberta-large-finetuned-conll03-english",
        "xlm-roberta-large-finetuned-conll03-german",
        "xlm-roberta-large",
        "xlnet-base-cased",
        "xlnet-large-cased",
    }
)


def resolve_model_name(
    name_or_path: str | os.PathLike, organization: str | None = SENTENCE_TRANSFORMERS_ORGANIZATION
) -> str:
    """The folder or hub id sentence-transformers 6 loads for `name_or_path`.

    A local folder is itself. Otherwise it is a hub id, and a bare name (no "/") that is not one of
    transformers' original checkpoints is looked up in `organization`: "all-MiniLM-L6-v2" ->
    "sentence-transformers/all-MiniLM-L6-v2".

    Args:
        name_or_path: a local folder, a hub id, or a bare model name.
        organization: the organization of bare names (SENTENCE_TRANSFORMERS_ORGANIZATION,
            CROSS_ENCODER_ORGANIZATION, SPARSE_ENCODER_ORGANIZATION); None: bare names stay bare.

    Returns:
        The folder or hub id, as a str.

    Raises:
        NotADirectoryError: `name_or_path` is a file (sentence-transformers' error).
        FileNotFoundError: a path (more than one "/") that does not exist (sentence-transformers' error).
    """
    name = os.fspath(name_or_path)
    if os.path.isdir(name):
        return name
    if os.path.isfile(name):
        raise NotADirectoryError(
            f"Path {name} is a file, not a directory. `model_name_or_path` must be a local directory "
            "containing a model, or a Hugging Face Hub model ID."
        )
    if (os.sep == "\\" and "\\" in name) or name.count("/") > 1:
        raise FileNotFoundError(f"Path {name} not found")
    if organization is not None and "/" not in name and name.lower() not in ORIGINAL_TRANSFORMER_MODELS:
        return f"{organization}/{name}"
    return name
