/*
 * fz_model — the model the fuzz targets share: a GGUF's tokenizer (and the GGUF itself, where the
 * chat template lives) in an otherwise zeroed struct model, so that api_parse, chat rendering
 * and the tokenizer run exactly as in the daemon without loading any weights.
 *
 * Not a library module: linked into the fuzz targets only (Makefile FUZZ_DEPS_*).
 * Thread safety: load once from LLVMFuzzerInitialize; the result is immutable.
 */
#ifndef DELTAD_FZ_MODEL_H
#define DELTAD_FZ_MODEL_H

#include "engine/model/model.h" // defines: struct model

/* The GGUF named by the environment variable env, else by fallback. On failure prints why
 * (naming the variable) and exits with status 77, the test runner's "skip". The model lives
 * until the process exits. */
const struct model *fz_model_load(const char *env, const char *fallback);

#endif
