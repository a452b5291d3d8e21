/*
 * request.c - an OpenAI request body (/v1/completions, /v1/chat/completions)
 * parsed and validated into a srv_req.
 *
 * Every field is checked for its type and range as OpenAI documents it, and
 * a bad one is a 400 naming the field; unknown fields are ignored (clients
 * send fields of newer API versions). Strings must be valid UTF-8. Chat
 * messages are rendered through the model's chat template; prompts are
 * masked for PII (when the model's policy says so) before they are
 * tokenized, and checked against the context (context_length_exceeded).
 */
#include "srv.h"
#include "tool_calls.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(e, param, ...) http_err(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* Every string in the tree is valid UTF-8 (cJSON does not check). */
static int tree_utf8(const cJSON *j) {
    for (; j; j = j->next) {
        if (j->string && !utf8_valid(j->string, strlen(j->string))) return 0;
        if (cJSON_IsString(j) && !utf8_valid(j->valuestring, strlen(j->valuestring))) return 0;
        if (j->child && !tree_utf8(j->child)) return 0;
    }
    return 1;
}

static const cJSON *field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

static int get_num(const cJSON *o, const char *k, double lo, double hi, double *out, http_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return BAD(e, k, "'%s' must be a number", k);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi) return BAD(e, k, "'%s' = %g is out of range [%g, %g]", k, d, lo, hi);
    *out = d;
    return 0;
}

static int get_int(const cJSON *o, const char *k, double lo, double hi, long long *out, http_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return BAD(e, k, "'%s' must be an integer", k);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi) return BAD(e, k, "'%s' = %.17g is out of range [%.0f, %.0f]", k, d, lo, hi);
    *out = (long long)d;
    return 0;
}

