"""The `tokenizers` side of bertlite's tokenizer: the files, the backend and its pipeline.

Loading a checkpoint's tokenizers.Tokenizer (load_tokenizer, which bertlite's jobs call directly), the BERT
normalizer / pre-tokenizer / decoder / template, the settings tokenizer_config.json holds, and the padding
and truncation a call configures on the backend. bertlite.tokenization.tokenizer wraps it in transformers'
surface (BertTokenizer). No torch import.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from tokenizers import AddedToken, Encoding, Tokenizer, decoders, normalizers, pre_tokenizers, processors

from bertlite.config import FAMILIES, read_json_object
from bertlite.config.families import family_model_type
from bertlite.errors import CheckpointError
from bertlite.hub import resolve_file
from bertlite.utils.files import write_temporaries
from bertlite.utils.warn import warn_user

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
VOCAB_FILE = "vocab.txt"
# transformers' "no limit" for model_max_length, and the bound above which a length counts as none.
VERY_LARGE_INTEGER = int(1e30)
LARGE_INTEGER = int(1e20)
BERT_DEFAULTS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}
# tokenizer_class values that mean the BERT pipeline (BERT's, and the families whose tokenizer is transformers'
# BertTokenizer under another name: ELECTRA's); a plain fast tokenizer runs its tokenizer.json as it is.
BERT_TOKENIZER_CLASSES = ("BertTokenizer", "BertTokenizerFast") + tuple(
    name for family in FAMILIES.values() if family.bert_tokenizer for name in family.tokenizer_classes
)
# The other families' (config.FAMILIES): their tokenizer.json holds the whole pipeline (SentencePiece or byte-level
# BPE, the template), which is run as it is.
FAMILY_TOKENIZER_CLASSES = tuple(
    name for family in FAMILIES.values() if not family.bert_tokenizer for name in family.tokenizer_classes
)
PLAIN_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend", *FAMILY_TOKENIZER_CLASSES)
# The families whose model takes no token_type_ids (DistilBERT): their tokenizers return none, as transformers'.
NO_TOKEN_TYPES_CLASSES = tuple(name for f in FAMILIES.values() if not f.token_types for name in f.tokenizer_classes)
NO_TOKEN_TYPES_INPUTS = ["input_ids", "attention_mask"]
# Plain tokenizers (their whole pipeline in tokenizer.json) that return token_type_ids, as transformers' DeBERTa-v2's.
TOKEN_TYPES_PLAIN_CLASSES = ("DebertaV2Tokenizer", "DebertaV2TokenizerFast")
TOKEN_TYPES_INPUTS = ["input_ids", "token_type_ids", "attention_mask"]
PADDING = {True: "longest", False: None, "longest": "longest", "max_length": "max_length", "do_not_pad": None}
TRUNCATION = ("longest_first", "only_first", "only_second", "do_not_truncate")
# from_pretrained keywords that change the tokenizer (tokenizer_config.json keys), as transformers takes them.
INIT_KEYS = (
    "do_lower_case",
    "strip_accents",
    "tokenize_chinese_chars",
    "model_max_length",
    "clean_up_tokenization_spaces",
    "padding_side",
    "truncation_side",
    "model_input_names",
    *BERT_DEFAULTS,
)
# Tokenizers that are BERT's WordPiece with RoBERTa's template (<s> A </s></s> B </s>, one token type): what
# transformers builds from vocab.txt alone for them (MPNet's), where a folder has no tokenizer.json.
ROBERTA_TEMPLATE_CLASSES = ("MPNetTokenizer", "MPNetTokenizerFast")
# Accepted for compatibility, with nothing to choose: bertlite has only the fast tokenizer and no remote code.


def load_tokenizer(name_or_path: str | os.PathLike, **hub_kwargs: Any) -> Tokenizer:
    """Load the `tokenizers` backend of a checkpoint.

    Padding and truncation stored in the file are switched off: the packaged
    all-MiniLM-L6-v2 pads everything to 128, and Embedder pads per batch.

    Args:
        name_or_path: a local folder or a hub id.
        **hub_kwargs: hub options of bertlite.hub.resolve_file (revision, cache_dir, ...).

    Returns:
        The Tokenizer from tokenizer.json when present, else from vocab.txt + tokenizer_config.json
        (old checkpoints).

    Raises:
        FileNotFoundError: neither tokenizer.json nor vocab.txt.
        CheckpointError: tokenizer.json or vocab.txt is there but cannot be read as one (truncated,
            not JSON, binary, without the special tokens, a folder), naming the file.
    """
    path = _tokenizer_file(name_or_path, TOKENIZER_FILE, hub_kwargs)
    if path is not None:
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception for any file it cannot parse
            raise CheckpointError(f"{path}: not a valid {TOKENIZER_FILE} ({e}); download or save it again") from e
    else:
        vocab = _tokenizer_file(name_or_path, VOCAB_FILE, hub_kwargs)
        if vocab is None:
            raise FileNotFoundError(f"{name_or_path}: no tokenizer.json or vocab.txt")
        config = read_json_file(str(name_or_path), TOKENIZER_CONFIG_FILE, hub_kwargs)
        try:
            tokenizer = _wordpiece_from_vocab(vocab, config)
        except Exception as e:  # a bare Exception (bad UTF-8) or TypeError (a special token missing)
            raise CheckpointError(
                f"{vocab}: not a valid {VOCAB_FILE} ({e}); it must be UTF-8 text, one token a line, "
                "with the special tokens ([CLS], [SEP], [UNK], ...)"
            ) from e
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _tokenizer_file(name_or_path: str | os.PathLike, filename: str, hub_kwargs: dict[str, Any]) -> Path | None:
    """resolve_file(), except that a folder (or other non-file) under the file's name is an error, not absent."""
    name = os.fspath(name_or_path)
    local = Path(name, hub_kwargs.get("subfolder") or "", filename)
    if os.path.isdir(name) and local.exists() and not local.is_file():
        raise CheckpointError(f"{local}: not a file (a folder?); the tokenizer needs {filename} to be a file")
    return resolve_file(name_or_path, filename, **hub_kwargs)


