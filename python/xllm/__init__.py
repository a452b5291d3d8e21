"""xllm - Python API of the xLLM inference engine (ctypes over libxllm.so).

Standard library only. From the repository root after the build,
``PYTHONPATH=python python3 -c "import xllm"`` finds ``build/libxllm.so``;
elsewhere set ``XLLM_LIBRARY`` to the library's path.

    from xllm import LLM, SamplingParams
    llm = LLM("models/stories260k")
    llm.set_inference_params(max_new_tokens=300, repetition_penalty=1.2, do_sample=False, top_k=10)
    out = llm.generate(["Once upon a time"])
    print(out[0].text, out[0].token_ids)

Chat models render their chat template (tokenizer_config.json) exactly as
HuggingFace's apply_chat_template does:

    llm.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    llm.chat([{"role": "user", "content": "Hi"}], SamplingParams(max_new_tokens=50))
"""

import ctypes
import ctypes.util
import json
import os
import threading

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "ModelConverter", "ChatTemplate",
           "render_chat_template", "XLLMError", "library_path", "enable_profiling", "profile_report", "default_model"]

MAX_STOP_STRINGS = 16
MAX_STOP_IDS = 16
# xllm_grammar_kind (include/xllm.h)
GRAMMAR_NONE, GRAMMAR_JSON_SCHEMA, GRAMMAR_JSON_OBJECT, GRAMMAR_GBNF, GRAMMAR_REGEX = 0, 1, 2, 3, 4


class XLLMError(RuntimeError):
    """An error reported by libxllm (bad file, bad parameter, prompt too long...)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------- C layout

class _Error(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("message", ctypes.c_char * 1024)]


class _ModelOptions(ctypes.Structure):
    _fields_ = [("n_threads", ctypes.c_int), ("max_context", ctypes.c_int), ("kv_block_size", ctypes.c_int),
                ("max_batch_seqs", ctypes.c_int), ("kv_tokens", ctypes.c_int64), ("max_step_tokens", ctypes.c_int),
                # layer ranges and pipeline parallelism (MPI; the CLI's --pp)
                ("layer_begin", ctypes.c_int), ("layer_end", ctypes.c_int), ("pp_size", ctypes.c_int),
                ("pp_layers", ctypes.c_char_p), ("pp_microbatches", ctypes.c_int), ("pp_timeout_ms", ctypes.c_int),
                ("pp_stats", ctypes.c_int), ("pp_test_fail_after", ctypes.c_int), ("pp_test_fail_hang", ctypes.c_int),
                # execution switches (the XLLM_* environment variables, _options_from_env)
                ("backend", ctypes.c_char_p), ("cpu_level", ctypes.c_char_p), ("attention", ctypes.c_char_p),
                ("no_fuse", ctypes.c_int), ("no_repack", ctypes.c_int), ("no_plan", ctypes.c_int),
                ("profile", ctypes.c_int), ("debug_checks", ctypes.c_int), ("plan_cache", ctypes.c_char_p),
                # load progress (not used from Python)
                ("progress", ctypes.c_void_p), ("progress_user", ctypes.c_void_p),
                # KV cache storage: "f32" | "f16" | "q8" | "auto" (None: f32)
                ("kv_dtype", ctypes.c_char_p),
                # whose arithmetic: "xllm" | "llama" (None: xllm)
                ("arithmetic", ctypes.c_char_p),
                # which device a device backend ("vulkan") runs on (XLLM_DEVICE)
                ("device", ctypes.c_int)]


def _default_plan_cache():
    """The planner's cache file, as the CLI chooses it (tools/options_env.h): XLLM_PLAN_CACHE
    ("off" or "0": none), else $XDG_CACHE_HOME/xllm/plans.json, else ~/.cache/xllm/plans.json."""
    env = os.environ
    v = env.get("XLLM_PLAN_CACHE")
    if v is not None and v != "":
        return None if v in ("off", "0") else v
    base = env.get("XDG_CACHE_HOME") or (os.path.join(env["HOME"], ".cache") if env.get("HOME") else None)
    return os.path.join(base, "xllm", "plans.json") if base else None


def _options_from_env(opts):
    """The XLLM_* execution switches (as the CLI reads them, tools/options_env.h) into model options:
    the library itself never reads the environment."""
    env = os.environ
    for var, field in (("XLLM_BACKEND", "backend"), ("XLLM_CPU", "cpu_level"), ("XLLM_ATTN", "attention")):
        if env.get(var):
            setattr(opts, field, env[var].encode("utf-8"))
    if env.get("XLLM_DEVICE"):
        opts.device = int(env["XLLM_DEVICE"])
    for var, field in (("XLLM_FUSE", "no_fuse"), ("XLLM_REPACK", "no_repack"), ("XLLM_PLAN", "no_plan")):
        if env.get(var) == "0":
            setattr(opts, field, 1)
    for var, field in (("XLLM_PROFILE", "profile"), ("XLLM_DEBUG", "debug_checks")):
        if env.get(var, "0") not in ("", "0"):
            setattr(opts, field, 1)
    if env.get("XLLM_KV_DTYPE") and not opts.kv_dtype:  # an explicit kv_dtype wins
        opts.kv_dtype = env["XLLM_KV_DTYPE"].encode("utf-8")
    if env.get("XLLM_ARITH") and not opts.arithmetic:  # an explicit arithmetic wins
        opts.arithmetic = env["XLLM_ARITH"].encode("utf-8")
    pc = _default_plan_cache()
    if pc:
        opts.plan_cache = pc.encode("utf-8")
    return opts


class _SamplingParams(ctypes.Structure):
    _fields_ = [("max_new_tokens", ctypes.c_int), ("do_sample", ctypes.c_int), ("temperature", ctypes.c_float),
                ("top_k", ctypes.c_int), ("top_p", ctypes.c_float), ("min_p", ctypes.c_float),
                ("repetition_penalty", ctypes.c_float), ("presence_penalty", ctypes.c_float),
                ("frequency_penalty", ctypes.c_float), ("seed", ctypes.c_uint64), ("has_seed", ctypes.c_int),
                ("ignore_eos", ctypes.c_int), ("n_stop", ctypes.c_int),
                ("stop", ctypes.c_char_p * MAX_STOP_STRINGS), ("n_stop_ids", ctypes.c_int),
                ("stop_ids", ctypes.c_int32 * MAX_STOP_IDS), ("logprobs", ctypes.c_int),
                ("top_logprobs", ctypes.c_int), ("grammar_kind", ctypes.c_int),
                ("grammar", ctypes.c_char_p), ("grammar_prefix", ctypes.c_char_p),
                ("grammar_suffix", ctypes.c_char_p)]


class _ParamInfo(ctypes.Structure):
    """xllm_param_info: one row of the sampling parameters' table (xllm_sampling_params_table)."""
    _fields_ = [("name", ctypes.c_char_p), ("http", ctypes.c_char_p), ("cli", ctypes.c_char_p),
                ("cli_alias", ctypes.c_char_p), ("type", ctypes.c_int), ("min", ctypes.c_double),
                ("max", ctypes.c_double), ("min_open", ctypes.c_int), ("http_min", ctypes.c_double),
                ("http_max", ctypes.c_double), ("default_value", ctypes.c_double), ("offset", ctypes.c_size_t),
                ("cache_key", ctypes.c_int), ("help", ctypes.c_char_p)]