static int get_bool(const cJSON *o, const char *k, int *out, http_error *e) {
    const cJSON *v = field(o, k);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return BAD(e, k, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(v);
    return 0;
}

unsigned prompt_flags(const srv_model *m, int add_special, int marked) {
    return (add_special ? XLLM_TOKENIZE_ADD_SPECIAL : 0u) |
           (m->parse_special ? XLLM_TOKENIZE_PARSE_SPECIAL : marked ? XLLM_TOKENIZE_MARKED : 0u);
}

int tokenize_prompt(srv_model *m, const char *text, size_t len, int add_special, int marked, int32_t **ids, size_t *n,
                    http_error *e) {
    xllm_error xe;
    if (!m->tok) return BAD(e, "prompt", "model '%s' has no tokenizer; send token ids", m->name);
    int32_t *x = NULL;
    if (xllm_tokenize_ex(m->tok, text, len, prompt_flags(m, add_special, marked), &x, n, &xe))
        return BAD(e, "prompt", "the prompt could not be tokenized: %s", xe.message);
    *ids = malloc((*n ? *n : 1) * sizeof(int32_t));
    if (!*ids) { xllm_free(x); return http_err(e, 500, "server_error", NULL, NULL, "out of memory"); }
    if (*n) memcpy(*ids, x, *n * sizeof(int32_t));
    xllm_free(x);
    if (*n == 0) { free(*ids); *ids = NULL; return BAD(e, "prompt", "the prompt is empty (no tokens)"); }
    if (*n >= (size_t)m->ctx) {
        size_t k = *n;
        free(*ids);
        *ids = NULL;
        return http_err(e, 400, "invalid_request_error", "messages", "context_length_exceeded",
                        "This model's maximum context length is %d tokens. However, your prompt has %zu tokens.",
                        m->ctx, k);
    }
    return 0;
}

/* Every string in the tree (but a "role" or "type" value) marked: its
 * special-token text will be read as text. 0, or -1 out of memory. */
static int mark_tree(const xllm_tokenizer *tok, cJSON *node) {
    for (cJSON *c = node ? node->child : NULL; c; c = c->next) {
        if (cJSON_IsString(c) && c->valuestring &&
            !(c->string && (!strcmp(c->string, "role") || !strcmp(c->string, "type")))) {
            char *mk = NULL;
            size_t ml = 0;
            xllm_error xe;
            if (xllm_tokenizer_mark_special(tok, c->valuestring, strlen(c->valuestring), &mk, &ml, &xe)) return -1;
            if (strcmp(mk, c->valuestring)) {
                char *v = cJSON_malloc(ml + 1);
                if (!v) { xllm_free(mk); return -1; }
                memcpy(v, mk, ml + 1);
                cJSON_free(c->valuestring);
                c->valuestring = v;
            }
            xllm_free(mk);
        } else if ((cJSON_IsObject(c) || cJSON_IsArray(c)) && mark_tree(tok, c)) {
            return -1;
        }
    }
    return 0;
}

int render_chat(srv_model *m, const cJSON *messages, const cJSON *tools, const cJSON *kwargs, char **out,
                http_error *e) {
    if (!m->tmpl && !m->tmpl_src)
        return BAD(e, "messages", "model '%s' has no chat template; use /v1/completions", m->name);
    cJSON *msg_copy = NULL, *tools_copy = tools && cJSON_GetArraySize(tools) ? cJSON_Duplicate(tools, 1) : NULL;
    cJSON *o = cJSON_IsObject(kwargs) ? cJSON_Duplicate(kwargs, 1) : cJSON_CreateObject();
    if (m->tok && !m->parse_special) {
        /* request text: special-token strings stay text (only the template's markup makes tokens) */
        msg_copy = cJSON_Duplicate(messages, 1);
        if (!msg_copy || !o || mark_tree(m->tok, msg_copy) || (tools_copy && mark_tree(m->tok, tools_copy)) ||
            mark_tree(m->tok, o)) {
            cJSON_Delete(msg_copy);
            cJSON_Delete(tools_copy);
            cJSON_Delete(o);
            return http_err(e, 500, "server_error", NULL, NULL, "out of memory");
        }
        messages = msg_copy;
    }
    char *mj = cJSON_PrintUnformatted(messages);
    cJSON_Delete(msg_copy);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "add_generation_prompt");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "tools");
    cJSON_DeleteItemFromObjectCaseSensitive(o, "messages");
    cJSON_AddTrueToObject(o, "add_generation_prompt");
    if (m->tmpl_src && m->tmpl_specials) {
        /* a .jinja file gets the model's special tokens, as a tokenizer_config.json template does */
        static const char *const names[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
        for (int i = 0; i < 4; i++) {
            const char *v = xllm_chat_template_special_token(m->tmpl_specials, names[i]);
            if (v && !cJSON_GetObjectItemCaseSensitive(o, names[i])) cJSON_AddStringToObject(o, names[i], v);
        }
    }
    if (tools_copy) cJSON_AddItemToObject(o, "tools", tools_copy);
    char *oj = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    xllm_error xe;
    size_t len;
    xllm_status st = !mj || !oj ? XLLM_ERR_OUT_OF_MEMORY
                     : m->tmpl ? xllm_chat_template_apply(m->tmpl, NULL, mj, oj, out, &len, &xe)
                               : xllm_chat_template_render(m->tmpl_src, mj, oj, out, &len, &xe);
    free(mj);
    free(oj);
    if (st == XLLM_ERR_OUT_OF_MEMORY) return http_err(e, 500, "server_error", NULL, NULL, "out of memory");
    if (st) return BAD(e, "messages", "the chat template failed: %s", xe.message);
    return 0;
}