def _wordpiece_from_vocab(vocab: Path, config: dict[str, Any]) -> Tokenizer:
    # The pipeline transformers' BertTokenizer builds from the same two files.
    from tokenizers.implementations import BertWordPieceTokenizer

    lowercase = config.get("do_lower_case", True)
    wrapper = BertWordPieceTokenizer(
        str(vocab),
        unk_token=config.get("unk_token", "[UNK]"),
        sep_token=config.get("sep_token", "[SEP]"),
        cls_token=config.get("cls_token", "[CLS]"),
        pad_token=config.get("pad_token", "[PAD]"),
        mask_token=config.get("mask_token", "[MASK]"),
        clean_text=True,
        handle_chinese_chars=config.get("tokenize_chinese_chars", True),
        strip_accents=config.get("strip_accents"),
        lowercase=lowercase,
    )
    tokenizer = wrapper._tokenizer
    if config.get("tokenizer_class") in ROBERTA_TEMPLATE_CLASSES:
        cls, sep = (
            token_content(config.get(key, default)) for key, default in (("cls_token", "<s>"), ("sep_token", "</s>"))
        )
        tokenizer.post_processor = processors.RobertaProcessing(
            (sep, tokenizer.token_to_id(sep)),
            (cls, tokenizer.token_to_id(cls)),
            trim_offsets=True,
            add_prefix_space=False,
        )
    return tokenizer


