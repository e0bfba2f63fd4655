/*
 * eng_impl — internals shared by the engine's own files (eng.c: the loop and slots; eng_req.c:
 * requests and their outboxes). Users include eng.h only.
 */
#ifndef DELTAD_ENG_IMPL_H
#define DELTAD_ENG_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "eng.h" // defines: public engine types

/* A request, shared by an HTTP connection and the engine (refcounted, STYLE rule 14). */
struct eng_req {
    atomic_int refs;
    atomic_bool cancelled;
    struct eng_req_params p; /* owned: prompt, stop strings, logit_bias */
    void (*notify)(void *ud);
    void *ud;
    struct eng_req *next; /* inbox link, guarded by the engine's inbox mutex */
    /* outbox, guarded by mu: written by the engine thread, drained by the HTTP side */
    pthread_mutex_t mu;
    char *out;
    size_t out_len, out_cap;
    struct eng_tok_info *toks;
    int64_t n_toks, toks_cap;
    bool done;
    enum eng_finish finish;
    char error[256];
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    double t_queued, t_first_token, t_done;
};

/* Engine-thread side of the outbox. */
void eng__req_append(eng_req_t *r, const char *text, size_t len, const struct eng_tok_info *ti);
void eng__req_finish(eng_req_t *r, enum eng_finish why, const char *error);
void eng__req_notify(eng_req_t *r);
void eng__req_usage(eng_req_t *r, int64_t cached, int64_t completion);
void eng__req_retain(eng_req_t *r);

#endif
