/*
 * planner.h - the "pre-execution analyzer": at model load, a short
 * measurement chooses how each weight shape is run per batch-size bucket.
 *
 * For every distinct matrix shape and type of the model and every bucket
 * (T = 1, 2-8, 9-64, > 64) it times the level's matmul with each thread
 * count on a slice of the rows and keeps the fastest in the matrix's
 * plan_threads; the thread split never changes results, so plans cannot
 * change outputs. The attention strategy is chosen per step from the batch's
 * make-up (attention_strategy in model.h). `xllm info --plan` prints it all.
 */
#ifndef XLLM_ENGINE_PLANNER_H
#define XLLM_ENGINE_PLANNER_H

#include <cjson/cJSON.h>
#include "model/model.h"
#include "xllm.h"

/* Measure and apply; *report (cJSON, caller frees) describes the choices.
 * budget_ms bounds the measuring (shapes past it keep the default rule). */
xllm_status planner_run(model *m, int budget_ms, cJSON **report, xllm_error *err);

#endif
