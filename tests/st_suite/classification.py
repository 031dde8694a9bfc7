"""Which of sentence-transformers' vendored tests are in scope, and which in-scope tests fail under bertlite today.

A test id is its path under sentence-transformers' tests/, then `::` and the function (with its class, if any,
and parameters), e.g. `sentence_transformer/test_model.py::test_encode_query[...]`. A pattern is an fnmatch
pattern matched against the id, and against the id without its parameters.

OUT_OF_SCOPE: groups deselected (not run, not counted), each with its reason; docs/migration.md lists them.
KNOWN_FAILURES: in-scope tests that fail under bertlite, by cause. They run as xfail(strict=True): a fix that
makes one pass fails the run until its pattern is removed here. The reference run (sentence-transformers' own
classes) ignores this table.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

ST = "sentence_transformer/test_model.py::"
CE = "cross_encoder/test_model.py::"
SE = "sparse_encoder/test_model.py::"
BASE = "base/test_model.py::"

OUT_OF_SCOPE: dict[str, tuple[str, ...]] = {
    "training and evaluation (fit, evaluators, gradient checkpointing, a fresh classification head)": (
        BASE + "test_evaluate_*",
        BASE + "test_gradient_checkpointing_enable",
        CE + "test_num_labels_fresh_model",
    ),
    "model cards": (
        ST + "test_model_card_*",
        BASE + "test_save_without_model_card",
    ),
    "push_to_hub and save_to_hub": (
        "*::test_push_to_hub*",
        BASE + "test_save_to_hub_*",
    ),
    "adapters (PEFT, LoRA)": (
        ST + "test_multiple_adapters",
        ST + "test_load_adapter_with_revision",
        ST + "test_load_checkpoint_with_peft_and_lora",
    ),
    "images, audio, chat templates and multimodal inputs (modalities, LLM rerankers)": (
        ST + "test_clip",
        BASE + "test_preprocess_modality_error_messages",
        BASE + "test_preprocess_passes_supported_modality",
        BASE + "test_preprocess_skips_modality_check_for_empty_inputs",
        BASE + "test_supports_parametrized",
        BASE + "test_is_singular_input_conversation*",
        BASE + "test_sentence_transformer",  # model.supports(modality)
        BASE + "test_cross_encoder",
        BASE + "test_sparse_encoder",
        CE + "test_predict_applies_chat_template*",
        CE + "test_predict_raises_on_chat_template_without_pair_roles",
        CE + "test_predict_raises_on_mixed_batch_containing_a_pair",
        CE + "test_preprocess_raises_on_non_text_pair_without_pair_roles",
        CE + "test_message_input_with_a_single_pair_role_is_not_checked",
        CE + "test_probe_uses_the_configured_chat_template_kwargs",
        CE + "test_replacing_a_rejected_chat_template_takes_effect",
        CE + "test_qwen3_reranker_*",
    ),
    "models built from a list of modules, custom or third-party modules, and the module objects' internals": (
        BASE + "test_can_flatten_inputs_*",
        BASE + "test_config_*",
        BASE + "test_empty_modules_raises",
        BASE + "test_load_module_class_from_ref_*",
        BASE + "test_private_load_with_module_classes_*",
        BASE + "test_third_party_module_*",
        BASE + "test_met_requirements_load_normally",
        BASE + "test_unmet_requirements_raise_when_loading",
        BASE + "test_modules_and_path_combo_warns_and_loads_from_path",
        BASE + "test_cache_folder_from_env",
        BASE + "test_dtype_no_parameters",
        BASE + "test_use_auth_token_warns",
        BASE + "test_get_model_type_*",
        BASE + "test_parse_model_config_*",
        BASE + "test_save_with_safe_serialization_fallback",
        BASE + "test_device_map_aligns_auxiliary_modules_to_backbone",
        BASE + "test_device_map_ignored_for_prebuilt_modules",
        "*::test_encode_routes_through_module_call",
        "*::test_predict_routes_through_module_call",
        "*::test_get_model_kwargs",
        "*::test_parse_model_config_ignores_multi_vector_similarity",
        ST + "test_router_transformers_model_property",
        ST + "test_load_local_without_normalize_directory",
        CE + "test_predict_batch_size_1",  # spies on the module's forward
        ST + "test_transformers_model_property",
        ST + "test_default_pooling_mode*",
        CE + "test_config_and_model_none_without_transformer",
        CE + "test_default_activation_fn_without_transformer",
        CE + "test_num_labels_from_dense_scores_module",
        CE + "test_num_labels_ignores_dense_without_scores_output",
        CE + "test_init_args_decorator",
        SE + "test_csr_*",
        SE + "test_default_to_csr",
        SE + "test_detect_mlm",
        SE + "test_splade_pooling_chunk_size",
    ),
    "converting one model type into another (a SentenceTransformer folder loaded as a CrossEncoder or "
    "SparseEncoder: a new head on a base model)": (
        "*::test_conversion_*",
        BASE + "test_load_logs_converting_model_type",
        CE + "test_load_activation_fn_from_kwargs",
        CE + "test_load_with_revision",
    ),
    "util's multi-vector scoring (maxsim, mean_maxsim, their chunking) and private helpers: bertlite scores "
    "multi-vector embeddings with MultiVectorEncoder.similarity": (
        "util/test_similarity.py::test_maxsim*",
        "util/test_similarity.py::test_mean_maxsim*",
        "util/test_similarity.py::test_empty_document_score_survives_the_losses_that_consume_it",
        "util/test_similarity.py::test_chunk_ranges_budget_packing",
    ),
    "CUDA, several GPUs or faiss (skipped by sentence-transformers on a CPU machine)": (
        "util/test_quantization.py::test_semantic_search_faiss_*",
        "util/test_retrieval.py::test_community_detection_gpu_support",
        ST + "test_encode_fp16",
        ST + "test_load_with_torch_dtype",
        ST + "test_to",
        ST + "test_torch_dtype",
        CE + "test_device_assignment",
        CE + "test_device_switching",
        CE + "test_target_device_backwards_compat",
    ),
    "a real trained checkpoint the stand-in hub does not serve (CLIP, NLI and BGE rerankers, "
    "distilroberta, static embeddings, pytorch_model.bin), or trained weights' similarities "
    "(sentence-transformers fails these on the tiny random checkpoints too)": (
        "sentence_transformer/test_compute_embeddings.py::test_encode_normalize",
        "sentence_transformer/test_compute_embeddings.py::test_encode_single_sentences",
        "sentence_transformer/test_compute_embeddings.py::test_encode_token_embeddings",
        "sentence_transformer/test_compute_embeddings.py::test_encode_tuple_sentences",
        ST + "test_load_with_pytorch_bin",
        ST + "test_safetensors",
        ST + "test_similarity_score",
        CE + "test_bge_reranker_max_length",
        CE + "test_predict_single_input[[]nli_minilm_model[]]",
        CE + "test_predict_softmax",
        CE + "test_rank",
        CE + "test_rank_multiple_labels",
        SE + "test_sparsity",
        "util/test_retrieval.py::test_paraphrase_mining",
    ),
    "fails under sentence-transformers 6.3.0 itself (the tests are v6.0.0's)": (
        BASE + "test_device_argument_warns_when_device_map_present",
        SE + "test_max_active_dims_set_init",
        "util/test_similarity.py::test_pairwise_angle_sim_even_and_odd_sparse_embeddings",
    ),
}

KNOWN_FAILURES: dict[str, tuple[str, ...]] = {
    "load log lines (INFO 'Loading SentenceTransformer model from ...', 'No modules.json found ...') the tests "
    "read from sentence-transformers' own logger by name (caplog.at_level(INFO, logger='sentence_transformers."
    "base.model')): bertlite logs them under bertlite.jobs.st": (
        BASE + "test_save_load_roundtrip*",
        BASE + "test_load_logs_no_modules_json",
    ),
    "CrossEncoder's older keywords with values bertlite refuses (tokenizer_args={'model_max_length': ...}, "
    "config_args={'classifier_dropout': ...}: processor_kwargs and config_kwargs are not read)": (
        CE + "test_logger_warning",
    ),
    "trust_remote_code=True with a custom activation_fn path: the test expects it imported (ModuleNotFoundError); "
    "bertlite imports no code a checkpoint names and refuses with a ValueError": (
        CE + "test_load_activation_fn_from_config_custom",
    ),
    "spies on sentence-transformers' Transformer module's __init__ for the model_kwargs it receives (bertlite "
    "takes attn_implementation= and low_cpu_mem_usage= but builds no such module)": (
        ST + "test_load_with_model_kwargs",
    ),
    'inference-free SPLADE: preprocess(text, task="query") refused; the test also reads the Router module '
    "(model[0].sub_modules)": (SE + "test_inference_free_splade",),
    "no set_pooling_include_prompt": (ST + "test_prompt_length_calculation",),
}


def _find(table: dict[str, tuple[str, ...]], test: str) -> str | None:
    bare = test.split("[", 1)[0]
    for reason, patterns in table.items():
        if any(fnmatchcase(test, p) or fnmatchcase(bare, p) for p in patterns):
            return reason
    return None


def out_of_scope(test: str) -> str | None:
    return _find(OUT_OF_SCOPE, test)


def known_failure(test: str) -> str | None:
    return _find(KNOWN_FAILURES, test)
