"""BertTokenizer: transformers' fast BERT tokenizer on the `tokenizers` library, without transformers.

Built as transformers' BertTokenizer builds it: the vocabulary (and added tokens) of
tokenizer.json, or of vocab.txt for old checkpoints; the normalizer from
tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars); a
[CLS] A [SEP] B [SEP] template. Calls take transformers' padding / truncation
arguments and return a BatchEncoding of the same keys and values.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import AddedToken, Encoding, Tokenizer, decoders, normalizers, pre_tokenizers, processors

from bertlite.checkpoint.hub import HUB_KWARGS, pop_hub_kwargs, resolve_file
from bertlite.config import read_json_object
from bertlite.errors import CheckpointError
from bertlite.utils.files import write_temporaries
from bertlite.utils.warn import warn_user

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
VOCAB_FILE = "vocab.txt"
# transformers' "no limit" for model_max_length, and the bound above which a length counts as none.
VERY_LARGE_INTEGER = int(1e30)
LARGE_INTEGER = int(1e20)
# In transformers' order (SPECIAL_TOKENS_ATTRIBUTES), which all_special_tokens follows.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
BERT_DEFAULTS = {
    "unk_token": "[UNK]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
}
# tokenizer_class values that mean the BERT pipeline; a plain fast tokenizer runs its tokenizer.json as it is.
BERT_TOKENIZER_CLASSES = ("BertTokenizer", "BertTokenizerFast")
PLAIN_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
PADDING = {True: "longest", False: None, "longest": "longest", "max_length": "max_length", "do_not_pad": None}
TRUNCATION = ("longest_first", "only_first", "only_second", "do_not_truncate")
TENSOR_TYPES = (None, "pt", "np")
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
# Accepted for compatibility, with nothing to choose: bertlite has only the fast tokenizer and no remote code.
IGNORED_KEYS = ("use_fast", "trust_remote_code")
# transformers tokenizer members bertlite leaves out, with what to do instead (the AttributeError says it).
UNSUPPORTED_METHODS = {
    "apply_chat_template": "BERT has no chat template; call the tokenizer on the text",
    "chat_template": "BERT has no chat template; call the tokenizer on the text",
    "train_new_from_iterator": "train a vocabulary with the tokenizers library (tokenizers.trainers.WordPieceTrainer "
    "and tokenizer.backend_tokenizer.train_from_iterator) or with transformers",
    "push_to_hub": "save_pretrained(folder), then huggingface_hub.upload_folder(folder_path=folder, repo_id=...)",
    "prepare_for_model": "removed in transformers v5; call the tokenizer (is_split_into_words=True for words)",
    "truncate_sequences": "removed in transformers v5; call the tokenizer with truncation= and max_length=",
}


class BatchEncoding(dict):
    """transformers' BatchEncoding: a dict of model inputs with attribute access, `.to(device)`
    and the `tokenizers` Encodings behind it (`tokens(i)`, `word_ids(i)`, `sequence_ids(i)`)."""

    def __init__(self, data: dict[str, Any], encodings: list[Encoding] | None = None) -> None:
        """Wrap model inputs.

        Args:
            data: the inputs by name (input_ids, attention_mask, ...).
            encodings: the `tokenizers` Encodings, one per row; None: none (tokens() etc. then fail).
        """
        super().__init__(data)
        self._encodings = encodings

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_") and name in self:
            return self[name]
        raise AttributeError(f"BatchEncoding has no attribute or key {name!r} (keys: {', '.join(self)})")

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, int):
            if self._encodings is None:
                raise KeyError("this BatchEncoding holds no Encodings to index by position")
            return self._encodings[key]
        return super().__getitem__(key)

    def __getstate__(self) -> dict[str, Any]:
        return {"encodings": self._encodings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._encodings = state["encodings"]

    @property
    def encodings(self) -> list[Encoding] | None:
        """The `tokenizers` Encodings, one per row; None when built without them (pad())."""
        return self._encodings

    def tokens(self, batch_index: int = 0) -> list[str]:
        """The tokens of row `batch_index` (default the first), special tokens included."""
        return self[batch_index].tokens

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """The word index of each token of row `batch_index`; None for special tokens."""
        return self[batch_index].word_ids

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        """Which text of a pair (0 or 1) each token of row `batch_index` comes from; None for special tokens."""
        return self[batch_index].sequence_ids

    @property
    def is_fast(self) -> bool:
        """Whether Encodings back this BatchEncoding (as transformers' fast tokenizers give)."""
        return self._encodings is not None

    @property
    def n_sequences(self) -> int | None:
        """1 for single texts, 2 for pairs; None without Encodings."""
        return None if self._encodings is None else self._encodings[0].n_sequences

    def _row_and_index(self, batch_or_index: int, index: int | None) -> tuple[Encoding, int]:
        # transformers' convention: (i) is position i of row 0; (b, i) is position i of row b.
        if index is None:
            return self[0], batch_or_index
        return self[batch_or_index], index

    def token_to_word(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        """The word of a token (None for special tokens); (token) for row 0 or (row, token)."""
        encoding, token = self._row_and_index(batch_or_token_index, token_index)
        return encoding.token_to_word(token)

    def token_to_sequence(self, batch_or_token_index: int, token_index: int | None = None) -> int | None:
        """Which text of a pair a token is from (None for special tokens); (token) or (row, token)."""
        encoding, token = self._row_and_index(batch_or_token_index, token_index)
        return encoding.token_to_sequence(token)

    def token_to_chars(self, batch_or_token_index: int, token_index: int | None = None) -> tuple[int, int] | None:
        """The (start, end) characters of a token in its text (None for special tokens)."""
        encoding, token = self._row_and_index(batch_or_token_index, token_index)
        return encoding.token_to_chars(token)

    def char_to_token(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        """The token covering a character of text `sequence_index` (None for a space); (char) or (row, char)."""
        encoding, char = self._row_and_index(batch_or_char_index, char_index)
        return encoding.char_to_token(char, sequence_index)

    def char_to_word(
        self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0
    ) -> int | None:
        """The word covering a character of text `sequence_index`; (char) or (row, char)."""
        encoding, char = self._row_and_index(batch_or_char_index, char_index)
        return encoding.char_to_word(char, sequence_index)

    def word_to_tokens(
        self, batch_or_word_index: int, word_index: int | None = None, sequence_index: int = 0
    ) -> tuple[int, int] | None:
        """The (start, end) tokens of a word of text `sequence_index`; (word) or (row, word)."""
        encoding, word = self._row_and_index(batch_or_word_index, word_index)
        return encoding.word_to_tokens(word, sequence_index)

    def word_to_chars(
        self, batch_or_word_index: int, word_index: int | None = None, sequence_index: int = 0
    ) -> tuple[int, int] | None:
        """The (start, end) characters of a word of text `sequence_index`; (word) or (row, word)."""
        encoding, word = self._row_and_index(batch_or_word_index, word_index)
        return encoding.word_to_chars(word, sequence_index)

    def to(self, device: Any) -> BatchEncoding:
        """Move every torch tensor to `device`, in place, as transformers does.

        Args:
            device: a torch device or its name.

        Returns:
            self.
        """
        for key, value in self.items():
            if hasattr(value, "to") and not isinstance(value, np.ndarray):
                self[key] = value.to(device)
        return self

    def convert_to_tensors(self, tensor_type: str | None) -> BatchEncoding:
        """Turn the lists into tensors, in place (integers as int64).

        Args:
            tensor_type: "pt" (torch), "np" (numpy), or None (leave lists).

        Returns:
            self.

        Raises:
            ValueError: rows of different lengths (pad them first).
        """
        if tensor_type is None:
            return self
        for key, value in self.items():
            if isinstance(value, list) and value and isinstance(value[0], (list, tuple)):
                widths = {len(row) for row in value}
                if len(widths) > 1:
                    raise ValueError(
                        f"cannot make one {tensor_type} tensor of {key!r}: its rows have lengths {sorted(widths)}; "
                        "pass padding=True (or 'max_length') and truncation=True"
                    )
            array = np.asarray(value)
            if tensor_type == "pt":
                import torch

                # Integers through numpy (10x faster than torch.tensor on lists); other values (float labels)
                # as torch.tensor makes them, like transformers.
                self[key] = (
                    torch.from_numpy(array.astype(np.int64)) if array.dtype.kind in "iu" else torch.tensor(value)
                )
            else:
                self[key] = array.astype(np.int64) if array.dtype.kind in "iu" else array
        return self


class BertTokenizer:
    """A fast BERT WordPiece tokenizer called as transformers' tokenizers are."""

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    is_fast = True
    pad_token_type_id = 0
    SPECIAL_TOKENS_ATTRIBUTES = list(SPECIAL_TOKENS)
    verbose = True

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        do_lower_case: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        model_max_length: int = VERY_LARGE_INTEGER,
        clean_up_tokenization_spaces: bool = False,
        padding_side: str = "right",
        truncation_side: str = "right",
        bert_pipeline: bool = True,
        model_input_names: list[str] | None = None,
        name_or_path: str = "",
        extra_special_tokens: Sequence[str] = (),
        **special_tokens: str | None,
    ) -> None:
        """Wrap a `tokenizers` backend; BertTokenizer.from_pretrained loads one from a folder.

        Named special tokens the backend does not know become special added tokens.

        Args:
            tokenizer: the `tokenizers` backend (its vocabulary and added tokens are kept; its padding
                and truncation are switched off).
            do_lower_case: lowercase the text (BERT pipeline).
            strip_accents: strip accents; None: when lowercasing, as BertNormalizer does.
            tokenize_chinese_chars: split CJK characters into tokens of their own.
            model_max_length: the length padding="max_length" pads to without max_length
                (default: no limit).
            clean_up_tokenization_spaces: decode() removes spaces before punctuation and contractions.
            padding_side: "right" or "left".
            truncation_side: "right" or "left".
            bert_pipeline: (transformers' BertTokenizer) the normalizer, pre-tokenizer, decoder and
                template are rebuilt from the arguments, and missing special tokens get BERT's defaults;
                False: the backend runs as it is.
            model_input_names: the inputs the model takes (which __call__ returns by default); None:
                input_ids, token_type_ids, attention_mask (without bert_pipeline: no token_type_ids).
            name_or_path: the folder or hub id it came from.
            extra_special_tokens: special tokens without a name (entity markers...), as transformers v5's
                extra_special_tokens (v4: additional_special_tokens); added when the backend lacks them.
            **special_tokens: cls_token, sep_token, pad_token, unk_token, mask_token, bos_token,
                eos_token (the SPECIAL_TOKENS) as strings, or None.

        Raises:
            TypeError: an unknown keyword.
            ValueError: a padding_side or truncation_side other than "right" or "left".
        """
        unknown = sorted(set(special_tokens) - set(SPECIAL_TOKENS))
        if unknown:
            raise TypeError(f"BertTokenizer got unexpected keyword argument(s): {', '.join(unknown)}")
        for side, value in (("padding_side", padding_side), ("truncation_side", truncation_side)):
            if value not in ("right", "left"):
                raise ValueError(f"{side} must be 'right' or 'left', got {value!r}")
        self._tokenizer = tokenizer
        self._lock = threading.Lock()  # padding and truncation are set on the backend for each call
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.do_lower_case = do_lower_case
        self.strip_accents = strip_accents
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.model_max_length = model_max_length
        self.clean_up_tokenization_spaces = clean_up_tokenization_spaces
        self.padding_side = padding_side
        self.truncation_side = truncation_side
        self.name_or_path = name_or_path
        if model_input_names is None:
            # transformers' plain fast tokenizer returns no token_type_ids (a BERT model then uses zeros).
            model_input_names = list(type(self).model_input_names) if bert_pipeline else ["input_ids", "attention_mask"]
        self.model_input_names = list(model_input_names)
        self._special = {name: special_tokens.get(name) for name in SPECIAL_TOKENS}
        if bert_pipeline:
            for name, default in BERT_DEFAULTS.items():
                if self._special[name] is None:
                    self._special[name] = default
        # Named special tokens the backend does not know yet become special added tokens, as in transformers,
        # so "[MASK]" in a text stays one token.
        self._extra_special = [_token_content(token) for token in extra_special_tokens]
        added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
        wanted = [*self._special.values(), *self._extra_special]
        missing = [t for t in dict.fromkeys(wanted) if t is not None and t not in added]
        if missing:
            tokenizer.add_special_tokens(missing)
        self.bert_pipeline = bert_pipeline
        if bert_pipeline:
            tokenizer.normalizer = normalizers.BertNormalizer(
                clean_text=True,
                handle_chinese_chars=tokenize_chinese_chars,
                strip_accents=strip_accents,
                lowercase=do_lower_case,
            )
            tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
            tokenizer.decoder = decoders.WordPiece(prefix="##")
            cls, sep = self.cls_token, self.sep_token
            tokenizer.post_processor = processors.TemplateProcessing(
                single=f"{cls}:0 $A:0 {sep}:0",
                pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
                special_tokens=[(cls, self.cls_token_id), (sep, self.sep_token_id)],
            )

    # --- loading and saving ------------------------------------------------------

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, *args: Any, **kwargs: Any) -> BertTokenizer:
        """Load a tokenizer from a folder or hub id.

        Reads tokenizer.json (or vocab.txt), tokenizer_config.json and special_tokens_map.json.

        Args:
            name_or_path: a local folder or a hub id.
            *args: none are taken (a TypeError), as transformers' extra positionals have no use here.
            **kwargs: the hub options (revision, cache_dir, token, local_files_only, force_download,
                subfolder) and tokenizer_config.json keys to override (do_lower_case, model_max_length,
                ...); use_fast and trust_remote_code are accepted and ignored.

        Returns:
            The BertTokenizer.

        Raises:
            TypeError: positional arguments after name_or_path, or an unknown keyword.
            ValueError: a tokenizer_class (or model_type) that is not BERT's.
            FileNotFoundError: neither tokenizer.json nor vocab.txt.
        """
        if args:
            raise TypeError(
                f"from_pretrained takes one positional argument (the folder or hub id), got {len(args) + 1}"
            )
        unknown = sorted(set(kwargs) - set(HUB_KWARGS) - set(INIT_KEYS) - set(IGNORED_KEYS))
        if unknown:
            raise TypeError(f"from_pretrained got unexpected keyword argument(s): {', '.join(unknown)}")
        hub_kwargs = pop_hub_kwargs(dict(kwargs))
        name = os.fspath(name_or_path)
        config = _read_json(name, TOKENIZER_CONFIG_FILE, hub_kwargs)
        special_map = _read_json(name, SPECIAL_TOKENS_MAP_FILE, hub_kwargs)
        tokenizer_class = config.get("tokenizer_class")
        if tokenizer_class is None:
            _check_model_type(name, hub_kwargs)
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
            if key in kwargs:
                value = kwargs[key]
            if value is not None:
                init[key] = _token_content(value) if key in BERT_DEFAULTS else value
        for key in ("bos_token", "eos_token"):
            value = config.get(key, special_map.get(key))
            if value is not None:
                init[key] = _token_content(value)
        extra = config.get("extra_special_tokens", config.get("additional_special_tokens"))
        extra = special_map.get("additional_special_tokens") if extra is None else extra
        if isinstance(extra, list) and extra:
            init["extra_special_tokens"] = [_token_content(token) for token in extra]
        init.setdefault("model_max_length", VERY_LARGE_INTEGER)
        return cls(backend, bert_pipeline=tokenizer_class not in PLAIN_TOKENIZER_CLASSES, name_or_path=name, **init)

    def save_pretrained(self, save_directory: str | os.PathLike) -> tuple[str, ...]:
        """Write the tokenizer into a folder that transformers' AutoTokenizer and bertlite reload.

        Each file is written whole under a temporary name and then renamed, so a failure leaves no
        half-written file.

        Args:
            save_directory: the folder, created if needed.

        Returns:
            The paths of tokenizer.json, tokenizer_config.json, special_tokens_map.json and vocab.txt
            (the last two for readers of the older layout).

        Raises:
            ValueError: save_directory is a file.
        """
        folder = Path(save_directory)
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"{folder} is a file, not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        files = {
            TOKENIZER_FILE: self._backend_json(),
            TOKENIZER_CONFIG_FILE: json.dumps(self._config_dict(), indent=2, sort_keys=True) + "\n",
            SPECIAL_TOKENS_MAP_FILE: json.dumps(self.special_tokens_map, indent=2) + "\n",
            VOCAB_FILE: self._vocab_txt(),
        }
        _write_files(folder, files)
        return tuple(str(folder / name) for name in files)

    def _config_dict(self) -> dict[str, Any]:
        """tokenizer_config.json's keys."""
        config = {
            "tokenizer_class": "BertTokenizer" if self.bert_pipeline else "PreTrainedTokenizerFast",
            "do_lower_case": self.do_lower_case,
            "strip_accents": self.strip_accents,
            "tokenize_chinese_chars": self.tokenize_chinese_chars,
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
            "padding_side": self.padding_side,
            "truncation_side": self.truncation_side,
            "model_input_names": self.model_input_names,
            **self.special_tokens_map,
        }
        if self._extra_special:
            config["extra_special_tokens"] = list(self._extra_special)
        return config

    def _backend_json(self) -> str:
        # Each call sets padding and truncation on the backend; a saved tokenizer.json keeps neither, as
        # transformers' does not, so the next load starts from no padding and no truncation.
        with self._lock:
            data = json.loads(self._tokenizer.to_str())
        data["padding"] = data["truncation"] = None
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    # --- encoding ----------------------------------------------------------------

    def __call__(
        self,
        text: str | Sequence[str] | Sequence[tuple[str, str]] | Sequence[Sequence[str]],
        text_pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
    ) -> BatchEncoding:
        """Tokenize one text, a (text, text_pair), or batches of either, as transformers' tokenizer(...).

        Args:
            text: a string, a batch of strings or (a, b) pairs, or with is_split_into_words word lists.
            text_pair: the second text (or batch of them) of pairs; None: single texts.
            add_special_tokens: add [CLS] and [SEP].
            padding: False / "do_not_pad", True / "longest", "max_length" (to max_length, else
                model_max_length).
            truncation: True / "longest_first", "only_first", "only_second", False / "do_not_truncate";
                None with max_length turns on "longest_first".
            max_length: the length to truncate or pad to; None: model_max_length where needed.
            stride: with return_overflowing_tokens, tokens each window shares with the one before.
            is_split_into_words: `text` holds pre-split words.
            pad_to_multiple_of: round the padded length up to a multiple of this.
            padding_side: "right" or "left"; None: the tokenizer's.
            return_tensors: None (lists), "pt" (torch) or "np" (numpy int64).
            return_token_type_ids: None: when the model takes them (model_input_names).
            return_attention_mask: None: when the model takes it (model_input_names).
            return_overflowing_tokens: every truncated window of a text becomes a row of its own, with
                overflow_to_sample_mapping (row -> text).
            return_special_tokens_mask: add special_tokens_mask (1 for special tokens).
            return_offsets_mapping: add offset_mapping ((start, end) characters per token).
            return_length: add length (tokens per row).
            verbose: warn where max_length is ignored (padding=True without truncation).

        Returns:
            A BatchEncoding with input_ids and the keys asked for; for one text without tensors, the
            lists of that text.

        Raises:
            ValueError: an unknown return_tensors, padding or truncation, no pad token for padding, or
                an impossible truncation.
        """
        if return_tensors not in TENSOR_TYPES:
            raise ValueError(f"return_tensors={return_tensors!r} is not one of 'pt', 'np' or None")
        batched, inputs = _batch_inputs(text, text_pair, is_split_into_words)
        padding_strategy, truncation_strategy, max_length = self._strategies(
            padding, truncation, max_length, pad_to_multiple_of, verbose
        )
        encodings = self._encode(
            inputs,
            add_special_tokens,
            is_split_into_words,
            padding_strategy,
            truncation_strategy,
            max_length,
            stride,
            pad_to_multiple_of,
            padding_side,
        )
        wanted = {
            "input_ids": True,
            "token_type_ids": return_token_type_ids,
            "attention_mask": return_attention_mask,
            "special_tokens_mask": return_special_tokens_mask,
            "offset_mapping": return_offsets_mapping,
            "length": return_length,
        }
        for key in ("token_type_ids", "attention_mask"):  # None: those the model takes
            if wanted[key] is None:
                wanted[key] = key in self.model_input_names
        flat, data = _rows(encodings, [key for key, on in wanted.items() if on], return_overflowing_tokens)
        if not batched and return_tensors is None and not return_overflowing_tokens:
            data = {key: value[0] if value and isinstance(value[0], list) else value for key, value in data.items()}
        return BatchEncoding(data, flat).convert_to_tensors(return_tensors)

    def _strategies(
        self,
        padding: bool | str,
        truncation: bool | str | None,
        max_length: int | None,
        pad_to_multiple_of: int | None,
        verbose: bool,
    ) -> tuple[str | None, str | None, int | None]:
        """transformers' _get_padding_truncation_strategies: (padding, truncation, max_length); None = off."""
        if padding not in PADDING:
            raise ValueError(f"padding={padding!r} is not one of True, False, 'longest', 'max_length', 'do_not_pad'")
        if truncation not in (None, True, False, *TRUNCATION):
            raise ValueError(
                f"truncation={truncation!r} is not one of True, False, {', '.join(repr(t) for t in TRUNCATION)}"
            )
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)):
            raise ValueError(f"max_length must be an integer, got {max_length!r}")
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
            unlimited = self.model_max_length > LARGE_INTEGER
            if padding_strategy == "max_length":
                padding_strategy, max_length = (None, None) if unlimited else ("max_length", self.model_max_length)
            if truncation_strategy is not None:
                truncation_strategy, max_length = (
                    (None, None) if unlimited else (truncation_strategy, self.model_max_length)
                )
        if padding_strategy is not None and self.pad_token_id is None:
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
        return padding_strategy, truncation_strategy, max_length

    def _encode(
        self,
        inputs: list[Any],
        add_special_tokens: bool,
        is_split_into_words: bool,
        padding_strategy: str | None,
        truncation_strategy: str | None,
        max_length: int | None,
        stride: int,
        pad_to_multiple_of: int | None,
        padding_side: str | None,
    ) -> list[Encoding]:
        backend = self._tokenizer
        with self._lock:
            try:
                if truncation_strategy is None:
                    backend.no_truncation()
                else:
                    backend.enable_truncation(
                        max_length, stride=stride, strategy=truncation_strategy, direction=self.truncation_side
                    )
                if padding_strategy is None:
                    backend.no_padding()
                else:
                    backend.enable_padding(
                        direction=padding_side or self.padding_side,
                        pad_id=self.pad_token_id,
                        pad_type_id=self.pad_token_type_id,
                        pad_token=self.pad_token,
                        length=max_length if padding_strategy == "max_length" else None,
                        pad_to_multiple_of=pad_to_multiple_of,
                    )
                return backend.encode_batch(
                    inputs, add_special_tokens=add_special_tokens, is_pretokenized=is_split_into_words
                )
            except Exception as e:  # the Rust side raises plain Exceptions, e.g. for an impossible truncation
                raise ValueError(
                    f"cannot tokenize with truncation={truncation_strategy!r}, max_length={max_length}, "
                    f"stride={stride}: {e}"
                ) from e

    def pad(
        self,
        encoded_inputs: dict[str, Any] | Sequence[dict[str, Any]],
        padding: bool | str = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | None = None,
        verbose: bool = True,
    ) -> BatchEncoding:
        """Pad encoded inputs as transformers' pad() does.

        input_ids are padded with pad_token_id, token_type_ids with 0, attention_mask with 0,
        special_tokens_mask with 1; other keys (labels) pass through.

        Args:
            encoded_inputs: one encoded input, a dict of lists, or a list of dicts (as a data collator
                passes them).
            padding: as in __call__ (default True: to the longest).
            max_length: the length for padding="max_length".
            pad_to_multiple_of: round the padded length up to a multiple of this.
            padding_side: "right" or "left"; None: the tokenizer's.
            return_attention_mask: None: when the model takes it (model_input_names).
            return_tensors: None: as the input (tensors in give tensors out), "pt" or "np".
            verbose: as in __call__.

        Returns:
            The padded BatchEncoding.

        Raises:
            ValueError: an unknown return_tensors, or no input_ids.
        """
        if return_tensors not in TENSOR_TYPES:
            raise ValueError(f"return_tensors={return_tensors!r} is not one of 'pt', 'np' or None")
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
            encoded_inputs = {key: [example[key] for example in encoded_inputs] for key in encoded_inputs[0]}
        if "input_ids" not in encoded_inputs:
            raise ValueError(f"pad() needs input_ids among the inputs, got keys {list(encoded_inputs)}")
        inputs = {key: _py(value) for key, value in encoded_inputs.items()}
        if return_tensors is None:
            first = encoded_inputs["input_ids"]
            first = first[0] if isinstance(first, (list, tuple)) and first else first
            return_tensors = (
                "pt" if type(first).__module__ == "torch" else "np" if isinstance(first, np.ndarray) else None
            )
        inputs = {key: [_py(v) for v in value] if isinstance(value, list) else value for key, value in inputs.items()}
        strategy, _, max_length = self._strategies(padding, None, max_length, pad_to_multiple_of, verbose)
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        ids = inputs["input_ids"]
        batched = bool(ids) and isinstance(ids[0], list)
        rows = [{key: value[i] for key, value in inputs.items()} for i in range(len(ids))] if batched else [inputs]
        if strategy == "longest":
            max_length = max((len(row["input_ids"]) for row in rows), default=0)
        if strategy is not None and max_length is not None and pad_to_multiple_of and max_length % pad_to_multiple_of:
            max_length = (max_length // pad_to_multiple_of + 1) * pad_to_multiple_of
        side = padding_side or self.padding_side
        fill = {
            "input_ids": self.pad_token_id,
            "token_type_ids": self.pad_token_type_id,
            "attention_mask": 0,
            "special_tokens_mask": 1,
        }
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
        data = out if batched else {key: value[0] for key, value in out.items()}
        return BatchEncoding(data).convert_to_tensors(return_tensors)

    def encode(self, text: str | Sequence[str], text_pair: str | Sequence[str] | None = None, **kwargs: Any) -> Any:
        """Encode one text (or pair) to its input ids, as transformers' encode().

        Args:
            text, text_pair, **kwargs: as in __call__.

        Returns:
            The input_ids of the call.
        """
        return self(text, text_pair, **kwargs)["input_ids"]

    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False) -> list[str]:
        """Split a text (or pair) into WordPiece tokens.

        Args:
            text: the text.
            pair: a second text; None: none.
            add_special_tokens: include [CLS]/[SEP] (default False).

        Returns:
            The tokens.
        """
        return self(text, pair, add_special_tokens=add_special_tokens).tokens()

    # --- decoding ----------------------------------------------------------------

    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str | list[str]:
        """Decode ids back to text.

        Args:
            token_ids: a sequence of ids (a list, tensor or array), or a batch of them.
            skip_special_tokens: leave the special tokens out.
            clean_up_tokenization_spaces: remove spaces before punctuation and contractions; None: the
                tokenizer's setting.

        Returns:
            The text, or for a batch a list of texts.
        """
        ids = _to_list(token_ids)
        if isinstance(ids, int):
            ids = [ids]
        if ids and isinstance(ids[0], list):
            return self.batch_decode(ids, skip_special_tokens, clean_up_tokenization_spaces)
        text = self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        clean = (
            self.clean_up_tokenization_spaces if clean_up_tokenization_spaces is None else clean_up_tokenization_spaces
        )
        return clean_up_tokenization(text) if clean else text

    def batch_decode(
        self,
        sequences: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> list[str]:
        """Decode a batch of id sequences; the arguments as in decode().

        Returns:
            One text per sequence.
        """
        return [self.decode(ids, skip_special_tokens, clean_up_tokenization_spaces) for ids in _to_list(sequences)]

    def convert_ids_to_tokens(self, ids: int | Iterable[int], skip_special_tokens: bool = False) -> str | list[str]:
        """Look up the tokens of ids.

        Args:
            ids: one id, or several (a list, tensor or array).
            skip_special_tokens: leave the special tokens out (for several ids).

        Returns:
            The token of one id, or the list of tokens.
        """
        ids = _to_list(ids)
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._tokenizer.id_to_token(int(i)) for i in ids if int(i) not in skip]

    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        """Look up the ids of tokens.

        Args:
            tokens: one token or several.

        Returns:
            The id of one token, or the list of ids; a token outside the vocabulary gives unk_token_id.
        """
        if isinstance(tokens, str):
            index = self._tokenizer.token_to_id(tokens)
            return self.unk_token_id if index is None else index
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """Join tokens into text with the backend's decoder (WordPiece: "##" pieces joined)."""
        return self._tokenizer.decoder.decode(tokens) if self._tokenizer.decoder is not None else " ".join(tokens)

    # --- vocabulary and special tokens -------------------------------------------

    @property
    def backend_tokenizer(self) -> Tokenizer:
        """The `tokenizers` Tokenizer underneath."""
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        """Size of the base vocabulary, without added tokens (transformers' vocab_size)."""
        return self._tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        """Every token, added ones included, with its id."""
        return self._tokenizer.get_vocab(with_added_tokens=True)

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """The special tokens that are set, by name (cls_token: "[CLS]", ...)."""
        return {name: token for name, token in self._special.items() if token is not None}

    @property
    def all_special_tokens(self) -> list[str]:
        """The special tokens, each once: the named ones, then extra_special_tokens."""
        return list(dict.fromkeys([*self.special_tokens_map.values(), *self._extra_special]))

    @property
    def extra_special_tokens(self) -> list[str]:
        """The special tokens without a name (added with add_special_tokens({"extra_special_tokens": [...]}))."""
        return list(self._extra_special)

    additional_special_tokens = extra_special_tokens  # transformers v4's name

    @property
    def extra_special_tokens_ids(self) -> list[int]:
        """The ids of extra_special_tokens."""
        return self.convert_tokens_to_ids(self._extra_special)

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        """The added tokens (special ones included) by id, as `tokenizers` AddedTokens."""
        return self._tokenizer.get_added_tokens_decoder()

    @property
    def added_tokens_encoder(self) -> dict[str, int]:
        """The added tokens' ids by token, in id order."""
        return {token.content: i for i, token in sorted(self.added_tokens_decoder.items())}

    def get_added_vocab(self) -> dict[str, int]:
        """The added tokens' ids by token (added_tokens_encoder)."""
        return self.added_tokens_encoder

    @property
    def vocab(self) -> dict[str, int]:
        """get_vocab()."""
        return self.get_vocab()

    @property
    def decoder(self) -> Any:
        """The backend's decoder (WordPiece for BERT)."""
        return self._tokenizer.decoder

    def add_tokens(
        self, new_tokens: str | AddedToken | Sequence[str | AddedToken], special_tokens: bool = False
    ) -> int:
        """Add tokens to the vocabulary, at its end, as transformers' add_tokens.

        Call model.resize_token_embeddings(len(tokenizer)) afterwards so the model has a row for each.

        Args:
            new_tokens: a token or several (strings or `tokenizers` AddedTokens); those already in the
                vocabulary are skipped.
            special_tokens: add them as special tokens (never split, not normalised, skipped by
                decode(skip_special_tokens=True)).

        Returns:
            The number of tokens added.
        """
        if not new_tokens:
            return 0
        if not isinstance(new_tokens, (list, tuple)):
            new_tokens = [new_tokens]
        with self._lock:
            if special_tokens:
                return self._tokenizer.add_special_tokens(list(new_tokens))
            return self._tokenizer.add_tokens(list(new_tokens))

    def add_special_tokens(self, special_tokens_dict: dict[str, Any], replace_extra_special_tokens: bool = True) -> int:
        """Add special tokens and name them, as transformers' add_special_tokens.

        Args:
            special_tokens_dict: SPECIAL_TOKENS_ATTRIBUTES names (cls_token, ...) to a token, and/or
                "extra_special_tokens" (v4: "additional_special_tokens") to a list of tokens.
            replace_extra_special_tokens: the list replaces extra_special_tokens (the old ones stay in the
                vocabulary); False: it extends them.

        Returns:
            The number of tokens added to the vocabulary.

        Raises:
            ValueError: an unknown key, or a value of the wrong type.
        """
        if not special_tokens_dict:
            return 0
        special_tokens_dict = dict(special_tokens_dict)
        if "additional_special_tokens" in special_tokens_dict and not special_tokens_dict.get("extra_special_tokens"):
            special_tokens_dict["extra_special_tokens"] = special_tokens_dict.pop("additional_special_tokens")
        allowed = (*SPECIAL_TOKENS, "extra_special_tokens")
        to_add: list[AddedToken] = []
        for key, value in special_tokens_dict.items():
            if key not in allowed:
                raise ValueError(f"{key!r} is not a special token name; use one of {', '.join(allowed)}")
            if key == "extra_special_tokens":
                if not isinstance(value, (list, tuple)) or not all(isinstance(t, (str, AddedToken)) for t in value):
                    raise ValueError(f"extra_special_tokens must be a list of strings or AddedTokens, got {value!r}")
                new = [t for t in value if replace_extra_special_tokens or str(t) not in self._extra_special]
                names = [_token_content(t) for t in new]
                self._extra_special = names if replace_extra_special_tokens and new else self._extra_special + names
                to_add.extend(_special_added_token(t) for t in new)
            else:
                if not isinstance(value, (str, AddedToken)):
                    raise ValueError(f"{key} must be a string or an AddedToken, got {value!r}")
                self._special[key] = _token_content(value)
                to_add.append(_special_added_token(value))
        return self.add_tokens(to_add, special_tokens=True)

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """How many special tokens a call adds to one text (or, pair=True, to a pair)."""
        return self._tokenizer.num_special_tokens_to_add(pair)

    @property
    def max_len_single_sentence(self) -> int:
        """model_max_length less the special tokens of one text."""
        return self.model_max_length - self.num_special_tokens_to_add(pair=False)

    @property
    def max_len_sentences_pair(self) -> int:
        """model_max_length less the special tokens of a pair."""
        return self.model_max_length - self.num_special_tokens_to_add(pair=True)

    def get_special_tokens_mask(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None, already_has_special_tokens: bool = False
    ) -> list[int]:
        """1 for each special token, 0 for the others (DataCollatorForLanguageModeling masks only the others).

        Args:
            token_ids_0: ids of a text, with its special tokens when already_has_special_tokens.
            token_ids_1: ids of a pair's second text (only without special tokens).
            already_has_special_tokens: the ids include [CLS]/[SEP] (as the collator passes them): each id
                is checked against all_special_ids, as in transformers. False: the mask of the ids once
                build_inputs_with_special_tokens has added them.

        Returns:
            The mask.

        Raises:
            ValueError: token_ids_1 with already_has_special_tokens.
            NotImplementedError: already_has_special_tokens=False for a tokenizer without the BERT template
                (as transformers).
        """
        if already_has_special_tokens:
            if token_ids_1 is not None:
                raise ValueError("token_ids_1 cannot be given with already_has_special_tokens=True (ids are formatted)")
            special = set(self.all_special_ids)
            return [1 if int(i) in special else 0 for i in _to_list(token_ids_0)]
        self._need_bert_template("get_special_tokens_mask(already_has_special_tokens=False)")
        mask = [1] + [0] * len(token_ids_0) + [1]
        return mask if token_ids_1 is None else mask + [0] * len(token_ids_1) + [1]

    def build_inputs_with_special_tokens(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        """[CLS] A [SEP] (and B [SEP]) as ids, as transformers v4's BERT tokenizers (v5 dropped it).

        Raises:
            NotImplementedError: a tokenizer without the BERT template.
        """
        self._need_bert_template("build_inputs_with_special_tokens")
        ids = [self.cls_token_id, *_to_list(token_ids_0), self.sep_token_id]
        return ids if token_ids_1 is None else [*ids, *_to_list(token_ids_1), self.sep_token_id]

    def create_token_type_ids_from_sequences(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        """The token_type_ids of build_inputs_with_special_tokens' result: 0 for [CLS] A [SEP], 1 for B [SEP].

        Raises:
            NotImplementedError: a tokenizer without the BERT template.
        """
        self._need_bert_template("create_token_type_ids_from_sequences")
        first = [0] * (len(token_ids_0) + 2)
        return first if token_ids_1 is None else first + [1] * (len(token_ids_1) + 1)

    def _need_bert_template(self, what: str) -> None:
        if not self.bert_pipeline:
            raise NotImplementedError(
                f"{what} needs the BERT template ([CLS] A [SEP] B [SEP]); this tokenizer runs its tokenizer.json "
                "as it is: call the tokenizer instead"
            )

    def encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> BatchEncoding:
        """transformers v4's name for calling the tokenizer on one text (v5 dropped it): self(text, text_pair, ...)."""
        return self(text, text_pair, **kwargs)

    def batch_encode_plus(self, batch_text_or_text_pairs: Any, **kwargs: Any) -> BatchEncoding:
        """transformers v4's name for calling the tokenizer on a batch (v5 dropped it): self(batch, ...)."""
        return self(batch_text_or_text_pairs, **kwargs)

    def clean_up_tokenization(self, text: str) -> str:
        """Remove spaces before punctuation and contractions, as decode(clean_up_tokenization_spaces=True)."""
        return clean_up_tokenization(text)

    def save_vocabulary(self, save_directory: str | os.PathLike, filename_prefix: str | None = None) -> tuple[str]:
        """Write vocab.txt (the base vocabulary, one token a line in id order), as transformers does.

        Returns:
            The file's path.
        """
        name = f"{filename_prefix}-{VOCAB_FILE}" if filename_prefix else VOCAB_FILE
        _write_files(Path(save_directory), {name: self._vocab_txt()})
        return (str(Path(save_directory) / name),)

    def _vocab_txt(self) -> str:
        vocab = self._tokenizer.get_vocab(with_added_tokens=False)
        return "".join(token + "\n" for token, _ in sorted(vocab.items(), key=lambda item: item[1]))

    @property
    def init_kwargs(self) -> dict[str, Any]:
        """The settings tokenizer_config.json holds (what transformers keeps as init_kwargs)."""
        return self._config_dict()

    def __getattr__(self, name: str) -> Any:
        if name in UNSUPPORTED_METHODS:
            raise AttributeError(f"BertTokenizer.{name} is not available in bertlite: {UNSUPPORTED_METHODS[name]}")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def all_special_ids(self) -> list[int]:
        """The ids of all_special_tokens."""
        return self.convert_tokens_to_ids(self.all_special_tokens)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name_or_path={self.name_or_path!r}, vocab_size={self.vocab_size}, "
            f"model_max_length={self.model_max_length}, do_lower_case={self.do_lower_case}, "
            f"special_tokens={self.special_tokens_map})"
        )


def _special_token_properties(name: str) -> tuple[property, property]:
    def get_token(self: BertTokenizer) -> str | None:
        return self._special[name]

    def set_token(self: BertTokenizer, value: str | None) -> None:
        self._special[name] = value

    def get_id(self: BertTokenizer) -> int | None:
        token = self._special[name]
        return None if token is None else self.convert_tokens_to_ids(token)

    def set_id(self: BertTokenizer, value: int | None) -> None:
        self._special[name] = None if value is None else self.convert_ids_to_tokens(value)  # as transformers

    return property(get_token, set_token), property(get_id, set_id)


# cls_token / cls_token_id and the others, one pair per special token.
for _name in SPECIAL_TOKENS:
    _token, _id = _special_token_properties(_name)
    setattr(BertTokenizer, _name, _token)
    setattr(BertTokenizer, f"{_name}_id", _id)

# transformers v5 names the fast tokenizer BertTokenizer and keeps BertTokenizerFast as an alias.
BertTokenizerFast = BertTokenizer


def clean_up_tokenization(text: str) -> str:
    """Remove spaces before punctuation and English contractions, as transformers' clean_up_tokenization.

    Args:
        text: decoded text.

    Returns:
        The cleaned text.
    """
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )


# What a call returns per row, by key, read from the row's Encoding (in the order transformers gives them).
_ROW_FIELDS: dict[str, Callable[[Encoding], Any]] = {
    "input_ids": lambda e: e.ids,
    "token_type_ids": lambda e: e.type_ids,
    "attention_mask": lambda e: e.attention_mask,
    "special_tokens_mask": lambda e: e.special_tokens_mask,
    "offset_mapping": lambda e: e.offsets,
    "length": lambda e: len(e.ids),
}


def _rows(encodings: list[Encoding], keys: list[str], overflowing: bool) -> tuple[list[Encoding], dict[str, list]]:
    """The rows of a call (with overflowing: every window of a text is a row of its own, as in transformers)
    and the lists of `keys` over them, plus overflow_to_sample_mapping (row -> text) with overflowing."""
    flat: list[Encoding] = []
    mapping: list[int] = []
    for i, encoding in enumerate(encodings):
        for e in [encoding, *encoding.overflowing] if overflowing else [encoding]:
            flat.append(e)
            mapping.append(i)
    data = {key: [_ROW_FIELDS[key](e) for e in flat] for key in keys}
    if overflowing:
        data["overflow_to_sample_mapping"] = mapping
    return flat, data


def _batch_inputs(text: Any, text_pair: Any, is_split_into_words: bool) -> tuple[bool, list[Any]]:
    """(batched, the backend's inputs): strings, (a, b) pairs, or word lists."""

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


