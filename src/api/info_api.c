/*
 * info_api.c - xllm_model_info: what a model file holds (metadata, each
 * tensor's type and shape), as JSON, for `xllm info` and tooling.
 */
#include "xllm.h"
#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "convert/policy.h"
#include "format/safetensors.h"
#include "format/gguf.h"
#include "format/xllm_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

xllm_status xllm_model_info(const char *path, char **json, xllm_error *err) {
    err_clear(err);
    *json = NULL;
    cJSON *meta = NULL;
    st_archive *a = NULL;
    const char *format;
    if (file_is_dir(path)) {
        char cfg[4096];
        path_join(cfg, sizeof cfg, path, "config.json");
        xllm_status st = json_file_load(cfg, &meta, err);
        if (st) return st;
        a = st_open(path, err);
        format = "huggingface";
    } else if (xf_is_xllm(path)) {
        a = xf_open(path, &meta, err);
        format = "xllm";
    } else if (gguf_is_gguf(path)) {
        gguf_model g;
        xllm_status st = gguf_open(path, &g, err);
        if (st) return st;
        a = g.tensors;
        meta = cJSON_CreateObject();
        cJSON_AddItemToObject(meta, "config", g.config);
        cJSON_Delete(g.generation_config);
        xllm_free(g.tokenizer_json);
        xllm_free(g.tokenizer_config_json);
        format = "gguf";
    } else {
        int exists = path_exists(path);
        return err_setf(err, exists ? XLLM_ERR_FORMAT : XLLM_ERR_IO,
                           "%s: %s; a model is a HuggingFace checkpoint directory (config.json + *.safetensors), an "
                           ".xllm file or a GGUF file", path, exists ? "not a model" : "no such model");
    }
    if (!a) {
        cJSON_Delete(meta);
        return err ? err->code : XLLM_ERR_FORMAT;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "path", path);
    cJSON_AddStringToObject(root, "format", format);
    /* the large per-tensor map is shown below, not twice */
    cJSON_DeleteItemFromObject(meta, "tensor_types");
    cJSON_AddItemToObject(root, "metadata", meta);
    cJSON *list = cJSON_AddArrayToObject(root, "tensors");
    double total = 0;
    for (size_t i = 0; i < st_count(a); i++) {
        const st_tensor *t = st_at(a, i);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->name);
        char tname[32];
        qtype q = {t->dtype, t->group};
        cJSON_AddStringToObject(o, "type", qtype_name(q, tname, sizeof tname));
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddNumberToObject(o, "bytes", (double)t->nbytes);
        total += (double)t->nbytes;
        cJSON_AddItemToArray(list, o);
    }
    cJSON_AddNumberToObject(root, "total_bytes", total);
    st_close(a);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
    *json = mem_strdup(text);
    cJSON_free(text);
    return *json ? XLLM_OK : err_setf(err, XLLM_ERR_OUT_OF_MEMORY, "out of memory");
}
