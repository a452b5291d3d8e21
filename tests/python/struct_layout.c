/*
 * struct_layout.c - prints the size of each C struct of include/xllm.h that
 * the Python package mirrors with ctypes (python/xllm/__init__.py), and the
 * offset and size of each mirrored field, one per line:
 *   struct NAME SIZE
 *   field NAME FIELD OFFSET SIZE
 * tests/python/test_layout.py compares them with the ctypes classes, so a
 * field added to (or moved in) a C struct without its Python mirror fails a
 * test instead of silently shifting what Python reads. A new mirrored struct
 * or field is listed here too (a field missing here is caught by the size).
 * Built by CMake (xllm_struct_layout); links nothing.
 */
#include <stddef.h>
#include <stdio.h>

#include "xllm.h"

#define S(T) printf("struct %s %zu\n", #T, sizeof(T))
#define F(T, f) printf("field %s %s %zu %zu\n", #T, #f, offsetof(T, f), sizeof(((T *)0)->f))

int main(void) {
    S(xllm_error);
    F(xllm_error, code);
    F(xllm_error, message);
    S(xllm_model_options);
    F(xllm_model_options, n_threads);
    F(xllm_model_options, max_context);
    F(xllm_model_options, kv_block_size);
    F(xllm_model_options, max_batch_seqs);
    F(xllm_model_options, kv_tokens);
    F(xllm_model_options, max_step_tokens);
    F(xllm_model_options, layer_begin);
    F(xllm_model_options, layer_end);
    F(xllm_model_options, pp_size);
    F(xllm_model_options, pp_layers);
    F(xllm_model_options, pp_microbatches);
    F(xllm_model_options, pp_timeout_ms);
    F(xllm_model_options, pp_stats);
    F(xllm_model_options, pp_test_fail_after);
    F(xllm_model_options, pp_test_fail_hang);
    F(xllm_model_options, backend);
    F(xllm_model_options, cpu_level);
    F(xllm_model_options, attention);
    F(xllm_model_options, no_fuse);
    F(xllm_model_options, no_repack);
    F(xllm_model_options, no_plan);
    F(xllm_model_options, profile);
    F(xllm_model_options, debug_checks);
    F(xllm_model_options, plan_cache);
    F(xllm_model_options, progress);
    F(xllm_model_options, progress_user);
    F(xllm_model_options, kv_dtype);
    F(xllm_model_options, arithmetic);
    F(xllm_model_options, device);
    S(xllm_sampling_params);
    F(xllm_sampling_params, max_new_tokens);
    F(xllm_sampling_params, do_sample);
    F(xllm_sampling_params, temperature);
    F(xllm_sampling_params, top_k);
    F(xllm_sampling_params, top_p);
    F(xllm_sampling_params, min_p);
    F(xllm_sampling_params, repetition_penalty);
    F(xllm_sampling_params, presence_penalty);
    F(xllm_sampling_params, frequency_penalty);
    F(xllm_sampling_params, seed);
    F(xllm_sampling_params, has_seed);
    F(xllm_sampling_params, ignore_eos);
    F(xllm_sampling_params, n_stop);
    F(xllm_sampling_params, stop);
    F(xllm_sampling_params, n_stop_ids);
    F(xllm_sampling_params, stop_ids);
    F(xllm_sampling_params, logprobs);
    F(xllm_sampling_params, top_logprobs);
    F(xllm_sampling_params, grammar_kind);
    F(xllm_sampling_params, grammar);
    F(xllm_sampling_params, grammar_prefix);
    F(xllm_sampling_params, grammar_suffix);
    S(xllm_request);
    F(xllm_request, prompt);
    F(xllm_request, prompt_ids);
    F(xllm_request, n_prompt_ids);
    F(xllm_request, params);
    F(xllm_request, n);
    F(xllm_request, priority);
    S(xllm_engine_options);
    F(xllm_engine_options, max_batch_size);
    F(xllm_engine_options, timeout_ms);
    F(xllm_engine_options, preempt_mode);
    F(xllm_engine_options, workspace_size);
    F(xllm_engine_options, swap_size);
    F(xllm_engine_options, cache_policy);
    F(xllm_engine_options, response_cache);
    F(xllm_engine_options, response_cache_max_bytes);
    F(xllm_engine_options, response_cache_max_entries);
    F(xllm_engine_options, n_knowledge);
    F(xllm_engine_options, knowledge_name);
    F(xllm_engine_options, knowledge_path);
    F(xllm_engine_options, knowledge_kv_path);
    F(xllm_engine_options, verbose);
    S(xllm_chunk);
    F(xllm_chunk, sample);
    F(xllm_chunk, ids);
    F(xllm_chunk, n_ids);
    F(xllm_chunk, text);
    F(xllm_chunk, text_len);
    F(xllm_chunk, text_ends);
    F(xllm_chunk, finished);
    F(xllm_chunk, finish_reason);
    F(xllm_chunk, logprobs);
    F(xllm_chunk, top_ids);
    F(xllm_chunk, top_logprobs);
    F(xllm_chunk, n_top);
    S(xllm_result);
    F(xllm_result, prompt_ids);
    F(xllm_result, n_prompt_ids);
    F(xllm_result, ids);
    F(xllm_result, n_ids);
    F(xllm_result, text);
    F(xllm_result, text_len);
    F(xllm_result, finish_reason);
    F(xllm_result, logprobs);
    F(xllm_result, top_ids);
    F(xllm_result, top_logprobs);
    F(xllm_result, n_top);
    F(xllm_result, first_token_s);
    F(xllm_result, decode_s);
    S(xllm_convert_options);
    F(xllm_convert_options, dtype);
    F(xllm_convert_options, group_size);
    F(xllm_convert_options, policy);
    F(xllm_convert_options, calib_file);
    F(xllm_convert_options, calib_tokens);
    F(xllm_convert_options, no_fuse);
    F(xllm_convert_options, n_threads);
    F(xllm_convert_options, progress);
    F(xllm_convert_options, progress_user);
    F(xllm_convert_options, to_gguf);
    F(xllm_convert_options, calib_model_options);
    S(xllm_param_info);
    F(xllm_param_info, name);
    F(xllm_param_info, http);
    F(xllm_param_info, cli);
    F(xllm_param_info, cli_alias);
    F(xllm_param_info, type);
    F(xllm_param_info, min);
    F(xllm_param_info, max);
    F(xllm_param_info, min_open);
    F(xllm_param_info, http_min);
    F(xllm_param_info, http_max);
    F(xllm_param_info, default_value);
    F(xllm_param_info, offset);
    F(xllm_param_info, cache_key);
    F(xllm_param_info, help);
    return 0;
}