def _py(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


def _to_list(ids: Any) -> Any:
    return ids.tolist() if hasattr(ids, "tolist") else ids if isinstance(ids, int) else list(ids)


def _token_content(value: Any) -> str:
    # tokenizer_config.json writes a token as a string or as an AddedToken dict.
    if isinstance(value, AddedToken):
        return value.content
    return value["content"] if isinstance(value, dict) else str(value)


def _special_added_token(token: str | AddedToken) -> AddedToken:
    # As transformers' add_special_tokens makes them: matched as written, not normalised.
    if isinstance(token, AddedToken):
        return token
    return AddedToken(token, rstrip=False, lstrip=False, normalized=False, special=True)


def _read_json(name: str, filename: str, hub_kwargs: dict[str, Any]) -> dict[str, Any]:
    path = resolve_file(name, filename, **hub_kwargs)
    return {} if path is None else read_json_object(path)


def _check_model_type(name: str, hub_kwargs: dict[str, Any]) -> None:
    """Without a tokenizer_class, transformers picks the tokenizer by config.json's model_type."""
    model_type = _read_json(name, "config.json", hub_kwargs).get("model_type", "bert")
    if model_type != "bert":
        raise ValueError(
            f"{resolve_file(name, 'config.json', **hub_kwargs)}: model_type={model_type!r} is not a BERT "
            "checkpoint, so bertlite has no tokenizer for it"
        )


def _write_files(folder: Path, files: dict[str, str]) -> None:
    writers = {name: functools.partial(_write_text, text) for name, text in files.items()}
    for name, tmp in write_temporaries(folder, writers).items():
        os.replace(tmp, folder / name)


def _write_text(text: str, path: str) -> None:
    Path(path).write_text(text, encoding="utf-8")


# --- tokenizer -------------------------------------------------------------------


def load_tokenizer(name_or_path: str | os.PathLike, **hub_kwargs: Any) -> Tokenizer:
    """Load the `tokenizers` backend of a checkpoint.

    Padding and truncation stored in the file are switched off: the packaged
    all-MiniLM-L6-v2 pads everything to 128, and Embedder pads per batch.

    Args:
        name_or_path: a local folder or a hub id.
        **hub_kwargs: hub options of bertlite.checkpoint.hub.resolve_file (revision, cache_dir, ...).

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
        config = _read_json(str(name_or_path), TOKENIZER_CONFIG_FILE, hub_kwargs)
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
    return wrapper._tokenizer