class _Request(ctypes.Structure):
    _fields_ = [("prompt", ctypes.c_char_p), ("prompt_ids", ctypes.POINTER(ctypes.c_int32)),
                ("n_prompt_ids", ctypes.c_size_t), ("params", _SamplingParams), ("n", ctypes.c_int),
                ("priority", ctypes.c_int)]


MAX_KNOWLEDGE = 16
MAX_SAMPLES = 64


class _EngineOptions(ctypes.Structure):
    _fields_ = [("max_batch_size", ctypes.c_int), ("timeout_ms", ctypes.c_int), ("preempt_mode", ctypes.c_int),
                ("workspace_size", ctypes.c_int64), ("swap_size", ctypes.c_int64), ("cache_policy", ctypes.c_int),
                ("response_cache", ctypes.c_int), ("response_cache_max_bytes", ctypes.c_int64),
                ("response_cache_max_entries", ctypes.c_int), ("n_knowledge", ctypes.c_int),
                ("knowledge_name", ctypes.c_char_p * MAX_KNOWLEDGE),
                ("knowledge_path", ctypes.c_char_p * MAX_KNOWLEDGE),
                ("knowledge_kv_path", ctypes.c_char_p * MAX_KNOWLEDGE), ("verbose", ctypes.c_int)]


class _Chunk(ctypes.Structure):
    _fields_ = [("sample", ctypes.c_int), ("ids", ctypes.POINTER(ctypes.c_int32)), ("n_ids", ctypes.c_size_t),
                ("text", ctypes.c_void_p), ("text_len", ctypes.c_size_t),
                ("text_ends", ctypes.POINTER(ctypes.c_uint32)), ("finished", ctypes.c_int),
                ("finish_reason", ctypes.c_int), ("logprobs", ctypes.POINTER(ctypes.c_float)),
                ("top_ids", ctypes.POINTER(ctypes.c_int32)), ("top_logprobs", ctypes.POINTER(ctypes.c_float)),
                ("n_top", ctypes.c_int)]


_POLL_TIMEOUT, _POLL_CHUNK, _POLL_DONE, _POLL_ERROR = 0, 1, 2, -1
_PREEMPT_MODES = {"recompute": 0, "swap": 1, "elastic": 2}
_PRIORITIES = {"online": 0, "offline": 1}


class _Result(ctypes.Structure):
    _fields_ = [("prompt_ids", ctypes.POINTER(ctypes.c_int32)), ("n_prompt_ids", ctypes.c_size_t),
                ("ids", ctypes.POINTER(ctypes.c_int32)), ("n_ids", ctypes.c_size_t),
                ("text", ctypes.c_void_p), ("text_len", ctypes.c_size_t), ("finish_reason", ctypes.c_int),
                ("logprobs", ctypes.POINTER(ctypes.c_float)), ("top_ids", ctypes.POINTER(ctypes.c_int32)),
                ("top_logprobs", ctypes.POINTER(ctypes.c_float)), ("n_top", ctypes.c_int),
                ("first_token_s", ctypes.c_double), ("decode_s", ctypes.c_double)]


_ProgressCallback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double)


class _ConvertOptions(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_char_p), ("group_size", ctypes.c_int), ("policy", ctypes.c_char_p),
                ("calib_file", ctypes.c_char_p), ("calib_tokens", ctypes.c_int), ("no_fuse", ctypes.c_int),
                ("n_threads", ctypes.c_int), ("progress", _ProgressCallback), ("progress_user", ctypes.c_void_p),
                ("to_gguf", ctypes.c_int), ("calib_model_options", ctypes.POINTER(_ModelOptions))]


_TokenCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32,
                                  ctypes.c_void_p, ctypes.c_size_t)


