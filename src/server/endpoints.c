/*
 * endpoints.c - every HTTP endpoint of `xllm serve` in one table: path,
 * method, metric label, whether the API key guards it, and its handler.
 *
 * The router (http.c) and /metrics (metrics.c) read this table only, so a
 * new endpoint is one row here plus its handler. Handlers of the newer
 * endpoints are transport-neutral (srv_call: a body in, a JSON answer or a
 * stream of bytes out) and live in their own files; the first endpoints'
 * handlers are still http.c's own (handler NULL: http.c dispatches by id).
 */
#include "srv.h"

#include <string.h>

static const srv_endpoint g_endpoints[] = {
    /* path                    method  id              label               auth prefix handler */
    {"/health",                "GET",  EP_HEALTH,      "health",           0,   0,     NULL},
    {"/v1/completions",        "POST", EP_COMPLETIONS, "completions",      1,   0,     NULL},
    {"/v1/chat/completions",   "POST", EP_CHAT,        "chat_completions", 1,   0,     NULL},
    {"/v1/models",             "GET",  EP_MODELS,      "models",           1,   0,     NULL},
    {"/v1/models/",            "GET",  EP_MODELS,      "models",           1,   1,     NULL},
    {"/metrics",               "GET",  EP_METRICS,     "metrics",          1,   0,     NULL},
    {"/tokenize",              "POST", EP_TOKENIZE,    "tokenize",         1,   0,     NULL},
    {"/detokenize",            "POST", EP_DETOKENIZE,  "detokenize",       1,   0,     NULL},
    {"/v1/responses",          "POST", EP_RESPONSES,   "responses",        1,   0,     responses_handle},
    {"/v1/responses/",         "GET",  EP_RESPONSES,   "responses",        1,   1,     responses_get},
    {"/v1/embeddings",         "POST", EP_EMBEDDINGS,  "embeddings",       1,   0,     embeddings_handle},
};
#define N_ENDPOINTS ((int)(sizeof g_endpoints / sizeof g_endpoints[0]))

const srv_endpoint *endpoint_find(const char *path, const char *method, int *path_known) {
    const srv_endpoint *any = NULL;
    for (int i = 0; i < N_ENDPOINTS; i++) {
        const srv_endpoint *e = &g_endpoints[i];
        size_t l = strlen(e->path);
        int match = e->prefix ? !strncmp(path, e->path, l) && path[l] : !strcmp(path, e->path);
        if (!match) continue;
        if (!strcmp(method, e->method)) {
            *path_known = 1;
            return e;
        }
        if (!any) any = e;
    }
    *path_known = any != NULL;
    return any;
}

const char *endpoint_label(int id) {
    for (int i = 0; i < N_ENDPOINTS; i++)
        if (g_endpoints[i].id == id) return g_endpoints[i].label;
    return "other";
}
