/*
 * cascade.c - multi-model cascades served under their own model name.
 *
 * A cascade is a list of stages, each a served model with a prompt template
 * ({prompt}: the request's text, {previous}: the previous stage's answer).
 * Stages run in order; a stage with accept_logprob ends the cascade early
 * when its answer's mean token log-probability is above it, so both shapes
 * of the brief are one mechanism: a large model screens and a small one
 * refines (no threshold: every stage runs, each sees the previous answer),
 * or a cheap model answers first and escalates only uncertain answers.
 *
 * Each stage is an ordinary request to its model: the client's body with the
 * model, the prompt (or the last user message, for chat) and max_tokens
 * replaced, run non-streamed with log-probabilities on. The response is the
 * final stage's, under the cascade's name, with usage summed over the stages
 * and `x_cascade` listing the stages that ran; streamed, the final answer is
 * sent as SSE once it is known. The cascade's PII policy masks the request's
 * text before any stage sees it and filters the final answer.
 */
#include "srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void subst(sbuf *out, const char *tpl, const char *prompt, const char *previous) {
    for (const char *p = tpl; *p;) {
        if (!strncmp(p, "{prompt}", 8)) { sb_puts(out, prompt); p += 8; }
        else if (!strncmp(p, "{previous}", 10)) { sb_puts(out, previous); p += 10; }
        else sb_put(out, p++, 1);
    }
}

#define BAD(e, param, ...) http_err(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

