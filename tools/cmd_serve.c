/*
 * cmd_serve.c - `xllm serve`: the OpenAI-compatible HTTP server (src/server,
 * docs/SERVER.md). This file only reads the command line.
 */
#include "cli.h"
#include "commands.h"
#include "pp_cli.h"
#include "server.h" /* src/server: the server's entry point */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int num(const char *flag, const char *v, long lo, long hi, long *out) { return !cli_int(flag, v, lo, hi, out); }

int cmd_serve(int argc, char **argv) {
    srv_options o = srv_options_default();
    pp_cli pp;
    memset(&pp, 0, sizeof pp);
    xllm_model_options ppmo = xllm_model_options_default();
    o.model_options_hook = cli_model_options_from_env;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        int r = pp_cli_parse(&pp, argc, argv, &i);
        if (r < 0) return 1;
        if (r) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) goto missing; o.model_path = v; i++; }
        else if (!strcmp(a, "--host")) { if (!v) goto missing; o.host = v; i++; }
        else if (!strcmp(a, "--port")) { if (!num(a, v, 0, 65535, &x)) return 1; o.port = (int)x; i++; }
        else if (!strcmp(a, "--api-key")) { if (!v || !*v) goto missing; o.api_key = v; i++; }
        else if (!strcmp(a, "--config")) { if (!v) goto missing; o.config_path = v; i++; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (!num(a, v, 0, 4096, &x)) return 1; o.n_threads = (int)x; i++; }
        else if (!strcmp(a, "--max-queue")) { if (!num(a, v, 0, 1000000, &x)) return 1; o.max_queue = (int)x; i++; }
        else if (!strcmp(a, "--max-body")) { if (!num(a, v, 1, 1L << 30, &x)) return 1; o.max_body = (size_t)x; i++; }
        else if (!strcmp(a, "--request-timeout")) { if (!num(a, v, 0, 86400, &x)) return 1; o.request_timeout_s = (int)x; i++; }
        else if (!strcmp(a, "--idle-timeout")) { if (!num(a, v, 0, 86400, &x)) return 1; o.idle_timeout_s = (int)x; i++; }
        else if (!strcmp(a, "--max-connections")) { if (!num(a, v, 1, 100000, &x)) return 1; o.max_connections = (int)x; i++; }
        else if (!strcmp(a, "--header-timeout")) { if (!num(a, v, 0, 86400, &x)) return 1; o.header_timeout_s = (int)x; i++; }
        else if (!strcmp(a, "--body-timeout")) { if (!num(a, v, 0, 86400, &x)) return 1; o.body_timeout_s = (int)x; i++; }
        else if (!strcmp(a, "--write-timeout")) { if (!num(a, v, 0, 86400, &x)) return 1; o.write_timeout_s = (int)x; i++; }
        else if (!strcmp(a, "--sse-keepalive")) { if (!num(a, v, 0, 86400000, &x)) return 1; o.sse_keepalive_ms = (int)x; i++; }
        else if (!strcmp(a, "--max-connections-per-ip")) { if (!num(a, v, 0, 100000, &x)) return 1; o.max_conns_per_ip = (int)x; i++; }
        else if (!strcmp(a, "--http-workers")) { if (!num(a, v, 0, 100000, &x)) return 1; o.http_workers = (int)x; i++; }
        else if (!strcmp(a, "--max-inflight-bytes")) { if (!num(a, v, 0, 1L << 40, &x)) return 1; o.max_inflight_bytes = (size_t)x; i++; }
        else if (!strcmp(a, "--log-text")) o.log_text = 1;
        else if (!strcmp(a, "--parse-special")) o.parse_special = 1;
        else if (!strcmp(a, "--kv-dtype")) { if (!v) goto missing; o.kv_dtype = v; i++; }
        else if (cli_is_help(a)) {
            cli_print_help(stdout, "serve");
            return 0;
        } else {
            return cli_unknown_option("serve", a);
        }
        continue;
    missing:
        fprintf(stderr, "xllm: error: %s needs a value\n", a);
        return 1;
    }
    if (pp.size > 1) {
        pp_cli_apply(&pp, &ppmo);
        o.pp = &ppmo;
    }
    return server_main(&o);
}