def library_path():
    """Where libxllm.so is looked for: $XLLM_LIBRARY, the repository's build/, the system."""
    env = os.environ.get("XLLM_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    recorded = os.path.join(here, "_library_path")  # written by `cmake --install`
    if os.path.exists(recorded):
        with open(recorded) as f:
            cand = f.read().strip()
        if os.path.exists(cand):
            return cand
    for rel in ("../../build/libxllm.so", "libxllm.so"):
        cand = os.path.normpath(os.path.join(here, rel))
        if os.path.exists(cand):
            return cand
    found = ctypes.util.find_library("xllm")
    if found:
        return found
    raise OSError("libxllm.so not found: build the project (cmake -B build && cmake --build build) "
                  "or set XLLM_LIBRARY")


def _load_library():
    lib = ctypes.CDLL(library_path())
    P = ctypes.POINTER
    sig = {
        "xllm_free": (None, [ctypes.c_void_p]),
        "xllm_model_options_default": (_ModelOptions, []),
        "xllm_model_load": (ctypes.c_void_p, [ctypes.c_char_p, P(_ModelOptions), P(_Error)]),
        "xllm_model_free": (None, [ctypes.c_void_p]),
        "xllm_model_tokenizer": (ctypes.c_void_p, [ctypes.c_void_p]),
        "xllm_model_vocab_size": (ctypes.c_int32, [ctypes.c_void_p]),
        "xllm_model_context_size": (ctypes.c_int32, [ctypes.c_void_p]),
        "xllm_model_logits": (ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_int32), ctypes.c_size_t, ctypes.c_int,
                                             P(ctypes.c_float), P(_Error)]),
        "xllm_model_hidden_size": (ctypes.c_int32, [ctypes.c_void_p]),
        "xllm_model_attention": (ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_int32), ctypes.c_size_t,
                                                P(ctypes.c_int32), ctypes.c_size_t, ctypes.c_int,
                                                P(ctypes.c_void_p), P(ctypes.c_int64), P(_Error)]),
        "xllm_model_embed": (ctypes.c_int, [ctypes.c_void_p, P(P(ctypes.c_int32)), P(ctypes.c_size_t), ctypes.c_size_t,
                                            ctypes.c_int, ctypes.c_int, P(ctypes.c_float), P(_Error)]),
        "xllm_sampling_params_default": (_SamplingParams, []),
        "xllm_sampling_params_table": (P(_ParamInfo), [P(ctypes.c_size_t)]),
        "xllm_generate": (ctypes.c_int, [ctypes.c_void_p, P(_Request), ctypes.c_size_t, _TokenCallback,
                                         ctypes.c_void_p, P(P(_Result)), P(_Error)]),
        "xllm_results_free": (None, [P(_Result), ctypes.c_size_t]),
        "xllm_engine_options_default": (_EngineOptions, []),
        "xllm_config_load": (ctypes.c_int, [ctypes.c_char_p, P(_EngineOptions), P(_ModelOptions),
                                            P(ctypes.c_char_p), P(ctypes.c_void_p), P(_Error)]),
        "xllm_engine_create": (ctypes.c_void_p, [ctypes.c_void_p, P(_EngineOptions), P(_Error)]),
        "xllm_engine_free": (None, [ctypes.c_void_p]),
        "xllm_model_engine": (ctypes.c_void_p, [ctypes.c_void_p]),
        "xllm_engine_submit": (ctypes.c_int, [ctypes.c_void_p, P(_Request), ctypes.c_void_p, ctypes.c_void_p,
                                              P(ctypes.c_uint64), P(_Error)]),
        "xllm_engine_poll": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, P(_Chunk), ctypes.c_int, P(_Error)]),
        "xllm_engine_abort": (None, [ctypes.c_void_p, ctypes.c_uint64]),
        "xllm_engine_result": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, P(P(_Result)),
                                              P(ctypes.c_size_t), P(_Error)]),
        "xllm_engine_release": (None, [ctypes.c_void_p, ctypes.c_uint64]),
        "xllm_engine_stats": (ctypes.c_void_p, [ctypes.c_void_p]),
        "xllm_engine_add_knowledge": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, P(_Error)]),
        "xllm_engine_save_knowledge": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                                      P(_Error)]),
        "xllm_engine_load_knowledge": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                                      ctypes.c_char_p, P(_Error)]),
        "xllm_convert_options_default": (_ConvertOptions, []),
        "xllm_convert": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, P(_ConvertOptions), P(_Error)]),
        "xllm_model_info": (ctypes.c_int, [ctypes.c_char_p, P(ctypes.c_void_p), P(_Error)]),
        "xllm_backend_devices": (ctypes.c_int, [P(ctypes.c_void_p), P(_Error)]),
        "xllm_chat_template_render": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                                     P(ctypes.c_void_p), P(ctypes.c_size_t), P(_Error)]),
        "xllm_chat_template_load": (ctypes.c_void_p, [ctypes.c_char_p, P(_Error)]),
        "xllm_chat_template_free": (None, [ctypes.c_void_p]),
        "xllm_chat_template_apply": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                                    P(ctypes.c_void_p), P(ctypes.c_size_t), P(_Error)]),
        "xllm_chat_template_source": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]),
        "xllm_chat_template_special_token": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_char_p]),
        "xllm_tokenize": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                         P(P(ctypes.c_int32)), P(ctypes.c_size_t), P(_Error)]),
        "xllm_tokenize_ex": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint,
                                            P(P(ctypes.c_int32)), P(ctypes.c_size_t), P(_Error)]),
        "xllm_detokenize": (ctypes.c_int, [ctypes.c_void_p, P(ctypes.c_int32), ctypes.c_size_t, ctypes.c_int,
                                           P(ctypes.c_void_p), P(ctypes.c_size_t), P(_Error)]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


_lib = None


def _library():
    global _lib
    if _lib is None:
        _lib = _load_library()
    return _lib


def _raise(err):
    raise XLLMError(err.code, err.message.decode("utf-8", "replace"))


def _check_int(name, value, lo, hi):
    """Integers reach C through fixed-width fields: refuse what does not fit, naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("%s must be an integer (got %r)" % (name, value))
    if not lo <= value <= hi:
        raise ValueError("%s = %d is out of range (%d..%d)" % (name, value, lo, hi))
    return value


def _check_float(name, value, lo=-3.4028234663852886e38, hi=3.4028234663852886e38):
    """Floats reach C as float32: refuse NaN, infinities and what a float cannot hold, naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("%s must be a number (got %r)" % (name, value))
    if not (lo <= value <= hi):  # also false for NaN
        raise ValueError("%s = %r is out of range (%g..%g)" % (name, value, lo, hi))
    return float(value)


# ------------------------------------------------------------ public types

def sampling_params_table():
    """The library's table of scalar sampling parameters: one dict per row
    (name, http, cli, cli_alias, type, min, max, min_open, http_min, http_max,
    default, cache_key, help) - the same rows the server, the CLI and the
    response cache read."""
    global _PARAM_TABLE
    if _PARAM_TABLE is None:
        n = ctypes.c_size_t()
        rows = _library().xllm_sampling_params_table(ctypes.byref(n))
        dec = lambda b: b.decode("utf-8") if b is not None else None
        _PARAM_TABLE = [dict(name=dec(r.name), http=dec(r.http), cli=dec(r.cli), cli_alias=dec(r.cli_alias),
                             type=("float", "int", "bool")[r.type], min=r.min, max=r.max, min_open=bool(r.min_open),
                             http_min=r.http_min, http_max=r.http_max, default=r.default_value,
                             cache_key=bool(r.cache_key), help=dec(r.help), offset=r.offset)
                        for r in (rows[i] for i in range(n.value))]
    return _PARAM_TABLE


_PARAM_TABLE = None


class SamplingParams:
    """Per-request generation settings (HF generate / OpenAI names).

    do_sample=False (or temperature 0) means greedy; top_k/top_p/min_p apply
    only when sampling. repetition_penalty is HF's multiplicative penalty over
    prompt and output; presence/frequency penalties are OpenAI's additive ones
    over the output. stop: strings that end generation (cut from the text).
    Constrained decoding (at most one): json_schema (a dict or its JSON text),
    json_object=True (any JSON object), grammar (llama.cpp GBNF text, root rule
    "root"), regex (the whole output matches it); an unsupported schema feature
    raises XLLMError naming it at generate / submit.
    """

    _FIELDS = ("max_new_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
               "presence_penalty", "frequency_penalty", "seed", "stop", "stop_token_ids", "do_sample", "ignore_eos",
               "n", "priority", "logprobs", "json_schema", "json_object", "grammar", "regex")

    def __init__(self, max_new_tokens=256, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                 repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, seed=None,
                 stop=None, stop_token_ids=None, do_sample=True, ignore_eos=False, max_tokens=None, n=1,
                 priority="online", logprobs=None, json_schema=None, json_object=False, grammar=None, regex=None):
        self.max_new_tokens = max_tokens if max_tokens is not None else max_new_tokens
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p
        self.min_p = min_p
        self.repetition_penalty = repetition_penalty
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.seed = seed
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop_token_ids = list(stop_token_ids or [])
        self.do_sample = do_sample
        self.ignore_eos = ignore_eos
        self.n = n
        self.priority = priority
        self.logprobs = logprobs  # None = off; k = each token's log-probability and the k most likely ids
        self.json_schema = json_schema
        self.json_object = json_object
        self.grammar = grammar
        self.regex = regex

    def replace(self, **kw):
        """A copy with some fields changed (unknown names are an error)."""
        out = SamplingParams()
        for f in self._FIELDS:
            setattr(out, f, getattr(self, f))
        for k, v in kw.items():
            if k == "max_tokens":
                k = "max_new_tokens"
            if k not in self._FIELDS:
                raise TypeError("unknown sampling parameter: %s" % k)
            if k == "stop":
                v = [v] if isinstance(v, str) else list(v or [])
            setattr(out, k, v)
        return out

    def _to_c(self, keep):
        _check_int("max_new_tokens", self.max_new_tokens, -(1 << 31), (1 << 31) - 1)
        _check_int("top_k", self.top_k or 0, -(1 << 31), (1 << 31) - 1)
        if self.seed is not None:
            _check_int("seed", self.seed, 0, (1 << 64) - 1)
        p = _library().xllm_sampling_params_default()
        p.max_new_tokens = int(self.max_new_tokens)
        p.do_sample = 1 if self.do_sample else 0
        p.top_k = int(self.top_k or 0)
        for row in sampling_params_table():  # the float parameters, by the library's table
            if row["type"] == "float" and hasattr(self, row["name"]):
                setattr(p, row["name"], _check_float(row["name"], getattr(self, row["name"])))
        if self.seed is not None:
            p.seed = int(self.seed) & 0xFFFFFFFFFFFFFFFF
            p.has_seed = 1
        p.ignore_eos = 1 if self.ignore_eos else 0
        if self.logprobs is not None:
            p.logprobs = 1
            p.top_logprobs = _check_int("logprobs", self.logprobs, 0, 20)
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ValueError("at most %d stop strings" % MAX_STOP_STRINGS)
        for i, s in enumerate(self.stop):
            b = s.encode("utf-8")
            keep.append(b)
            p.stop[i] = b
        p.n_stop = len(self.stop)
        if len(self.stop_token_ids) > MAX_STOP_IDS:
            raise ValueError("at most %d stop token ids" % MAX_STOP_IDS)
        for i, t in enumerate(self.stop_token_ids):
            p.stop_ids[i] = int(t)
        p.n_stop_ids = len(self.stop_token_ids)
        self._constraint_to_c(p, keep)
        return p

    def _constraint_to_c(self, p, keep):
        given = [k for k in ("json_schema", "grammar", "regex") if getattr(self, k) is not None]
        if self.json_object:
            given.append("json_object")
        if len(given) > 1:
            raise ValueError("give one constraint, not %s" % " and ".join(given))
        if not given:
            return
        kind = given[0]
        if kind == "json_object":
            p.grammar_kind = GRAMMAR_JSON_OBJECT
            return
        text = getattr(self, kind)
        if kind == "json_schema" and not isinstance(text, str):
            text = json.dumps(text)
        if not isinstance(text, str):
            raise TypeError("%s must be a string" % kind)
        b = text.encode("utf-8")
        keep.append(b)
        p.grammar = b
        p.grammar_kind = {"json_schema": GRAMMAR_JSON_SCHEMA, "grammar": GRAMMAR_GBNF, "regex": GRAMMAR_REGEX}[kind]

    def __repr__(self):
        return "SamplingParams(%s)" % ", ".join("%s=%r" % (f, getattr(self, f)) for f in self._FIELDS)


class CompletionOutput:
    """One sample of a request: .index, .text, .token_ids, .finish_reason, and with
    SamplingParams(logprobs=k): .logprobs (per token) and .top_logprobs (per token,
    a list of (token_id, logprob), most likely first). .first_token_s: seconds from
    submission to the first token; .decode_s: from the first token to the last (the
    engine's clock; 0 for a response-cache hit)."""

    def __init__(self, index, token_ids, text, finish_reason, logprobs=None, top_logprobs=None,
                 first_token_s=0.0, decode_s=0.0):
        self.first_token_s = first_token_s
        self.decode_s = decode_s
        self.index = index
        self.token_ids = token_ids
        self.text = text
        self.finish_reason = finish_reason
        self.logprobs = logprobs
        self.top_logprobs = top_logprobs

    def __repr__(self):
        return "CompletionOutput(index=%d, text=%r, finish_reason=%r)" % (self.index, self.text, self.finish_reason)


class RequestOutput:
    """One generation result: .text, .token_ids (generated only), .prompt_token_ids, .finish_reason
    (of the first sample), and .outputs: every sample (n > 1) as CompletionOutput."""

    _REASONS = {0: "length", 1: "stop", 2: "cancelled"}

    def __init__(self, prompt, prompt_token_ids, token_ids, text, finish_reason, outputs=None):
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.token_ids = token_ids
        self.text = text
        self.finish_reason = finish_reason
        self.outputs = outputs if outputs is not None else [CompletionOutput(0, token_ids, text, finish_reason)]

    def __repr__(self):
        return "RequestOutput(text=%r, token_ids=%r, finish_reason=%r)" % (self.text, self.token_ids,
                                                                           self.finish_reason)


# ----------------------------------------------------------- chat templates

def _template_options(add_generation_prompt, tools, template_vars):
    opts = dict(template_vars)
    opts["add_generation_prompt"] = bool(add_generation_prompt)
    if tools is not None:
        opts["tools"] = tools
    return json.dumps(opts, ensure_ascii=False).encode("utf-8")


def _messages_json(messages):
    return json.dumps(list(messages), ensure_ascii=False).encode("utf-8")


def _take_text(lib, out, n):
    text = ctypes.string_at(out.value, n.value).decode("utf-8") if out.value else ""
    lib.xllm_free(out)
    return text


def render_chat_template(source, messages, add_generation_prompt=False, tools=None, **template_vars):
    """Render a Jinja2 chat template string the way HF's apply_chat_template
    does (special tokens such as bos_token are ordinary keyword variables here)."""
    lib = _library()
    out = ctypes.c_void_p()
    n = ctypes.c_size_t()
    err = _Error()
    if lib.xllm_chat_template_render(source.encode("utf-8"), _messages_json(messages),
                                     _template_options(add_generation_prompt, tools, template_vars),
                                     ctypes.byref(out), ctypes.byref(n), ctypes.byref(err)):
        _raise(err)
    return _take_text(lib, out, n)


class ChatTemplate:
    """The chat template(s) of a model or tokenizer directory (tokenizer_config.json's
    "chat_template", or chat_template.jinja), with its special tokens.

        ChatTemplate("path/to/model").apply(messages, add_generation_prompt=True, enable_thinking=False)
    """

    def __init__(self, path):
        lib = _library()
        self._lib = lib
        self._h = None
        err = _Error()
        h = lib.xllm_chat_template_load(os.fspath(path).encode("utf-8"), ctypes.byref(err))
        if not h:
            _raise(err)
        self._h = h

    def close(self):
        if self._h:
            self._lib.xllm_chat_template_free(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def apply(self, messages, add_generation_prompt=False, tools=None, chat_template=None, **template_vars):
        """HF's apply_chat_template(messages, tokenize=False, ...): the rendered text.
        chat_template: the name of one of the model's templates (default: HF's
        choice, "tool_use" when tools are given and it exists, else "default")
        or a template string."""
        if not self._h:
            raise XLLMError(1, "the chat template is closed")
        name = None
        if chat_template is not None:
            if self.source(chat_template) is not None:
                name = chat_template
            else:  # a template string, with this model's special tokens
                special = {k: v for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                                          "cls_token", "mask_token")
                           for v in [self.special_token(k)] if v is not None}
                return render_chat_template(chat_template, messages, add_generation_prompt, tools,
                                            **{**special, **template_vars})
        out = ctypes.c_void_p()
        n = ctypes.c_size_t()
        err = _Error()
        if self._lib.xllm_chat_template_apply(self._h, name.encode("utf-8") if name else None,
                                              _messages_json(messages),
                                              _template_options(add_generation_prompt, tools, template_vars),
                                              ctypes.byref(out), ctypes.byref(n), ctypes.byref(err)):
            _raise(err)
        return _take_text(self._lib, out, n)

    def source(self, name=None):
        """The source of a named template (None: "default"), or None."""
        s = self._lib.xllm_chat_template_source(self._h, name.encode("utf-8") if name else None)
        return s.decode("utf-8") if s is not None else None

    def special_token(self, name):
        """A special token's text ("bos_token", "eos_token", ...), or None."""
        s = self._lib.xllm_chat_template_special_token(self._h, name.encode("utf-8"))
        return s.decode("utf-8") if s is not None else None


class LLM:
    """A loaded model and the serving engine that runs it.

        LLM("models/stories260k")                 # a HF directory, an .xllm or a GGUF file
        LLM(config="engine.yaml")                 # model, threads, context and engine from YAML
        LLM("other/model", config="engine.yaml")  # the path given overrides the config's model:

    Engine options (also YAML keys, docs/CONFIG.md): max_batch_size, timeout_ms,
    preempt_mode ("recompute" | "swap" | "elastic"), workspace_size (bytes),
    cache_policy ("lru" | "none"), response_cache (bool). Several Python threads
    may call generate/stream on one LLM at once: their requests batch together.
    kv_dtype: how the KV cache stores K and V, "f32" (default), "f16", "q8" (int8 with
    an f16 scale per 32 values: 0.27x of f32's memory) or "auto" (the widest that fits
    the batch's full contexts in the KV budget; stats()["kv_dtype"] says which).
    arithmetic: "xllm" (default) or "llama": llama.cpp's CPU arithmetic where it differs
    from ours, for its numbers on its GGUF files (use with kv_dtype="f16"; XLLM_ARITH).
    backend: "cpu" (default) or "vulkan" (a GPU through Vulkan; devices() lists them), and
    device: which of its devices (0 = the first); XLLM_BACKEND / XLLM_DEVICE when not given.
    """

    def __init__(self, model=None, n_threads=0, max_context=0, max_batch_seqs=0, kv_tokens=0, config=None,
                 kv_dtype=None, arithmetic=None, backend=None, device=None, **engine_options):
        lib = _library()
        self._lib = lib
        self._model = None
        self._engine = None
        self._own_engine = False
        self._chat_template = None  # set before anything can fail: close() reads it
        opts = lib.xllm_model_options_default()
        eopts = lib.xllm_engine_options_default()
        storage = ctypes.c_void_p()
        err = _Error()
        if config is not None:
            mpath = ctypes.c_char_p()
            if lib.xllm_config_load(os.fspath(config).encode("utf-8"), ctypes.byref(eopts), ctypes.byref(opts),
                                    ctypes.byref(mpath), ctypes.byref(storage), ctypes.byref(err)):
                _raise(err)
            if model is None and mpath.value:
                model = mpath.value.decode("utf-8")
        try:
            if model is None:
                raise ValueError("no model: give a path, or a config with model:")
            for name, v in (("n_threads", n_threads), ("max_context", max_context),
                            ("max_batch_seqs", max_batch_seqs)):
                if _check_int(name, v, 0, (1 << 31) - 1):
                    setattr(opts, name, v)
            if _check_int("kv_tokens", kv_tokens, 0, (1 << 62)):
                opts.kv_tokens = kv_tokens
            if kv_dtype is not None:
                if kv_dtype not in ("f32", "f16", "q8", "auto"):
                    raise ValueError("kv_dtype must be f32, f16, q8 or auto")
                opts.kv_dtype = kv_dtype.encode("utf-8")
            if arithmetic is not None:
                if arithmetic not in ("xllm", "llama"):
                    raise ValueError("arithmetic must be xllm or llama")
                opts.arithmetic = arithmetic.encode("utf-8")
            for k, v in engine_options.items():
                if k == "preempt_mode":
                    if v not in _PREEMPT_MODES:
                        raise ValueError("preempt_mode must be one of %s" % ", ".join(_PREEMPT_MODES))
                    v = _PREEMPT_MODES[v]
                elif k == "cache_policy":
                    if v not in ("lru", "none"):
                        raise ValueError("cache_policy must be lru or none")
                    v = 0 if v == "lru" else 1
                elif k in ("max_batch_size", "timeout_ms", "response_cache_max_entries"):
                    _check_int(k, v, 0, (1 << 31) - 1)
                elif k in ("workspace_size", "swap_size", "response_cache_max_bytes"):
                    _check_int(k, v, -1, (1 << 62))
                elif k in ("response_cache", "verbose"):
                    v = 1 if v else 0
                else:
                    raise TypeError("unknown engine option: %s" % k)
                setattr(eopts, k, v)
            _options_from_env(opts)
            if backend is not None:  # explicit arguments win over the environment
                if backend not in ("cpu", "vulkan"):
                    raise ValueError("backend must be cpu or vulkan")
                opts.backend = backend.encode("utf-8")
            if device is not None:
                _check_int("device", device, 0, 15)
                opts.device = device
            handle = lib.xllm_model_load(os.fspath(model).encode("utf-8"), ctypes.byref(opts), ctypes.byref(err))
            if not handle:
                _raise(err)
            self._model = handle
            if config is not None or engine_options:
                eng = lib.xllm_engine_create(handle, ctypes.byref(eopts), ctypes.byref(err))
                if not eng:
                    self.close()
                    _raise(err)
                self._engine = eng
                self._own_engine = True
            else:
                self._engine = lib.xllm_model_engine(handle)
        finally:
            if storage.value:
                lib.xllm_free(storage)
        self._tok = lib.xllm_model_tokenizer(handle)
        self.path = os.fspath(model)
        self.vocab_size = lib.xllm_model_vocab_size(handle)
        self.context_size = lib.xllm_model_context_size(handle)
        self._defaults = SamplingParams()
        self._chat_template = None
        self._cv = threading.Condition()
        self._calls = 0
        self._close_pending = False
        self._tls = threading.local()

    # -- lifetime
    def close(self):
        """Free the model. Waits for generate calls in other threads; called from
        inside a callback, it takes effect when that generate returns."""
        cv = getattr(self, "_cv", None)
        if cv is None:
            return self._close_now()
        with cv:
            if getattr(self._tls, "in_callback", 0):
                self._close_pending = True
                return
            while self._calls:
                cv.wait()
            self._close_now()

    def _begin(self):
        with self._cv:
            if not self._model or self._close_pending:
                raise XLLMError(1, "the model is closed")
            self._calls += 1

    def _end(self):
        with self._cv:
            self._calls -= 1
            if self._calls == 0:
                if self._close_pending:
                    self._close_now()
                self._cv.notify_all()

    def _call_back(self, fn, *args):
        self._tls.in_callback = getattr(self._tls, "in_callback", 0) + 1
        try:
            return fn(*args)
        finally:
            self._tls.in_callback -= 1

    def _close_now(self):
        if self._chat_template is not None:
            self._chat_template.close()
            self._chat_template = None
        if self._own_engine and self._engine:
            self._lib.xllm_engine_free(self._engine)
        self._engine = None
        self._own_engine = False
        if self._model:
            self._lib.xllm_model_free(self._model)
            self._model = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self):
        if not self._model:
            raise XLLMError(1, "the model is closed")

    # -- defaults
    def set_inference_params(self, **kw):
        """Set the defaults later generate() calls use, e.g.
        set_inference_params(max_new_tokens=300, repetition_penalty=1.2, do_sample=False, top_k=10)."""
        self._defaults = self._defaults.replace(**kw)
        return self._defaults

    @property
    def inference_params(self):
        return self._defaults

    # -- tokenizer
    def tokenize(self, text, add_special_tokens=True, parse_special=True):
        """Token ids of text. parse_special=False: special-token text (e.g. "</s>") stays
        plain text (xllm_tokenize_ex without XLLM_TOKENIZE_PARSE_SPECIAL)."""
        self._check_open()
        if not self._tok:
            raise XLLMError(1, "this model has no tokenizer")
        b = text.encode("utf-8")
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t()
        err = _Error()
        flags = (1 if add_special_tokens else 0) | (2 if parse_special else 0)
        if self._lib.xllm_tokenize_ex(self._tok, b, len(b), flags, ctypes.byref(ids), ctypes.byref(n),
                                      ctypes.byref(err)):
            _raise(err)
        out = ids[:n.value]
        self._lib.xllm_free(ids)
        return out

    def detokenize(self, ids, skip_special_tokens=True):
        self._check_open()
        if not self._tok:
            raise XLLMError(1, "this model has no tokenizer")
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        text = ctypes.c_void_p()
        n = ctypes.c_size_t()
        err = _Error()
        if self._lib.xllm_detokenize(self._tok, arr, len(ids), 1 if skip_special_tokens else 0,
                                     ctypes.byref(text), ctypes.byref(n), ctypes.byref(err)):
            _raise(err)
        out = ctypes.string_at(text.value, n.value).decode("utf-8", "replace")
        self._lib.xllm_free(text)
        return out

    # -- model
    def logits(self, ids, all_positions=False):
        """Logits for a token sequence (no BOS added): the last position as a
        list, or every position as a list of lists."""
        self._check_open()
        n = len(ids)
        rows = n if all_positions else 1
        out = (ctypes.c_float * (rows * self.vocab_size))()
        arr = (ctypes.c_int32 * max(n, 1))(*ids)
        err = _Error()
        if self._lib.xllm_model_logits(self._model, arr, n, 1 if all_positions else 0, out, ctypes.byref(err)):
            _raise(err)
        V = self.vocab_size
        if not all_positions:
            return list(out)
        return [list(out[i * V:(i + 1) * V]) for i in range(n)]

    def attention(self, prompt, layers=None, average_heads=False):
        """Attention probabilities of a prompt: a str (tokenized with the
        model's special tokens) or a list of token ids (used as given).

        Computed on a reference path from each layer's q and k (after q/k norm
        and RoPE), with the family's scale, soft-cap, sliding window, causal
        mask and grouped-query heads (xllm_model_attention in xllm.h).
        layers: None (every layer), a list of layer indices, or one int.
        Returns nested lists [layer][head][query][key] of floats; masked
        entries are 0 and each query's row sums to 1. average_heads=True
        drops the head level ([layer][query][key], the mean over query heads);
        an int for layers drops the layer level."""
        self._check_open()
        ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
        one = isinstance(layers, int)
        want = [layers] if one else (None if layers is None else list(layers))
        n = len(ids)
        arr = (ctypes.c_int32 * max(n, 1))(*ids)
        larr = None if want is None else (ctypes.c_int32 * max(len(want), 1))(*want)
        p = ctypes.c_void_p()
        shape = (ctypes.c_int64 * 4)()
        err = _Error()
        if self._lib.xllm_model_attention(self._model, arr, n, larr, 0 if want is None else len(want),
                                          1 if average_heads else 0, ctypes.byref(p), shape, ctypes.byref(err)):
            _raise(err)
        L, H = shape[0], shape[1]
        try:
            flat = list((ctypes.c_float * (L * H * n * n)).from_address(p.value))
        finally:
            self._lib.xllm_free(p)
        rows = [flat[i * n:(i + 1) * n] for i in range(L * H * n)]
        mats = [rows[i * n:(i + 1) * n] for i in range(L * H)]
        out = [mats[i * H:(i + 1) * H] for i in range(L)]
        if average_heads:
            out = [m[0] for m in out]
        return out[0] if one else out

    _POOLING = {"mean": 0, "last": 1, "cls": 2}

    def embed(self, inputs, pooling="mean", normalize=True):
        """Embeddings of token-id lists (no BOS added) or strings (tokenized
        with the model's special tokens): one list of hidden-size floats per
        input, the final hidden states pooled ("mean", "last" or "cls") and
        L2-normalized unless normalize=False. Inputs share forward passes."""
        self._check_open()
        if pooling not in self._POOLING:
            raise ValueError("pooling must be one of %s" % ", ".join(self._POOLING))
        seqs = [self.tokenize(x) if isinstance(x, str) else list(x) for x in inputs]
        k = len(seqs)
        H = self._lib.xllm_model_hidden_size(self._model)
        arrs = [(ctypes.c_int32 * max(len(q), 1))(*q) for q in seqs]
        ptrs = (ctypes.POINTER(ctypes.c_int32) * max(k, 1))(*[ctypes.cast(a, ctypes.POINTER(ctypes.c_int32)) for a in arrs])
        lens = (ctypes.c_size_t * max(k, 1))(*[len(q) for q in seqs])
        out = (ctypes.c_float * max(k * H, 1))()
        err = _Error()
        if self._lib.xllm_model_embed(self._model, ptrs, lens, k, self._POOLING[pooling], 1 if normalize else 0, out,
                                      ctypes.byref(err)):
            _raise(err)
        return [list(out[i * H:(i + 1) * H]) for i in range(k)]

    def generate(self, prompts, sampling_params=None, callback=None, **overrides):
        """Generate for one prompt or a list of prompts in one batched call.

        A prompt is a str (tokenized with the model's special tokens, e.g. BOS)
        or a list of token ids (used as given). sampling_params: one
        SamplingParams for all, or a list (one per prompt); unset means the
        defaults from set_inference_params; keyword overrides apply on top.
        callback(index, token_id, text_piece) streams tokens; return True to
        stop that request. Returns a list of RequestOutput.
        """
        self._check_open()
        single = isinstance(prompts, str) or (isinstance(prompts, (list, tuple)) and prompts
                                              and isinstance(prompts[0], int))
        if single:
            prompts = [prompts]
        prompts = list(prompts)
        n = len(prompts)
        if n == 0:
            return []
        if sampling_params is None:
            params = [self._defaults] * n
        elif isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * n
        else:
            params = list(sampling_params)
            if len(params) != n:
                raise ValueError("got %d sampling_params for %d prompts" % (len(params), n))
        if overrides:
            params = [p.replace(**overrides) for p in params]

        keep = []
        reqs = [self._request(pr, sp, keep) for pr, sp in zip(prompts, params)]
        ids = []
        self._begin()
        try:
            for i, r in enumerate(reqs):
                ids.append(self._submit(r, i if n > 1 else None))
            out = [None] * n
            pending = list(range(n))
            stopped = {}  # request -> (ids, text) the callback saw before asking to stop
            seen = [[0, ""] for _ in range(n)]
            while pending:
                first = True
                for i in list(pending):
                    # block briefly on the oldest unfinished request only; the others are drained
                    chunks, done = self._drain(ids[i], 100 if first else 0)
                    first = False
                    for c in chunks:
                        if callback is None or i in stopped or c["sample"] != 0:
                            continue
                        for k, (tok, piece) in enumerate(c["tokens"]):
                            seen[i][0] += 1
                            seen[i][1] += piece
                            if self._call_back(callback, i, tok, piece):
                                if not (c["finished"] and k + 1 == len(c["tokens"])):
                                    stopped[i] = tuple(seen[i])
                                    self._lib.xllm_engine_abort(self._engine, ids[i])
                                break
                    if done:
                        out[i] = self._result(ids[i], prompts[i])
                        ids[i] = None
                        pending.remove(i)
                        if i in stopped:  # what the callback saw, and no more
                            o = out[i]
                            o.token_ids = o.token_ids[:stopped[i][0]]
                            o.text = stopped[i][1]
                            o.finish_reason = "cancelled"
                            o.outputs[0] = CompletionOutput(0, o.token_ids, o.text, o.finish_reason)
            return out
        finally:
            for rid in ids:
                if rid:
                    self._lib.xllm_engine_release(self._engine, rid)
            self._end()

    def stream(self, prompt, sampling_params=None, **overrides):
        """Yield the text of one request as it is generated (pieces never split a
        UTF-8 character; text that could still become a stop string is held back).
        Closing the generator early aborts the request."""
        self._check_open()
        sp = sampling_params if sampling_params is not None else self._defaults
        if overrides:
            sp = sp.replace(**overrides)
        if (sp.n or 1) != 1:
            raise ValueError("stream() takes n = 1")
        keep = []
        req = self._request(prompt, sp, keep)
        self._begin()
        try:
            rid = self._submit(req, None)
        finally:
            self._end()
        done = False
        try:
            while not done:
                self._begin()  # held only while polling: the caller may close between pieces
                try:
                    chunks, done = self._drain(rid, 100)
                finally:
                    self._end()
                for c in chunks:
                    for _, piece in c["tokens"]:
                        if piece:
                            yield piece
        finally:
            with self._cv:
                if self._model and not self._close_pending:
                    self._lib.xllm_engine_release(self._engine, rid)

    def stats(self):
        """The engine's counters and KV pool state (a dict; see xllm_engine_stats)."""
        self._check_open()
        p = self._lib.xllm_engine_stats(self._engine)
        try:
            return json.loads(ctypes.string_at(p).decode("utf-8"))
        finally:
            self._lib.xllm_free(p)

    def add_knowledge(self, name, text):
        """Prefill a named text once and keep its KV pinned: prompts that start with it reuse it."""
        self._check_open()
        err = _Error()
        if self._lib.xllm_engine_add_knowledge(self._engine, name.encode(), text.encode("utf-8"), ctypes.byref(err)):
            _raise(err)

    def save_knowledge(self, name, path):
        self._check_open()
        err = _Error()
        if self._lib.xllm_engine_save_knowledge(self._engine, name.encode(), os.fspath(path).encode(),
                                                ctypes.byref(err)):
            _raise(err)

    def load_knowledge(self, name, path, text=None):
        self._check_open()
        err = _Error()
        if self._lib.xllm_engine_load_knowledge(self._engine, name.encode(), os.fspath(path).encode(),
                                                text.encode("utf-8") if text is not None else None,
                                                ctypes.byref(err)):
            _raise(err)

    # -- engine plumbing
    def _request(self, prompt, sp, keep):
        r = _Request()
        if isinstance(prompt, str):
            b = prompt.encode("utf-8")
            keep.append(b)
            r.prompt = b
        else:
            ids = [_check_int("token id", int(t), -(1 << 31), (1 << 31) - 1) for t in prompt]
            arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
            keep.append(arr)
            r.prompt = None
            r.prompt_ids = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int32))
            r.n_prompt_ids = len(ids)
        r.params = sp._to_c(keep)
        r.n = _check_int("n", sp.n if sp.n is not None else 1, 1, MAX_SAMPLES)
        if sp.priority not in _PRIORITIES:
            raise ValueError("priority must be 'online' or 'offline'")
        r.priority = _PRIORITIES[sp.priority]
        return r

    def _submit(self, r, index):
        rid = ctypes.c_uint64()
        err = _Error()
        if self._lib.xllm_engine_submit(self._engine, ctypes.byref(r), None, None, ctypes.byref(rid),
                                        ctypes.byref(err)):
            if index is not None:
                raise XLLMError(err.code, "request %d: %s" % (index, err.message.decode("utf-8", "replace")))
            _raise(err)
        return rid.value

    def _drain(self, rid, timeout_ms):
        """New chunks of a request (waiting up to timeout_ms for the first), and whether it is done."""
        chunks = []
        c = _Chunk()
        err = _Error()
        wait = timeout_ms
        while True:
            st = self._lib.xllm_engine_poll(self._engine, rid, ctypes.byref(c), wait, ctypes.byref(err))
            if st == _POLL_ERROR:
                _raise(err)
            if st == _POLL_DONE:
                return chunks, True
            if st == _POLL_TIMEOUT:
                return chunks, False
            raw = ctypes.string_at(c.text, c.text_len) if c.text_len else b""
            toks, prev = [], 0
            for k in range(c.n_ids):
                end = c.text_ends[k]
                toks.append((c.ids[k], raw[prev:end].decode("utf-8", "replace")))
                prev = end
            chunks.append({"sample": c.sample, "tokens": toks, "text": raw.decode("utf-8", "replace"),
                           "finished": bool(c.finished)})
            wait = 0

    def _result(self, rid, prompt):
        res = ctypes.POINTER(_Result)()
        n = ctypes.c_size_t()
        err = _Error()
        if self._lib.xllm_engine_result(self._engine, rid, ctypes.byref(res), ctypes.byref(n), ctypes.byref(err)):
            _raise(err)
        try:
            outs = []
            for j in range(n.value):
                r = res[j]
                text = ctypes.string_at(r.text, r.text_len).decode("utf-8", "replace") if r.text else ""
                lp = top = None
                if r.logprobs:
                    lp = r.logprobs[:r.n_ids]
                    k = r.n_top
                    top = [[(r.top_ids[t * k + i], r.top_logprobs[t * k + i]) for i in range(k)]
                           for t in range(r.n_ids)]
                outs.append(CompletionOutput(j, r.ids[:r.n_ids], text,
                                             RequestOutput._REASONS.get(r.finish_reason, str(r.finish_reason)),
                                             lp, top, r.first_token_s, r.decode_s))
            r0 = res[0]
            out = RequestOutput(prompt, r0.prompt_ids[:r0.n_prompt_ids], outs[0].token_ids, outs[0].text,
                                outs[0].finish_reason, outs)
            out.logprobs = outs[0].logprobs
            out.top_logprobs = outs[0].top_logprobs
            return out
        finally:
            self._lib.xllm_results_free(res, n.value)

    # -- chat
    @property
    def chat_template(self):
        """The model's ChatTemplate (loaded on first use)."""
        self._check_open()
        if self._chat_template is None:
            self._chat_template = ChatTemplate(self.path)
        return self._chat_template

    def apply_chat_template(self, messages, add_generation_prompt=False, tools=None, chat_template=None,
                            **template_vars):
        """The prompt text HF's tokenizer.apply_chat_template(messages, tokenize=False, ...)
        gives: the model's chat template rendered with messages, tools, the special
        tokens and any extra variables (e.g. enable_thinking=False)."""
        return self.chat_template.apply(messages, add_generation_prompt=add_generation_prompt, tools=tools,
                                        chat_template=chat_template, **template_vars)

    def chat(self, messages, sampling_params=None, add_generation_prompt=True, tools=None, callback=None,
             chat_template=None, **template_vars):
        """Generate a reply to a conversation (a list of {"role", "content", ...}
        messages; a list of conversations gives a list of outputs). As HF's
        apply_chat_template(tokenize=True) does, the rendered prompt is tokenized
        without adding special tokens: the template writes BOS itself. Returns a
        RequestOutput whose .prompt is the rendered text."""
        batch = bool(messages) and isinstance(messages[0], (list, tuple))
        conversations = list(messages) if batch else [messages]
        texts = [self.apply_chat_template(conv, add_generation_prompt=add_generation_prompt, tools=tools,
                                          chat_template=chat_template, **template_vars) for conv in conversations]
        ids = [self.tokenize(t, add_special_tokens=False) for t in texts]
        if not all(ids):
            raise XLLMError(1, "the chat template rendered an empty prompt")
        outs = self.generate(ids, sampling_params, callback=callback)
        for o, t in zip(outs, texts):
            o.prompt = t
        return outs if batch else outs[0]


