/*
 * cmd_gram — `deltad bench --schema FILE | --grammar FILE`: what constrained decoding costs.
 * Reports the compile time (schema to grammar and the grammar's compilation, median of 21),
 * then decode tokens/s unconstrained and constrained at batch 1 and 8 (greedy; a fresh engine
 * per run, runs interleaved in the order ABBA so that neither kind always runs second, medians
 * of --reps), and the mask time per token of the
 * constrained runs from the grammar statistics (mean, and p50 / p99 as the upper bound of the
 * histogram bucket that holds them; the first run builds the vocabulary trie and fills the mask
 * cache, the later ones mostly hit it).
 *
 * Output: human-readable lines, then one `result key=value ...` line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cmd.h"               // defines: cmd_engine_open, struct cmd_opts
#include "engine/model/tok.h"  // defines: tok_encode
#include "engine/sched/eng.h"  // defines: eng_create_group
#include "engine/sched/gram.h" // defines: gram_compile, gram_get_stats
#include "engine/util.h"       // defines: xmalloc, dd_now, struct dd_buf
#include "server/api/schema.h" // defines: schema_to_gbnf

#define MAX_REPS 64

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct dd_buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        dd_buf_put(&b, chunk, n);
    fclose(f);
    dd_buf_putc(&b, 0);
    *len = b.len - 1;
    return dd_buf_take(&b, NULL);
}

/* The grammar text of --grammar, or of --schema compiled; NULL after an error message. */
static char *grammar_text(const struct cmd_opts *o, size_t *len)
{
    const char *path = *o->schema ? o->schema : o->grammar;
    char *text = slurp(path, len), err[512];
    if (!text) {
        fprintf(stderr, "error: cannot read %s\n", path);
        return NULL;
    }
    if (!*o->schema)
        return text;
    cJSON *j = cJSON_ParseWithLength(text, *len);
    free(text);
    struct dd_buf b = {0};
    if (!j || schema_to_gbnf(j, &b, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", path, j ? err : "not JSON");
        cJSON_Delete(j);
        dd_buf_free(&b);
        return NULL;
    }
    cJSON_Delete(j);
    *len = b.len;
    return dd_buf_take(&b, NULL);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of compiling (schema to grammar included) 21 times. */
static double compile_time(const struct cmd_opts *o)
{
    double t[21];
    for (int k = 0; k < 21; k++) {
        double t0 = dd_now();
        size_t len;
        char *text = grammar_text(o, &len), err[256];
        gram_t *g = NULL;
        if (text)
            gram_compile(text, len, NULL, &g, err, sizeof err);
        t[k] = dd_now() - t0;
        gram_release(g);
        free(text);
    }
    qsort(t, 21, sizeof *t, cmp_dbl);
    return t[10];
}

/* Decode tokens/s of `batch` concurrent greedy requests (g NULL: unconstrained); the rate over
 * the span from the first token to the last request's end. */
static double run_once(struct cmd_engine *e, const struct cmd_opts *o, gram_t *g, int batch,
                       const int32_t *prompt, int64_t n_prompt, int64_t *generated)
{
    char err[512];
    eng_t *eng;
    struct eng_params p = {.n_slots = batch,
                           .n_ctx = n_prompt + o->n_gen + 8,
                           .max_batch_tokens = o->batch,
                           .queue_max = batch,
                           .checkpoint_every = 1 << 20};
    if (eng_create_group(e->model, e->devs, e->n_dev, &p, &eng, err, sizeof err) ||
        eng_start(eng, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    eng_req_t *r[8];
    for (int i = 0; i < batch; i++) {
        struct eng_req_params rp = {.n_prompt = n_prompt, .max_tokens = o->n_gen};
        rp.prompt = xmalloc((size_t)n_prompt * sizeof *rp.prompt);
        memcpy(rp.prompt, prompt, (size_t)n_prompt * sizeof *rp.prompt);
        rp.s = (struct smp_params){.top_p = 1.0f, .repetition_penalty = 1.0f};
        if (g) {
            gram_retain(g);
            rp.gram = g;
        }
        r[i] = eng_req_create(&rp, NULL, NULL);
        ASSERT(eng_submit(eng, r[i], err, sizeof err) == 0);
    }
    double first = 0, last = 0;
    int64_t n = 0;
    for (int i = 0; i < batch; i++) {
        for (;;) {
            struct eng_delta d;
            if (!eng_req_take(r[i], &d)) {
                usleep(500);
                continue;
            }
            bool done = d.done;
            if (done) {
                first = first == 0 || d.t_first_token < first ? d.t_first_token : first;
                last = d.t_done > last ? d.t_done : last;
                n += d.completion_tokens;
            }
            eng_delta_free(&d);
            if (done)
                break;
        }
        eng_req_release(r[i]);
    }
    eng_destroy(eng);
    *generated = n;
    return last > first ? (double)(n - batch) / (last - first) : 0;
}

/* The upper bound of the bucket holding quantile q of the mask-time histogram difference. */
static double quantile(const struct gram_hist *a, const struct gram_hist *b, double q)
{
    int64_t n = b->n - a->n, cum = 0;
    for (int i = 0; i < GRAM_HIST_BUCKETS; i++) {
        cum += b->count[i] - a->count[i];
        if (n > 0 && (double)cum >= q * (double)n)
            return gram_hist_bound[i];
    }
    return n > 0 ? 1e9 : 0;
}

int cmd_bench_gram(const struct cmd_opts *o)
{
    size_t len;
    char *text = grammar_text(o, &len), err[512];
    gram_t *g = NULL;
    if (!text || gram_compile(text, len, NULL, &g, err, sizeof err)) {
        if (text)
            fprintf(stderr, "error: the grammar does not compile: %s\n", err);
        free(text);
        return 2;
    }
    free(text);
    double t_compile = compile_time(o);
    struct cmd_engine e;
    if (cmd_engine_open(&e, o)) {
        cmd_engine_close(&e);
        gram_release(g);
        return 1;
    }
    const char *pt = *o->text ? o->text : "Reply with JSON.\n";
    int64_t n = tok_encode(e.model->tok, pt, strlen(pt), true, NULL, 0);
    int32_t *prompt = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *prompt);
    tok_encode(e.model->tok, pt, strlen(pt), true, prompt, n);
    printf("compile          %.3f ms (median of 21, schema to grammar included)\n",
           t_compile * 1e3);
    struct dd_buf res = {0};
    dd_buf_printf(&res, "result compile_ms=%.4f", t_compile * 1e3);
    int64_t reps = o->reps < MAX_REPS ? o->reps : MAX_REPS;
    static const int batches[] = {1, 8};
    for (int bi = 0; bi < 2; bi++) {
        double base[MAX_REPS], cons[MAX_REPS];
        int64_t gen_b = 0, gen_c = 0;
        struct gram_stats s0, s1;
        gram_get_stats(&s0);
        for (int64_t k = 0; k < reps; k++) { /* ABBA: neither kind always runs second */
            if (k % 2 == 0)
                base[k] = run_once(&e, o, NULL, batches[bi], prompt, n, &gen_b);
            cons[k] = run_once(&e, o, g, batches[bi], prompt, n, &gen_c);
            if (k % 2 == 1)
                base[k] = run_once(&e, o, NULL, batches[bi], prompt, n, &gen_b);
        }
        gram_get_stats(&s1);
        qsort(base, (size_t)reps, sizeof *base, cmp_dbl);
        qsort(cons, (size_t)reps, sizeof *cons, cmp_dbl);
        double b = base[reps / 2], c = cons[reps / 2];
        int64_t masks = s1.mask.n - s0.mask.n;
        double mean = masks ? (s1.mask.sum - s0.mask.sum) / (double)masks : 0;
        double p50 = quantile(&s0.mask, &s1.mask, 0.5), p99 = quantile(&s0.mask, &s1.mask, 0.99);
        printf("batch %d          unconstrained %.2f tok/s (%lld tokens), constrained %.2f tok/s "
               "(%lld tokens): %.1f%%; mask %.3f ms mean, p50 <= %g ms, p99 <= %g ms over %lld "
               "masks (%lld walked)",
               batches[bi], b, (long long)gen_b, c, (long long)gen_c, b > 0 ? 100 * c / b : 0,
               mean * 1e3, p50 * 1e3, p99 * 1e3, (long long)masks,
               (long long)(s1.walks - s0.walks));
        printf("\n");
        dd_buf_printf(&res,
                      " b%d_base_tok_s=%.3f b%d_constrained_tok_s=%.3f b%d_ratio=%.4f "
                      "b%d_mask_mean_ms=%.4f b%d_mask_p50_ms=%g b%d_mask_p99_ms=%g",
                      batches[bi], b, batches[bi], c, batches[bi], b > 0 ? c / b : 0, batches[bi],
                      mean * 1e3, batches[bi], p50 * 1e3, batches[bi], p99 * 1e3);
    }
    printf("%.*s\n", (int)res.len, res.p);
    dd_buf_free(&res);
    free(prompt);
    cmd_engine_close(&e);
    gram_release(g);
    return 0;
}
