/*
 * fz_model — a weightless struct model for the fuzz targets (see fz_model.h).
 *
 * Invariant: only path, gguf, tok and hp.n_vocab are set; everything that needs weights would
 * read zeros, so a target that reached the forward pass by mistake would crash loudly.
 */
#include "fz_model.h" // defines: fz_model_load

#include <stdio.h>
#include <stdlib.h>

#include "engine/model/gguf.h" // defines: gguf_open
#include "engine/model/tok.h"  // defines: tok_create
#include "engine/util.h"       // defines: xcalloc, xstrdup

const struct model *fz_model_load(const char *env, const char *fallback)
{
    const char *path = getenv(env) ? getenv(env) : fallback;
    char err[512] = "";
    gguf_t *g = NULL;
    tok_t *t = NULL;
    if (gguf_open(path, &g, err, sizeof err) || tok_create(g, &t, err, sizeof err)) {
        fprintf(stderr, "SKIP: cannot load the tokenizer of %s (set %s): %s\n", path, env, err);
        exit(77);
    }
    struct model *m = xcalloc(1, sizeof *m);
    m->path = xstrdup(path);
    m->gguf = g;
    m->tok = t;
    m->hp.n_vocab = tok_n_vocab(t);
    return m;
}