int check_context(srv_req *r, http_error *e) {
    size_t longest = 0;
    for (int i = 0; i < r->n_prompts; i++) if (r->n_ids[i] > longest) longest = r->n_ids[i];
    int ctx = r->m->ctx;
    if (longest >= (size_t)ctx)
        return http_err(e, 400, "invalid_request_error", r->chat ? "messages" : "prompt", "context_length_exceeded",
                        "This model's maximum context length is %d tokens. However, your prompt has %zu tokens.",
                        ctx, longest);
    if (!r->max_tokens_set) {
        int left = ctx - (int)longest;
        r->params.max_new_tokens = r->chat ? left : (left < 16 ? left : 16);
    } else if ((long long)longest + r->params.max_new_tokens > ctx) {
        return http_err(e, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                        "This model's maximum context length is %d tokens. However, you requested %zu tokens "
                        "(%zu in the prompt, %d in the completion). Please reduce the prompt or max_tokens.",
                        ctx, longest + (size_t)r->params.max_new_tokens, longest, r->params.max_new_tokens);
    }
    return 0;
}

/* Chat: messages rendered and tokenized; tools, tool_choice,
 * parallel_tool_calls and chat_template_kwargs read (chat_out.c uses them). */
static int parse_chat(srv_req *r, const cJSON *o, const cJSON *msgs, http_error *e) {
    srv_model *m = r->m;
    const cJSON *tools = field(o, "tools");
    const cJSON *kw = field(o, "chat_template_kwargs");
    int st;
    if (tools && (st = tools_validate(tools, e))) return st;
    if ((st = chat_kwargs_check(kw, e))) return st;
    int parallel = 1;
    if ((st = get_bool(o, "parallel_tool_calls", &parallel, e))) return st;
    const cJSON *tc = field(o, "tool_choice");
    const char *named = NULL;
    int none = 0, required = 0;
    if (tc) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")) none = 1;
        else if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")) required = 1;
        else if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "auto")) {}
        else if (cJSON_IsObject(tc) && cJSON_IsString(nm)) named = nm->valuestring;
        else return BAD(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (!none && !tools) return BAD(e, "tool_choice", "'tool_choice' needs 'tools'");
    }
    r->tool_fmt = m->tool_fmt;
    r->max_tool_calls = parallel ? 64 : 1;
    r->tool_parse = tools && cJSON_GetArraySize(tools) > 0 && !none;
    if (r->tool_parse && (required || named)) {
        const char *pre, *suf;
        if ((st = tool_choice_constraint((tool_format)m->tool_fmt, tools, named, parallel, &r->grammar_store, &pre,
                                         &suf, e)))
            return st;
        r->params.grammar_kind = XLLM_GRAMMAR_JSON_SCHEMA;
        r->params.grammar = r->grammar_store;
        r->params.grammar_prefix = pre;
        r->params.grammar_suffix = suf;
    }
    cJSON *norm = NULL;
    sbuf ut = {0};
    if (m->pii) r->pii[0] = pii_map_create();
    if ((st = chat_messages_normalize(m, msgs, r->pii[0], &norm, &ut, e))) { sb_free(&ut); return st; }
    r->user_text = sb_take(&ut);
    char *text = NULL;
    /* tool_choice none: the tools stay out of the prompt too */
    st = render_chat(m, norm, none ? NULL : tools, kw, &text, e);
    cJSON_Delete(norm);
    if (st) return st;
    size_t tl = strlen(text);
    r->think = m->thinks;
    r->think_open = m->thinks && prompt_opens_think(text, tl);
    r->n_prompts = 1;
    st = tokenize_prompt(m, text, tl, 0, 1, &r->ids[0], &r->n_ids[0], e);
    xllm_free(text);
    return st;
}