def read_settings(
    name: str, overrides: dict[str, Any], hub_kwargs: dict[str, Any]
) -> tuple[Tokenizer, dict[str, Any], bool]:
    """What from_pretrained builds a tokenizer from: the backend and tokenizer_config.json's settings.

    Args:
        name: a local folder or a hub id.
        overrides: from_pretrained's keywords; those of INIT_KEYS replace the file's values.
        hub_kwargs: the hub options (revision, cache_dir, ...).

    Returns:
        (the backend, the constructor's keywords, whether the BERT pipeline is rebuilt on it).

    Raises:
        ValueError: a tokenizer_class (or model_type) that is not BERT's.
        FileNotFoundError: neither tokenizer.json nor vocab.txt.
    """
    config = read_json_file(name, TOKENIZER_CONFIG_FILE, hub_kwargs)
    special_map = read_json_file(name, SPECIAL_TOKENS_MAP_FILE, hub_kwargs)
    tokenizer_class = config.get("tokenizer_class")
    family = None
    if tokenizer_class is None:
        family = FAMILIES[check_model_type(name, hub_kwargs)]
        tokenizer_class = None if family.bert_tokenizer else "TokenizersBackend"
    elif tokenizer_class not in BERT_TOKENIZER_CLASSES + PLAIN_TOKENIZER_CLASSES:
        raise ValueError(
            f"{name}: {TOKENIZER_CONFIG_FILE} has tokenizer_class={tokenizer_class!r}, which is not a BERT "
            f"tokenizer (bertlite reads {', '.join(BERT_TOKENIZER_CLASSES + PLAIN_TOKENIZER_CLASSES)})"
        )
    try:
        backend = load_tokenizer(name, **hub_kwargs)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e}: not a tokenizer folder or repo") from e
    init: dict[str, Any] = {}
    for key in INIT_KEYS:
        value = special_map.get(key) if key in BERT_DEFAULTS else None
        value = config.get(key, value)
        if key in overrides:
            value = overrides[key]
        if value is not None:
            init[key] = token_content(value) if key in BERT_DEFAULTS else value
    for key in ("bos_token", "eos_token"):
        value = config.get(key, special_map.get(key))
        if value is not None:
            init[key] = token_content(value)
    extra = config.get("extra_special_tokens", config.get("additional_special_tokens"))
    extra = special_map.get("additional_special_tokens") if extra is None else extra
    if isinstance(extra, list) and extra:
        init["extra_special_tokens"] = [token_content(token) for token in extra]
    init.setdefault("model_max_length", VERY_LARGE_INTEGER)
    if tokenizer_class in NO_TOKEN_TYPES_CLASSES or family is not None and not family.token_types:
        init.setdefault("model_input_names", NO_TOKEN_TYPES_INPUTS)
    elif tokenizer_class in TOKEN_TYPES_PLAIN_CLASSES:
        init.setdefault("model_input_names", TOKEN_TYPES_INPUTS)
    return backend, init, tokenizer_class not in PLAIN_TOKENIZER_CLASSES


def set_bert_pipeline(
    tokenizer: Tokenizer,
    *,
    do_lower_case: bool,
    strip_accents: bool | None,
    tokenize_chinese_chars: bool,
    cls: tuple[str, int],
    sep: tuple[str, int],
) -> None:
    """Give `tokenizer` the pipeline transformers' BertTokenizer builds: BertNormalizer, BertPreTokenizer,
    the WordPiece decoder and the [CLS] A [SEP] B [SEP] template.

    Args:
        tokenizer: the backend, changed in place.
        do_lower_case, strip_accents, tokenize_chinese_chars: the normalizer's settings, as BertTokenizer takes them.
        cls: the [CLS] token and its id.
        sep: the [SEP] token and its id.
    """
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=tokenize_chinese_chars,
        strip_accents=strip_accents,
        lowercase=do_lower_case,
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    cls_token, sep_token = cls[0], sep[0]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls_token}:0 $A:0 {sep_token}:0",
        pair=f"{cls_token}:0 $A:0 {sep_token}:0 $B:1 {sep_token}:1",
        special_tokens=[cls, sep],
    )


class Strategies(NamedTuple):
    """A call's padding and truncation, resolved (resolve_strategies); None = off."""

    padding: str | None  # "longest" or "max_length"
    truncation: str | None  # "longest_first", "only_first" or "only_second"
    max_length: int | None


def resolve_strategies(
    padding: bool | str,
    truncation: bool | str | None,
    max_length: int | None,
    pad_to_multiple_of: int | None,
    verbose: bool,
    model_max_length: int,
    pad_token_id: int | None,
) -> Strategies:
    """transformers' _get_padding_truncation_strategies: a call's padding and truncation arguments resolved.

    Args:
        padding, truncation, max_length, pad_to_multiple_of, verbose: as the tokenizer's __call__ takes them.
        model_max_length: the tokenizer's; where max_length is None it is the length, or no limit above
            LARGE_INTEGER.
        pad_token_id: the tokenizer's; None refuses padding.

    Returns:
        Strategies(padding, truncation, max_length); None = off.

    Raises:
        ValueError: an unknown padding or truncation, a max_length that is not an integer, padding without
            a pad token, or a truncation length that is not a multiple of pad_to_multiple_of.
    """
    _check_strategy_arguments(padding, truncation, max_length)
    if max_length is not None and padding is False and truncation is None:
        truncation = "longest_first"  # transformers: max_length alone truncates
    if padding is True and verbose and max_length is not None and truncation in (None, False, "do_not_truncate"):
        warn_user(
            "`max_length` is ignored when `padding`=`True` and there is no truncation strategy. "
            "To pad to max length, use `padding='max_length'`."
        )
    padding_strategy = PADDING[padding]
    truncation_strategy = {True: "longest_first", False: None, None: None}.get(truncation, truncation)
    truncation_strategy = None if truncation_strategy == "do_not_truncate" else truncation_strategy
    if max_length is None:
        unlimited = model_max_length > LARGE_INTEGER
        if padding_strategy == "max_length":
            padding_strategy, max_length = (None, None) if unlimited else ("max_length", model_max_length)
        if truncation_strategy is not None:
            truncation_strategy, max_length = (None, None) if unlimited else (truncation_strategy, model_max_length)
    if padding_strategy is not None and pad_token_id is None:
        raise ValueError(f"padding={padding!r} needs a pad token, and this tokenizer has none (pad_token=None)")
    if (
        truncation_strategy is not None
        and padding_strategy is not None
        and pad_to_multiple_of is not None
        and max_length is not None
        and max_length % pad_to_multiple_of != 0
    ):
        raise ValueError(
            f"truncation length ({max_length}) is not a multiple of pad_to_multiple_of ({pad_to_multiple_of}); "
            "change one of them"
        )
    return Strategies(padding_strategy, truncation_strategy, max_length)