class ModelConverter:
    """Convert a HuggingFace checkpoint into one .xllm file (the brief's ModelConverter).

        ModelConverter(model_name="models/stories260k", quant_config="int4_weight_only",
                       op_fusion=True, device="cpu", calibration="calib.txt").convert("out.xllm")

    quant_config: "none" (f32), "f16", "bf16", "int8_weight_only" (q8), "int4_weight_only" (q4,
    group_size 32 by default). calibration: a text file whose activation statistics choose
    per-channel scales and clipping before int4 quantization. policy: per tensor class
    overrides, e.g. "embed=q8,attn=q4,mlp=q4,lm_head=q8,norm=f32".
    """

    QUANT_CONFIGS = {"none": "f32", "f32": "f32", "f16": "f16", "bf16": "bf16",
                     "int8_weight_only": "q8", "int4_weight_only": "q4"}

    def __init__(self, model_name, quant_config="none", op_fusion=True, device="cpu", calibration=None,
                 group_size=32, policy=None, calib_tokens=0, n_threads=0, progress=None):
        if quant_config not in self.QUANT_CONFIGS:
            raise ValueError("quant_config must be one of %s" % ", ".join(sorted(self.QUANT_CONFIGS)))
        if device != "cpu":
            raise ValueError("only device='cpu' is available")
        self.model_name = os.fspath(model_name)
        self.quant_config = quant_config
        self.op_fusion = bool(op_fusion)
        self.device = device
        self.calibration = os.fspath(calibration) if calibration is not None else None
        self.group_size = int(group_size)
        self.policy = policy
        self.calib_tokens = int(calib_tokens)
        self.n_threads = int(n_threads)
        self.progress = progress

    def convert(self, output_path):
        """Write the .xllm file; returns its path. Raises XLLMError on failure (nothing is left at output_path)."""
        lib = _library()
        o = lib.xllm_convert_options_default()
        keep = [self.QUANT_CONFIGS[self.quant_config].encode()]
        o.dtype = keep[0]
        o.group_size = self.group_size
        if self.policy:
            keep.append(self.policy.encode())
            o.policy = keep[-1]
        if self.calibration:
            keep.append(self.calibration.encode())
            o.calib_file = keep[-1]
        o.calib_tokens = self.calib_tokens
        o.no_fuse = 0 if self.op_fusion else 1
        o.n_threads = self.n_threads
        calib_opts = _options_from_env(lib.xllm_model_options_default())  # calibration's forward passes
        keep.append(calib_opts)
        o.calib_model_options = ctypes.pointer(calib_opts)
        if self.progress is not None:
            user_fn = self.progress
            cb = _ProgressCallback(lambda user, stage, frac: user_fn(stage.decode(), frac))
            keep.append(cb)
            o.progress = cb
        err = _Error()
        out = os.fspath(output_path)
        if lib.xllm_convert(self.model_name.encode(), out.encode(), ctypes.byref(o), ctypes.byref(err)):
            _raise(err)
        return out

    @staticmethod
    def info(path):
        """What a model file holds: metadata, policy and each tensor's type (a dict)."""
        import json
        lib = _library()
        text = ctypes.c_void_p()
        err = _Error()
        if lib.xllm_model_info(os.fspath(path).encode(), ctypes.byref(text), ctypes.byref(err)):
            _raise(err)
        try:
            return json.loads(ctypes.string_at(text.value).decode("utf-8"))
        finally:
            lib.xllm_free(text)