/* prompt: a string, a list of strings, a list of ids, or a list of id lists. */
static int parse_prompt(srv_req *r, const cJSON *p, http_error *e) {
    srv_model *m = r->m;
    if (!p) return BAD(e, "prompt", "'prompt' is required");
    const cJSON *items[SRV_MAX_PROMPTS];
    int n = 0;
    int single_ids = 0;
    if (cJSON_IsString(p)) {
        items[n++] = p;
    } else if (cJSON_IsArray(p)) {
        int sz = cJSON_GetArraySize(p);
        if (sz == 0) return BAD(e, "prompt", "'prompt' is an empty list");
        const cJSON *first = p->child;
        if (cJSON_IsNumber(first)) {
            single_ids = 1;
            items[n++] = p;
        } else {
            if (sz > SRV_MAX_PROMPTS) return BAD(e, "prompt", "at most %d prompts in one request", SRV_MAX_PROMPTS);
            const cJSON *it;
            cJSON_ArrayForEach(it, p) {
                if (!cJSON_IsString(it) && !cJSON_IsArray(it))
                    return BAD(e, "prompt", "'prompt' must be a string, a list of strings or a list of token ids");
                items[n++] = it;
            }
        }
    } else {
        return BAD(e, "prompt", "'prompt' must be a string, a list of strings or a list of token ids");
    }
    (void)single_ids;
    int32_t vocab = xllm_model_vocab_size(m->model);
    for (int i = 0; i < n; i++) {
        const cJSON *it = items[i];
        r->n_prompts = i + 1;
        if (cJSON_IsString(it)) {
            const char *text = it->valuestring;
            size_t len = strlen(text);
            sbuf masked = {0};
            if (m->pii) {
                r->pii[i] = pii_map_create();
                atomic_fetch_add(&m->pii_masked, pii_mask(m->pii, r->pii[i], text, len, &masked));
                text = masked.p ? masked.p : "";
                len = masked.len;
            }
            if (i == 0 && !r->user_text) r->user_text = strdup(it->valuestring);
            if (r->echo) r->echo_text[i] = strndup(text, len); /* what the model saw (masked) */
            int st = tokenize_prompt(m, text, len, 1, 0, &r->ids[i], &r->n_ids[i], e);
            sb_free(&masked);
            if (st) { e->param = "prompt"; return st; }
        } else {
            int sz = cJSON_GetArraySize(it);
            if (sz == 0) return BAD(e, "prompt", "a token id list is empty");
            if (sz >= m->ctx)
                return http_err(e, 400, "invalid_request_error", "prompt", "context_length_exceeded",
                                "This model's maximum context length is %d tokens. However, your prompt has %d tokens.",
                                m->ctx, sz);
            r->ids[i] = malloc((size_t)sz * sizeof(int32_t));
            if (!r->ids[i]) return http_err(e, 500, "server_error", NULL, NULL, "out of memory");
            int k = 0;
            const cJSON *t;
            cJSON_ArrayForEach(t, it) {
                if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
                    t->valuedouble >= vocab)
                    return BAD(e, "prompt", "token ids must be integers in [0, %d)", vocab);
                r->ids[i][k++] = (int32_t)t->valuedouble;
            }
            r->n_ids[i] = (size_t)sz;
            if (r->echo) {
                xllm_error xe;
                char *txt = NULL;
                size_t tl = 0;
                if (m->tok && !xllm_detokenize(m->tok, r->ids[i], r->n_ids[i], 0, &txt, &tl, &xe)) {
                    r->echo_text[i] = strndup(txt, tl);
                    xllm_free(txt);
                } else {
                    r->echo_text[i] = strdup("");
                }
            }
        }
    }
    return 0;
}

static int parse_stop(srv_req *r, const cJSON *o, http_error *e) {
    const cJSON *s = field(o, "stop");
    if (!s) return 0;
    const cJSON *list[XLLM_MAX_STOP_STRINGS];
    int n = 0;
    if (cJSON_IsString(s)) {
        list[n++] = s;
    } else if (cJSON_IsArray(s)) {
        if (cJSON_GetArraySize(s) > XLLM_MAX_STOP_STRINGS)
            return BAD(e, "stop", "at most %d stop strings", XLLM_MAX_STOP_STRINGS);
        const cJSON *it;
        cJSON_ArrayForEach(it, s) {
            if (!cJSON_IsString(it)) return BAD(e, "stop", "'stop' must be a string or a list of strings");
            list[n++] = it;
        }
    } else {
        return BAD(e, "stop", "'stop' must be a string or a list of strings");
    }
    for (int i = 0; i < n; i++) {
        size_t l = strlen(list[i]->valuestring);
        if (l == 0) continue;
        if (l > 256) return BAD(e, "stop", "a stop string is at most 256 bytes");
        r->stop_store[r->params.n_stop] = strdup(list[i]->valuestring);
        r->params.stop[r->params.n_stop] = r->stop_store[r->params.n_stop];
        r->params.n_stop++;
    }
    return 0;
}