int cascade_run(srv_state *s, srv_model *c, const char *body, size_t len, int chat, int fd, sbuf *out,
                int *is_stream, http_error *e) {
    cJSON *o = json_parse_body(body, len, e);
    int st = o ? 0 : e->status;
    char *prompt = NULL, *previous = strdup("");
    cJSON *final = NULL, *report = cJSON_CreateArray();
    pii_map *map = c->pii ? pii_map_create() : NULL;
    long long prompt_tok = 0, compl_tok = 0;
    int want_lp = 0;
    if (!o) goto out;
    if (!cJSON_IsObject(o)) { st = BAD(e, NULL, "the body is not a JSON object"); goto out; }
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(o, "stream");
    *is_stream = cJSON_IsTrue(sv);
    const cJSON *nv = cJSON_GetObjectItemCaseSensitive(o, "n");
    if (nv && !(cJSON_IsNumber(nv) && nv->valuedouble == 1)) { st = BAD(e, "n", "a cascade gives one answer (n = 1)"); goto out; }
    const cJSON *lpv = cJSON_GetObjectItemCaseSensitive(o, "logprobs");
    want_lp = lpv && !cJSON_IsNull(lpv) && !cJSON_IsFalse(lpv);
    cJSON *last_user = NULL;
    if (chat) {
        cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
        cJSON *m;
        cJSON_ArrayForEach(m, msgs) {
            cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
            if (cJSON_IsString(r) && !strcmp(r->valuestring, "user")) last_user = m;
        }
        cJSON *ct = last_user ? cJSON_GetObjectItemCaseSensitive(last_user, "content") : NULL;
        if (!cJSON_IsString(ct)) { st = BAD(e, "messages", "a cascade needs a user message with string content"); goto out; }
        prompt = strdup(ct->valuestring);
    } else {
        cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
        if (!cJSON_IsString(p)) { st = BAD(e, "prompt", "a cascade takes one string prompt"); goto out; }
        prompt = strdup(p->valuestring);
    }
    if (!utf8_valid(prompt, strlen(prompt))) { st = BAD(e, NULL, "the body holds invalid UTF-8"); goto out; }
    if (map) {
        sbuf mk = {0};
        atomic_fetch_add(&c->pii_masked, pii_mask(c->pii, map, prompt, strlen(prompt), &mk));
        free(prompt);
        prompt = sb_take(&mk);
        if (!prompt) { st = http_err(e, 500, "server_error", NULL, NULL, "out of memory"); goto out; }
    }
    for (int i = 0; i < c->n_stages; i++) {
        cascade_stage *cs = &c->stages[i];
        sbuf text = {0};
        subst(&text, cs->template_text ? cs->template_text : "{prompt}", prompt, previous);
        cJSON *q = cJSON_Duplicate(o, 1);
        cJSON_ReplaceItemInObjectCaseSensitive(q, "model", cJSON_CreateString(cs->model));
        cJSON_DeleteItemFromObjectCaseSensitive(q, "stream");
        cJSON_DeleteItemFromObjectCaseSensitive(q, "stream_options");
        if (chat) {
            cJSON *msgs = cJSON_GetObjectItemCaseSensitive(q, "messages");
            cJSON *m, *lu = NULL;
            cJSON_ArrayForEach(m, msgs) {
                cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
                if (cJSON_IsString(r) && !strcmp(r->valuestring, "user")) lu = m;
            }
            if (lu) cJSON_ReplaceItemInObjectCaseSensitive(lu, "content", cJSON_CreateString(text.p ? text.p : ""));
            cJSON_DeleteItemFromObjectCaseSensitive(q, "logprobs");
            cJSON_AddTrueToObject(q, "logprobs");
        } else {
            cJSON_ReplaceItemInObjectCaseSensitive(q, "prompt", cJSON_CreateString(text.p ? text.p : ""));
            if (!want_lp) {
                cJSON_DeleteItemFromObjectCaseSensitive(q, "logprobs");
                cJSON_AddNumberToObject(q, "logprobs", 0);
            }
        }
        if (cs->max_tokens) {
            cJSON_DeleteItemFromObjectCaseSensitive(q, "max_tokens");
            cJSON_DeleteItemFromObjectCaseSensitive(q, "max_completion_tokens");
            cJSON_AddNumberToObject(q, "max_tokens", cs->max_tokens);
        }
        sb_free(&text);
        char *qb = cJSON_PrintUnformatted(q);
        cJSON_Delete(q);
        srv_req r;
        /* the stage's log-probabilities stay here (the acceptance test; the answer's are nulled) unless the
           client asked for them (want_lp): then a PII-filtered stage refuses as it would directly */
        srv_internal_logprobs = !want_lp;
        st = srv_req_parse(s, chat, qb ? qb : "", qb ? strlen(qb) : 0, &r, e);
        srv_internal_logprobs = 0;
        free(qb);
        run *u = NULL;
        if (!st) st = run_start(s, &r, fd, &u, e);
        sbuf res = {0};
        if (!st && run_wait_json(u, &res, e)) st = client_gone(fd) ? -1 : (e->status ? e->status : 500);
        run_free(u);
        srv_req_free(&r);
        if (st) { sb_free(&res); goto out; }
        atomic_fetch_add(&cs->runs, 1);
        cJSON *rj = cJSON_Parse(res.p ? res.p : "");
        sb_free(&res);
        if (!rj) { st = http_err(e, 500, "server_error", NULL, NULL, "stage %d: unreadable result", i); goto out; }
        cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rj, "choices"), 0);
        cJSON *lp = cJSON_GetObjectItemCaseSensitive(ch, "logprobs");
        double sum = 0;
        int cnt = 0;
        cJSON *x;
        if (chat) {
            cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(lp, "content")) {
                cJSON *v = cJSON_GetObjectItemCaseSensitive(x, "logprob");
                if (cJSON_IsNumber(v)) sum += v->valuedouble, cnt++;
            }
        } else {
            cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs")) if (cJSON_IsNumber(x)) sum += x->valuedouble, cnt++;
        }
        double mean = cnt ? sum / cnt : NAN;
        int accepted = i == c->n_stages - 1 || (!isnan(cs->accept_logprob) && cnt && mean > cs->accept_logprob);
        if (accepted && i < c->n_stages - 1) atomic_fetch_add(&cs->accepted, 1);
        cJSON *usage = cJSON_GetObjectItemCaseSensitive(rj, "usage");
        long long pt = (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens"));
        long long ct = (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens"));
        prompt_tok += pt;
        compl_tok += ct;
        cJSON *rep = cJSON_CreateObject();
        cJSON_AddNumberToObject(rep, "stage", i);
        cJSON_AddStringToObject(rep, "model", cs->model);
        cJSON_AddNumberToObject(rep, "completion_tokens", (double)ct);
        if (cnt) cJSON_AddNumberToObject(rep, "mean_logprob", mean);
        else cJSON_AddNullToObject(rep, "mean_logprob");
        cJSON_AddBoolToObject(rep, "ended_cascade", accepted);
        cJSON_AddItemToArray(report, rep);
        const char *ans = chat ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                     cJSON_GetObjectItemCaseSensitive(ch, "message"), "content"))
                               : cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ch, "text"));
        free(previous);
        previous = strdup(ans ? ans : "");
        cJSON_Delete(final);
        final = rj;
        if (accepted) break;
    }
    /* the final answer, filtered by the cascade's PII policy */
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(final, "choices"), 0);
    sbuf ans = {0};
    if (c->pii && (pii_policy_restores(c->pii) || pii_policy_masks_output(c->pii))) {
        pii_stream *ps = pii_stream_create(c->pii, map);
        if (ps) pii_stream_push(ps, previous, strlen(previous), 1, &ans);
        pii_stream_free(ps);
    } else {
        sb_puts(&ans, previous);
    }
    if (chat) cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "message"), "content",
                                                     cJSON_CreateString(ans.p ? ans.p : ""));
    else cJSON_ReplaceItemInObjectCaseSensitive(ch, "text", cJSON_CreateString(ans.p ? ans.p : ""));
    if (!want_lp || (c->pii && (pii_policy_restores(c->pii) || pii_policy_masks_output(c->pii))))
        cJSON_ReplaceItemInObjectCaseSensitive(ch, "logprobs", cJSON_CreateNull());
    cJSON_ReplaceItemInObjectCaseSensitive(final, "model", cJSON_CreateString(c->name));
    cJSON *usage = cJSON_CreateObject();
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)prompt_tok);
    cJSON_AddNumberToObject(usage, "completion_tokens", (double)compl_tok);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)(prompt_tok + compl_tok));
    cJSON_ReplaceItemInObjectCaseSensitive(final, "usage", usage);
    cJSON *xc = cJSON_CreateObject();
    cJSON_AddItemToObject(xc, "stages", report);
    report = NULL;
    cJSON_AddItemToObject(final, "x_cascade", xc);
    if (*is_stream) {
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(final, "id"));
        double created = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(final, "created"));
        const char *fr = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ch, "finish_reason"));
        const char *obj = chat ? "chat.completion.chunk" : "text_completion";
        for (int k = 0; k < 3; k++) {
            sb_printf(out, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%.0f,\"model\":", id ? id : "", obj, created);
            sb_json_str(out, c->name, strlen(c->name));
            sb_puts(out, ",\"choices\":[{\"index\":0,");
            if (chat) {
                if (k == 0) sb_puts(out, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}");
                else if (k == 1) sb_puts(out, "\"delta\":{\"content\":"), sb_json_str(out, ans.p ? ans.p : "", ans.len), sb_puts(out, "}");
                else sb_puts(out, "\"delta\":{}");
            } else {
                sb_puts(out, "\"text\":");
                if (k == 1) sb_json_str(out, ans.p ? ans.p : "", ans.len);
                else sb_puts(out, "\"\"");
            }
            sb_puts(out, ",\"logprobs\":null,\"finish_reason\":");
            if (k == 2) sb_json_str(out, fr ? fr : "stop", strlen(fr ? fr : "stop"));
            else sb_puts(out, "null");
            sb_puts(out, "}]");
            if (k == 2) {
                char *xs = cJSON_PrintUnformatted(xc);
                sb_puts(out, ",\"x_cascade\":");
                sb_puts(out, xs ? xs : "null");
                free(xs);
            }
            sb_puts(out, "}\n\n");
        }
        sb_puts(out, "data: [DONE]\n\n");
    } else {
        char *js = cJSON_PrintUnformatted(final);
        if (js) sb_puts(out, js);
        else st = http_err(e, 500, "server_error", NULL, NULL, "out of memory");
        free(js);
    }
    sb_free(&ans);
out:
    cJSON_Delete(o);
    cJSON_Delete(final);
    cJSON_Delete(report);
    free(prompt);
    free(previous);
    pii_map_free(map);
    return st;
}