def devices():
    """The execution backends of this build and the devices each sees (text, one line per device)."""
    lib = _library()
    text = ctypes.c_void_p()
    err = _Error()
    if lib.xllm_backend_devices(ctypes.byref(text), ctypes.byref(err)):
        _raise(err)
    try:
        return ctypes.string_at(text.value).decode("utf-8")
    finally:
        lib.xllm_free(text)


# ---------------------------------------------------------------- profiling

def _profile_functions():
    lib = _library()
    if not getattr(lib, "_xllm_profile_bound", False):
        lib.xllm_profile_enable.restype = None
        lib.xllm_profile_enable.argtypes = [ctypes.c_int]
        lib.xllm_profile_reset.restype = None
        lib.xllm_profile_reset.argtypes = []
        lib.xllm_profile_report.restype = ctypes.c_int
        lib.xllm_profile_report.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_Error)]
        lib._xllm_profile_bound = True
    return lib


def enable_profiling(on=True, reset=True):
    """Switch per-operator kernel profiling on (or off) for the whole process,
    as XLLM_PROFILE=1 or `xllm run --profile` do; reset clears what was recorded."""
    lib = _profile_functions()
    lib.xllm_profile_enable(1 if on else 0)
    if reset:
        lib.xllm_profile_reset()


def profile_report(reset=False):
    """The profiling report as a dict: {"total_ms", "ops": [{"op", "ms", "share",
    "calls", "gflop_s", "gb_s"}...]} for the operators run since profiling was
    enabled (or last reset); reset=True starts a new recording afterwards."""
    lib = _profile_functions()
    out = ctypes.c_void_p()
    err = _Error()
    if lib.xllm_profile_report(ctypes.byref(out), ctypes.byref(err)):
        _raise(err)
    try:
        report = json.loads(ctypes.string_at(out.value).decode("utf-8"))
    finally:
        lib.xllm_free(out)
    if reset:
        lib.xllm_profile_reset()
    return report


def _llm_profile(self, reset=False):
    """The kernel profiling report (see profile_report): enable profiling first
    with xllm.enable_profiling() or XLLM_PROFILE=1, then generate."""
    self._check_open()
    return profile_report(reset=reset)


# kept apart from the class body: LLM.profile() is profile_report() for this model's process
LLM.profile = _llm_profile


def default_model():
    """The bundled stories260k as `xllm run` finds it: $XLLM_MODEL, the
    repository's models/ (beside python/), or the installed <prefix>/share/xllm/models."""
    env = os.environ.get("XLLM_MODEL")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for rel in ("../../models/stories260k", "../../../../share/xllm/models/stories260k",
                "../../../../../share/xllm/models/stories260k"):
        cand = os.path.normpath(os.path.join(here, rel))
        if os.path.isdir(cand):
            return cand
    raise XLLMError(1, "the bundled stories260k was not found: give a model path or set XLLM_MODEL")