_Thread_local int srv_internal_logprobs;

int srv_req_parse(srv_state *s, int chat, const char *body, size_t len, srv_req *r, http_error *e) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->params = xllm_sampling_params_default();
    r->params.do_sample = 1;
    r->params.temperature = 1.0f;
    cJSON *o = json_parse_body(body, len, e);
    if (!o) return e->status;
    int st = 0;
    if (!cJSON_IsObject(o)) { st = BAD(e, NULL, "the body must be a JSON object"); goto out; }
    if (!tree_utf8(o)) { st = BAD(e, NULL, "the body holds invalid UTF-8"); goto out; }
    const cJSON *model = field(o, "model");
    if (model && !cJSON_IsString(model)) { st = BAD(e, "model", "'model' must be a string"); goto out; }
    if (!model && s->n_models == 1) {
        r->m = s->models[0];
    } else if (!model) {
        st = BAD(e, "model", "'model' is required");
        goto out;
    } else {
        r->m = srv_find_model(s, model->valuestring);
        if (!r->m) {
            st = http_err(e, 404, "invalid_request_error", "model", "model_not_found",
                          "The model '%.200s' does not exist", model->valuestring);
            goto out;
        }
    }
    r->model_name = strdup(r->m->name);
    if (r->m->n_stages) { st = BAD(e, "model", "internal: cascade handled elsewhere"); goto out; }
    long long ll;
    xllm_sampling_params *p = &r->params;
    /* the scalar sampling parameters, by the library's table (xllm_sampling_params_table) */
    size_t n_rows;
    const xllm_param_info *rows = xllm_sampling_params_table(&n_rows);
    for (size_t i = 0; i < n_rows; i++) {
        const xllm_param_info *pi = &rows[i];
        if (!pi->http || !strcmp(pi->http, "max_tokens") || !field(o, pi->http)) continue; /* max_tokens: below */
        double v = 0;
        if (pi->type == XLLM_PARAM_BOOL) {
            int bv = 0;
            if ((st = get_bool(o, pi->http, &bv, e))) goto out;
            v = bv;
        } else if (pi->type == XLLM_PARAM_INT) {
            long long x = 0;
            if ((st = get_int(o, pi->http, pi->http_min, pi->http_max, &x, e))) goto out;
            v = (double)x;
        } else {
            if ((st = get_num(o, pi->http, pi->http_min, pi->http_max, &v, e))) goto out;
        }
        if (pi->min_open && v <= pi->min) {
            st = BAD(e, pi->http, "'%s' must be in (%g, %g]", pi->http, pi->min, pi->http_max);
            goto out;
        }
        if (!strcmp(pi->name, "top_k") && v < 0) v = 0; /* -1 = off, as vLLM takes it */
        xllm_sampling_param_set(p, pi, v);
    }
    if (field(o, "seed")) {
        if ((st = get_int(o, "seed", -9007199254740991.0, 9007199254740991.0, &ll, e))) goto out;
        p->seed = (uint64_t)ll;
        p->has_seed = 1;
    }
    ll = 1;
    if ((st = get_int(o, "n", 1, XLLM_MAX_SAMPLES, &ll, e))) goto out;
    r->n = (int)ll;
    const char *mt = chat && field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (field(o, mt)) {
        if ((st = get_int(o, mt, 1, 1 << 30, &ll, e))) goto out;
        p->max_new_tokens = (int)ll;
        r->max_tokens_set = 1;
    }
    if ((st = get_bool(o, "stream", &r->stream, e))) goto out;
    const cJSON *so = field(o, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) { st = BAD(e, "stream_options", "'stream_options' must be an object"); goto out; }
        if ((st = get_bool(so, "include_usage", &r->include_usage, e))) { e->param = "stream_options.include_usage"; goto out; }
    }
    if (chat) {
        if ((st = get_bool(o, "logprobs", &r->logprobs, e))) goto out;
        ll = 0;
        if ((st = get_int(o, "top_logprobs", 0, XLLM_MAX_TOP_LOGPROBS, &ll, e))) goto out;
        r->top_logprobs = (int)ll;
        if (r->top_logprobs && !r->logprobs) { st = BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true"); goto out; }
    } else {
        if (field(o, "logprobs")) {
            if ((st = get_int(o, "logprobs", 0, XLLM_MAX_TOP_LOGPROBS, &ll, e))) goto out;
            r->logprobs = 1;
            r->top_logprobs = (int)ll;
        }
        if ((st = get_bool(o, "echo", &r->echo, e))) goto out;
        if (r->echo && r->logprobs) {
            st = BAD(e, "echo", "'echo' together with 'logprobs' (prompt log-probabilities) is not supported");
            goto out;
        }
    }
    if (r->logprobs && !srv_internal_logprobs && r->m->pii &&
        (pii_policy_restores(r->m->pii) || pii_policy_masks_output(r->m->pii))) {
        st = BAD(e, "logprobs", "'logprobs' is not available on a model whose output is PII-filtered");
        goto out;
    }
    p->logprobs = r->logprobs;
    p->top_logprobs = r->top_logprobs;
    const cJSON *pr = field(o, "priority");
    if (pr) {
        if (!cJSON_IsString(pr) || (strcmp(pr->valuestring, "online") && strcmp(pr->valuestring, "offline"))) {
            st = BAD(e, "priority", "'priority' must be \"online\" or \"offline\"");
            goto out;
        }
        r->priority = strcmp(pr->valuestring, "offline") ? XLLM_PRIORITY_ONLINE : XLLM_PRIORITY_OFFLINE;
    }
    const cJSON *user = field(o, "user");
    if (user && !cJSON_IsString(user)) { st = BAD(e, "user", "'user' must be a string"); goto out; }
    const cJSON *lb = field(o, "logit_bias");
    if (lb && (!cJSON_IsObject(lb) || lb->child)) { st = BAD(e, "logit_bias", "'logit_bias' is not supported"); goto out; }
    if ((st = parse_stop(r, o, e))) goto out;
    if ((st = srv_parse_constraint(r, o, e))) goto out;
    p->grammar = r->grammar_text;
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
        if (!msgs) { st = BAD(e, "messages", "'messages' is required"); goto out; }
        int had_constraint = p->grammar_kind != XLLM_GRAMMAR_NONE;
        if ((st = parse_chat(r, o, msgs, e))) goto out;
        if (had_constraint && r->grammar_store) { /* tool_choice required / named set its own */
            st = BAD(e, "tool_choice", "tool_choice required or a named function together with response_format, "
                                       "json_schema, grammar or regex: give one constraint");
            goto out;
        }
    } else {
        if ((st = parse_prompt(r, field(o, "prompt"), e))) goto out;
    }
    if ((long long)r->n_prompts * r->n > XLLM_MAX_SAMPLES) {
        st = BAD(e, "n", "prompts x n = %d choices; at most %d", r->n_prompts * r->n, XLLM_MAX_SAMPLES);
        goto out;
    }
    st = check_context(r, e);
out:
    cJSON_Delete(o);
    return st;
}

void srv_req_free(srv_req *r) {
    for (int i = 0; i < SRV_MAX_PROMPTS; i++) {
        free(r->ids[i]);
        free(r->echo_text[i]);
        if (r->pii[i]) pii_map_free(r->pii[i]);
    }
    for (int i = 0; i < XLLM_MAX_STOP_STRINGS; i++) free(r->stop_store[i]);
    free(r->model_name);
    free(r->user_text);
    free(r->grammar_text);
    free(r->grammar_store);
    memset(r, 0, sizeof *r);
}