def _check_strategy_arguments(padding: bool | str, truncation: bool | str | None, max_length: int | None) -> None:
    """Refuse a padding, truncation or max_length that resolve_strategies does not know (see its Raises)."""
    if padding not in PADDING:
        raise ValueError(f"padding={padding!r} is not one of True, False, 'longest', 'max_length', 'do_not_pad'")
    if truncation not in (None, True, False, *TRUNCATION):
        raise ValueError(
            f"truncation={truncation!r} is not one of True, False, {', '.join(repr(t) for t in TRUNCATION)}"
        )
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)):
        raise ValueError(f"max_length must be an integer, got {max_length!r}")


def pad_lists(
    inputs: dict[str, Any],
    strategy: str | None,
    max_length: int | None,
    pad_to_multiple_of: int | None,
    side: str,
    fill: dict[str, Any],
    return_attention_mask: bool,
) -> dict[str, Any]:
    """Pad encoded inputs held as lists, as transformers' pad() does (the tokenizer's pad() resolves the arguments).

    Args:
        inputs: input_ids and the other keys, each one row's list or a list of rows.
        strategy: "longest", "max_length" or None (no padding), from resolve_strategies.
        max_length: the length for "max_length".
        pad_to_multiple_of: round the padded length up to a multiple of this.
        side: "right" or "left".
        fill: the pad value of each key padded (input_ids: pad_token_id, ...); other keys pass through.
        return_attention_mask: add an attention_mask of ones to rows that lack one, before padding.

    Returns:
        The padded lists, batched as `inputs` is.
    """
    ids = inputs["input_ids"]
    batched = bool(ids) and isinstance(ids[0], list)
    rows = [{key: value[i] for key, value in inputs.items()} for i in range(len(ids))] if batched else [inputs]
    if strategy == "longest":
        max_length = max((len(row["input_ids"]) for row in rows), default=0)
    if strategy is not None and max_length is not None and pad_to_multiple_of and max_length % pad_to_multiple_of:
        max_length = (max_length // pad_to_multiple_of + 1) * pad_to_multiple_of
    out: dict[str, list] = {}
    for row in rows:
        if return_attention_mask and "attention_mask" not in row:
            row["attention_mask"] = [1] * len(row["input_ids"])
        missing = max_length - len(row["input_ids"]) if strategy is not None and max_length else 0
        for key, value in row.items():
            if key in fill and missing > 0:
                pad = [fill[key]] * missing
                value = value + pad if side == "right" else pad + value
            out.setdefault(key, []).append(value)
    return out if batched else {key: value[0] for key, value in out.items()}


# What a call returns per row, by key, read from the row's Encoding (in the order transformers gives them).
ROW_FIELDS: dict[str, Callable[[Encoding], Any]] = {
    "input_ids": lambda e: e.ids,
    "token_type_ids": lambda e: e.type_ids,
    "attention_mask": lambda e: e.attention_mask,
    "special_tokens_mask": lambda e: e.special_tokens_mask,
    "offset_mapping": lambda e: e.offsets,
    "length": lambda e: len(e.ids),
}


def encoding_rows(
    encodings: list[Encoding], keys: list[str], overflowing: bool
) -> tuple[list[Encoding], dict[str, list]]:
    """The rows of a call and the lists of `keys` over them.

    Args:
        encodings: the backend's Encodings, one per input.
        keys: the keys of ROW_FIELDS to return.
        overflowing: every truncated window of a text is a row of its own, as in transformers.

    Returns:
        (the rows' Encodings, key -> one value per row), plus overflow_to_sample_mapping (row -> text) with
        overflowing.
    """
    flat: list[Encoding] = []
    mapping: list[int] = []
    for i, encoding in enumerate(encodings):
        for e in [encoding, *encoding.overflowing] if overflowing else [encoding]:
            flat.append(e)
            mapping.append(i)
    data = {key: [ROW_FIELDS[key](e) for e in flat] for key in keys}
    if overflowing:
        data["overflow_to_sample_mapping"] = mapping
    return flat, data


def batch_inputs(text: Any, text_pair: Any, is_split_into_words: bool) -> tuple[bool, list[Any]]:
    """The backend's inputs for a call's text and text_pair, as transformers' tokenizer takes them.

    Args:
        text: a text, a (text, text_pair) pair, or a batch of either; with is_split_into_words, word lists.
        text_pair: the second text (or a batch of them); None: none.
        is_split_into_words: texts are word lists.

    Returns:
        (whether the call is batched, the backend's inputs: strings, (a, b) pairs, or word lists).

    Raises:
        TypeError: a value of another form.
        ValueError: text and text_pair batches of different lengths.
    """

    def is_text(t: Any) -> bool:
        if is_split_into_words:
            return isinstance(t, (list, tuple)) and all(isinstance(w, str) for w in t)
        return isinstance(t, str)

    def is_pair(t: Any) -> bool:
        return isinstance(t, (list, tuple)) and len(t) == 2 and all(is_text(x) for x in t)

    if is_text(text):
        if text_pair is not None and not is_text(text_pair):
            raise TypeError(f"text is a single input, so text_pair must be one too, got {type(text_pair).__name__}")
        return False, [(text, text_pair) if text_pair else text]
    if not isinstance(text, (list, tuple)):
        kind = "a list of words" if is_split_into_words else "a string"
        raise TypeError(f"text must be {kind}, a (text, text_pair) pair or a list of them, got {type(text).__name__}")
    if text_pair is not None:
        if is_text(text_pair) or not isinstance(text_pair, (list, tuple)):
            raise TypeError("text is a batch, so text_pair must be a list of the same length")
        if len(text) != len(text_pair):
            raise ValueError(f"text has {len(text)} inputs but text_pair has {len(text_pair)}")
        inputs = list(zip(text, text_pair, strict=True))
    else:
        inputs = list(text)
    for i, item in enumerate(inputs):
        if not (is_text(item) or is_pair(item)):
            raise TypeError(f"input {i} of the batch is {type(item).__name__}, not a text or a (text, text_pair) pair")
    return True, inputs


def token_content(value: Any) -> str:
    """A token's text: tokenizer_config.json writes a token as a string or as an AddedToken dict.

    Args:
        value: a string, an AddedToken or an AddedToken's dict.

    Returns:
        The token's content.
    """
    if isinstance(value, AddedToken):
        return value.content
    return value["content"] if isinstance(value, dict) else str(value)


def read_json_file(name: str, filename: str, hub_kwargs: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's JSON file as a dict.

    Args:
        name: a local folder or a hub id.
        filename: the file in it.
        hub_kwargs: the hub options.

    Returns:
        The file's object; {} when the checkpoint has no such file.
    """
    path = resolve_file(name, filename, **hub_kwargs)
    return {} if path is None else read_json_object(path)


def check_model_type(name: str, hub_kwargs: dict[str, Any]) -> str:
    """Refuse a checkpoint whose config.json is not BERT's or a RoBERTa family's: without a tokenizer_class,
    transformers picks the tokenizer by model_type.

    Args:
        name: a local folder or a hub id.
        hub_kwargs: the hub options.

    Returns:
        The model_type ("bert" without a config.json).

    Raises:
        ValueError: a model_type bertlite has no tokenizer for.
    """
    model_type = family_model_type(read_json_file(name, "config.json", hub_kwargs)) or "bert"
    if model_type not in FAMILIES:
        raise ValueError(
            f"{resolve_file(name, 'config.json', **hub_kwargs)}: model_type={model_type!r} is not a BERT "
            "checkpoint, so bertlite has no tokenizer for it"
        )
    return model_type


def write_files(folder: Path, files: dict[str, str]) -> None:
    """Write text files, each whole under a temporary name and then renamed, so a failure leaves none half-written.

    Args:
        folder: an existing folder.
        files: file name -> its text (UTF-8).
    """
    writers = {name: functools.partial(_write_text, text) for name, text in files.items()}
    for name, tmp in write_temporaries(folder, writers).items():
        os.replace(tmp, folder / name)


def _write_text(text: str, path: str) -> None:
    Path(path).write_text(text, encoding="utf-8")
