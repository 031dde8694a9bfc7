"""BertTokenizer: transformers' fast BERT tokenizer on the `tokenizers` library, without transformers.

Built as transformers' BertTokenizer builds it: the vocabulary (and added tokens) of
tokenizer.json, or of vocab.txt for old checkpoints; the normalizer from
tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars); a
[CLS] A [SEP] B [SEP] template. Calls take transformers' padding / truncation
arguments and return a BatchEncoding of the same keys and values. The backend side (files,
pipeline, padding and truncation) is tokenization.pipeline; the vocabulary, special-token and
decoding members are tokenization.base's TokenizerBase.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Encoding, Tokenizer

from bertlite.hub import HUB_KWARGS, pop_hub_kwargs
from bertlite.tokenization.base import SPECIAL_TOKENS, TokenizerBase, to_list
from bertlite.tokenization.batch_encoding import BatchEncoding, padding_inputs
from bertlite.tokenization.pipeline import (
    BERT_DEFAULTS,
    INIT_KEYS,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    VERY_LARGE_INTEGER,
    VOCAB_FILE,
    Strategies,
    batch_inputs,
    encoding_rows,
    pad_lists,
    read_settings,
    resolve_strategies,
    set_bert_pipeline,
    token_content,
    write_files,
)

TENSOR_TYPES = (None, "pt", "np")
# Accepted for compatibility, with nothing to choose: bertlite has only the fast tokenizer and no remote code.
IGNORED_KEYS = ("use_fast", "trust_remote_code")


def _check_init_arguments(special_tokens: dict[str, str | None], padding_side: str, truncation_side: str) -> None:
    """Refuse BertTokenizer's unknown keywords and sides (see BertTokenizer.__init__'s Raises)."""
    unknown = sorted(set(special_tokens) - set(SPECIAL_TOKENS))
    if unknown:
        raise TypeError(f"BertTokenizer got unexpected keyword argument(s): {', '.join(unknown)}")
    for side, value in (("padding_side", padding_side), ("truncation_side", truncation_side)):
        if value not in ("right", "left"):
            raise ValueError(f"{side} must be 'right' or 'left', got {value!r}")


class BertTokenizer(TokenizerBase):
    """A fast BERT WordPiece tokenizer called as transformers' tokenizers are."""

    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    is_fast = True
    pad_token_type_id = 0
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
            model_max_length: the length padding="max_length" pads to without max_length (default: no limit).
            clean_up_tokenization_spaces: decode() removes spaces before punctuation and contractions.
            padding_side, truncation_side: "right" or "left".
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
        _check_init_arguments(special_tokens, padding_side, truncation_side)
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
        self._set_special_tokens(special_tokens, extra_special_tokens, bert_pipeline)
        self.bert_pipeline = bert_pipeline
        if bert_pipeline:
            self._set_bert_pipeline()

    def _set_bert_pipeline(self) -> None:
        """Rebuild the backend's normalizer, pre-tokenizer, decoder and template from this tokenizer's settings."""
        set_bert_pipeline(
            self._tokenizer,
            do_lower_case=self.do_lower_case,
            strip_accents=self.strip_accents,
            tokenize_chinese_chars=self.tokenize_chinese_chars,
            cls=(self.cls_token, self.cls_token_id),
            sep=(self.sep_token, self.sep_token_id),
        )

    def _set_special_tokens(
        self, special_tokens: dict[str, str | None], extra_special_tokens: Sequence[str], bert_pipeline: bool
    ) -> None:
        """Name the special tokens (BERT's defaults for those not given, with the BERT pipeline) and add
        those the backend lacks.

        Args:
            special_tokens: SPECIAL_TOKENS name -> token or None, as __init__ takes them.
            extra_special_tokens: the unnamed special tokens.
            bert_pipeline: as __init__ takes it.
        """
        tokenizer = self._tokenizer
        self._special = {name: special_tokens.get(name) for name in SPECIAL_TOKENS}
        if bert_pipeline:
            for name, default in BERT_DEFAULTS.items():
                if self._special[name] is None:
                    self._special[name] = default
        # Named special tokens the backend does not know yet become special added tokens, as in transformers,
        # so "[MASK]" in a text stays one token.
        self._extra_special = [token_content(token) for token in extra_special_tokens]
        added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
        wanted = [*self._special.values(), *self._extra_special]
        missing = [t for t in dict.fromkeys(wanted) if t is not None and t not in added]
        if missing:
            tokenizer.add_special_tokens(missing)

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
        backend, init, bert_pipeline = read_settings(name, kwargs, hub_kwargs)
        return cls(backend, bert_pipeline=bert_pipeline, name_or_path=name, **init)

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
        write_files(folder, files)
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
            padding: False / "do_not_pad", True / "longest", "max_length" (to max_length, else model_max_length).
            truncation: True / "longest_first", "only_first", "only_second", False / "do_not_truncate";
                None with max_length turns on "longest_first".
            max_length: the length to truncate or pad to; None: model_max_length where needed.
            stride: with return_overflowing_tokens, tokens each window shares with the one before.
            is_split_into_words: `text` holds pre-split words.
            pad_to_multiple_of: round the padded length up to a multiple of this.
            padding_side: "right" or "left"; None: the tokenizer's.
            return_tensors: None (lists), "pt" (torch) or "np" (numpy int64).
            return_token_type_ids, return_attention_mask: None: when the model takes them (model_input_names).
            return_overflowing_tokens: every truncated window of a text becomes a row of its own, with
                overflow_to_sample_mapping (row -> text).
            return_special_tokens_mask: add special_tokens_mask (1 for special tokens).
            return_offsets_mapping: add offset_mapping ((start, end) characters per token).
            return_length: add length (tokens per row).
            verbose: warn where max_length is ignored (padding=True without truncation).

        Returns:
            A BatchEncoding with input_ids and the keys asked for; for one text without tensors, its lists.

        Raises:
            ValueError: an unknown return_tensors, padding or truncation, no pad token for padding, or
                an impossible truncation.
        """
        if return_tensors not in TENSOR_TYPES:
            raise ValueError(f"return_tensors={return_tensors!r} is not one of 'pt', 'np' or None")
        batched, inputs = batch_inputs(text, text_pair, is_split_into_words)
        strategies = resolve_strategies(
            padding, truncation, max_length, pad_to_multiple_of, verbose, self.model_max_length, self.pad_token_id
        )
        encodings = self._encode(
            inputs, strategies, add_special_tokens, is_split_into_words, stride, pad_to_multiple_of, padding_side
        )
        wanted = {
            "token_type_ids": return_token_type_ids,
            "attention_mask": return_attention_mask,
            "special_tokens_mask": return_special_tokens_mask,
            "offset_mapping": return_offsets_mapping,
            "length": return_length,
        }
        return self._batch_encoding(encodings, wanted, batched, return_overflowing_tokens, return_tensors)

    def _encode(
        self,
        inputs: list[Any],
        strategies: Strategies,
        add_special_tokens: bool,
        is_split_into_words: bool,
        stride: int,
        pad_to_multiple_of: int | None,
        padding_side: str | None,
    ) -> list[Encoding]:
        """The backend's Encodings of `inputs`, padded and truncated as the call asks (see __call__).

        Raises:
            ValueError: the backend cannot truncate as asked.
        """
        backend = self._tokenizer
        with self._lock:
            try:
                self._set_truncation_and_padding(strategies, stride, pad_to_multiple_of, padding_side)
                return backend.encode_batch(
                    inputs, add_special_tokens=add_special_tokens, is_pretokenized=is_split_into_words
                )
            except Exception as e:  # the Rust side raises plain Exceptions, e.g. for an impossible truncation
                raise ValueError(
                    f"cannot tokenize with truncation={strategies.truncation!r}, max_length={strategies.max_length}, "
                    f"stride={stride}: {e}"
                ) from e

    def _set_truncation_and_padding(
        self, strategies: Strategies, stride: int, pad_to_multiple_of: int | None, padding_side: str | None
    ) -> None:
        """Set one call's truncation and padding on the backend (the caller holds self._lock)."""
        backend = self._tokenizer
        if strategies.truncation is None:
            backend.no_truncation()
        else:
            backend.enable_truncation(
                strategies.max_length, stride=stride, strategy=strategies.truncation, direction=self.truncation_side
            )
        if strategies.padding is None:
            backend.no_padding()
        else:
            backend.enable_padding(
                direction=padding_side or self.padding_side,
                pad_id=self.pad_token_id,
                pad_type_id=self.pad_token_type_id,
                pad_token=self.pad_token,
                length=strategies.max_length if strategies.padding == "max_length" else None,
                pad_to_multiple_of=pad_to_multiple_of,
            )

    def _batch_encoding(
        self,
        encodings: list[Encoding],
        wanted: dict[str, bool | None],
        batched: bool,
        overflowing: bool,
        return_tensors: str | None,
    ) -> BatchEncoding:
        """The BatchEncoding of a call's Encodings (see __call__).

        Args:
            encodings: the backend's Encodings, one per input.
            wanted: the optional keys (of ROW_FIELDS) -> whether to return them; None for token_type_ids or
                attention_mask: when the model takes it (model_input_names).
            batched: the call was a batch; else, without tensors or overflowing rows, each key holds the one
                text's list.
            overflowing: every truncated window of a text is a row of its own (return_overflowing_tokens).
            return_tensors: None (lists), "pt" or "np".

        Returns:
            The BatchEncoding, its rows' Encodings attached.
        """
        for key in ("token_type_ids", "attention_mask"):
            if wanted[key] is None:
                wanted[key] = key in self.model_input_names
        flat, data = encoding_rows(encodings, ["input_ids", *(key for key, on in wanted.items() if on)], overflowing)
        if not batched and return_tensors is None and not overflowing:
            data = {key: value[0] if value and isinstance(value[0], list) else value for key, value in data.items()}
        return BatchEncoding(data, flat).convert_to_tensors(return_tensors)

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
        inputs, given_as = padding_inputs(encoded_inputs)
        strategy, _, max_length = resolve_strategies(
            padding, None, max_length, pad_to_multiple_of, verbose, self.model_max_length, self.pad_token_id
        )
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        fill = {
            "input_ids": self.pad_token_id,
            "token_type_ids": self.pad_token_type_id,
            "attention_mask": 0,
            "special_tokens_mask": 1,
        }
        side = padding_side or self.padding_side
        data = pad_lists(inputs, strategy, max_length, pad_to_multiple_of, side, fill, return_attention_mask)
        return BatchEncoding(data).convert_to_tensors(given_as if return_tensors is None else return_tensors)

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
            return [1 if int(i) in special else 0 for i in to_list(token_ids_0)]
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
        ids = [self.cls_token_id, *to_list(token_ids_0), self.sep_token_id]
        return ids if token_ids_1 is None else [*ids, *to_list(token_ids_1), self.sep_token_id]

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

    def save_vocabulary(self, save_directory: str | os.PathLike, filename_prefix: str | None = None) -> tuple[str]:
        """Write vocab.txt (the base vocabulary, one token a line in id order), as transformers does.

        Returns:
            The file's path.
        """
        name = f"{filename_prefix}-{VOCAB_FILE}" if filename_prefix else VOCAB_FILE
        write_files(Path(save_directory), {name: self._vocab_txt()})
        return (str(Path(save_directory) / name),)

    def _vocab_txt(self) -> str:
        vocab = self._tokenizer.get_vocab(with_added_tokens=False)
        return "".join(token + "\n" for token, _ in sorted(vocab.items(), key=lambda item: item[1]))

    @property
    def init_kwargs(self) -> dict[str, Any]:
        """The settings tokenizer_config.json holds (what transformers keeps as init_kwargs)."""
        return self._config_dict()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name_or_path={self.name_or_path!r}, vocab_size={self.vocab_size}, "
            f"model_max_length={self.model_max_length}, do_lower_case={self.do_lower_case}, "
            f"special_tokens={self.special_tokens_map})"
        )


# transformers v5 names the fast tokenizer BertTokenizer and keeps BertTokenizerFast as an alias.
BertTokenizerFast = BertTokenizer
