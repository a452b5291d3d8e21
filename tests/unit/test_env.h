/*
 * test_env.h - model options with the XLLM_* environment switches applied,
 * as the CLI applies them (tools/options_env.h): the library never reads the
 * environment, so test programs that scripts run under XLLM_CPU=... (or that
 * set such variables themselves) load their models through these.
 */
#ifndef XLLM_TEST_ENV_H
#define XLLM_TEST_ENV_H

#include "../../tools/options_env.h"

/* Defaults plus the environment (a static: one caller at a time). */
static inline const xllm_model_options *test_env_options(void) {
    static xllm_model_options o;
    o = xllm_model_options_default();
    cli_model_options_from_env(&o);
    return &o;
}

#endif
