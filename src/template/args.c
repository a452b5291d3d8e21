/*
 * args.c - binding call arguments to parameter names, Python-style, for the
 * builtin filters, tests, methods and globals: positionals fill parameters in
 * order, keywords by name; too many, unknown or doubled ones are errors.
 */
#include "template/tpl.h"

#include <string.h>

int tpl_bind(tpl_ctx *c, const char *what, const tpl_args *a, const char *const *names, size_t n, tv *out) {
    for (size_t i = 0; i < n; i++) out[i] = tv_missing();
    if (a->npos > n)
        return tpl_fail(c, XLLM_ERR_FORMAT, "%s takes at most %zu argument%s (%zu given)", what, n, n == 1 ? "" : "s",
                        a->npos);
    for (size_t i = 0; i < a->npos; i++) out[i] = a->pos[i];
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < n; i++)
            if (!strcmp(names[i], a->kw_names[k])) break;
        if (i == n) return tpl_fail(c, XLLM_ERR_FORMAT, "%s got an unexpected keyword argument '%s'", what, a->kw_names[k]);
        if (out[i].kind != TV_MISSING)
            return tpl_fail(c, XLLM_ERR_FORMAT, "%s got multiple values for argument '%s'", what, a->kw_names[k]);
        out[i] = a->kw[k];
    }
    return 0;
}

int tpl_arg_int(tpl_ctx *c, const char *what, const tv *v, int64_t *out) {
    if (v->kind == TV_INT) { *out = v->u.i; return 0; }
    if (v->kind == TV_BOOL) { *out = v->u.b; return 0; }
    if (v->kind == TV_UNDEF) return tpl_fail_undef(c, v);
    return tpl_fail(c, XLLM_ERR_FORMAT, "%s: an integer is required, not '%s'", what, tv_type_name(v));
}
