/*
 * store — bounded, expiring store of responses (see store.h).
 *
 * A doubly linked list in insertion order (the head is the oldest) under one mutex. Lookups
 * are linear: the store is bounded by config and each operation is cheap next to a
 * generation; expired entries are swept from the head on every call.
 *
 * Thread safety: any thread; the mutex guards everything.
 */
#include "store.h" // defines: store_create, store_put, store_get

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/util.h" // defines: xcalloc, xstrdup, dd_now

struct entry {
    struct entry *prev, *next;
    char *id, *object, *messages;
    double t; /* dd_now() when added */
    bool cancel;
};

struct store {
    pthread_mutex_t mu;
    struct entry *head, *tail; /* oldest first */
    int64_t n, max;
    double ttl_s;
};

store_t *store_create(int64_t max, double ttl_s)
{
    store_t *s = xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->max = max;
    s->ttl_s = ttl_s;
    return s;
}

static void unlink_free(store_t *s, struct entry *e)
{
    (e->prev ? &e->prev->next : &s->head)[0] = e->next;
    (e->next ? &e->next->prev : &s->tail)[0] = e->prev;
    s->n--;
    free(e->id);
    free(e->object);
    free(e->messages);
    free(e);
}

void store_destroy(store_t *s)
{
    if (!s)
        return;
    while (s->head)
        unlink_free(s, s->head);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Drop expired entries (from the oldest) and find id. Caller holds the mutex. */
static struct entry *find(store_t *s, const char *id)
{
    double now = dd_now();
    while (s->head && now - s->head->t > s->ttl_s)
        unlink_free(s, s->head);
    for (struct entry *e = s->head; e; e = e->next)
        if (strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

void store_put(store_t *s, const char *id, const char *object, const char *messages)
{
    if (s->max <= 0)
        return;
    pthread_mutex_lock(&s->mu);
    struct entry *e = find(s, id);
    if (e) {
        free(e->object);
        free(e->messages);
    } else {
        while (s->n >= s->max)
            unlink_free(s, s->head);
        e = xcalloc(1, sizeof *e);
        e->id = xstrdup(id);
        e->t = dd_now();
        e->prev = s->tail;
        (s->tail ? &s->tail->next : &s->head)[0] = e;
        s->tail = e;
        s->n++;
    }
    e->object = xstrdup(object);
    e->messages = messages ? xstrdup(messages) : NULL;
    pthread_mutex_unlock(&s->mu);
}

bool store_get(store_t *s, const char *id, char **object, char **messages)
{
    pthread_mutex_lock(&s->mu);
    struct entry *e = find(s, id);
    if (e && object)
        *object = xstrdup(e->object);
    if (e && messages)
        *messages = e->messages ? xstrdup(e->messages) : NULL;
    pthread_mutex_unlock(&s->mu);
    return e != NULL;
}

bool store_delete(store_t *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    struct entry *e = find(s, id);
    if (e)
        unlink_free(s, e);
    pthread_mutex_unlock(&s->mu);
    return e != NULL;
}

bool store_cancel(store_t *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    struct entry *e = find(s, id);
    if (e)
        e->cancel = true;
    pthread_mutex_unlock(&s->mu);
    return e != NULL;
}

bool store_cancel_requested(store_t *s, const char *id)
{
    pthread_mutex_lock(&s->mu);
    struct entry *e = find(s, id);
    bool c = e && e->cancel;
    pthread_mutex_unlock(&s->mu);
    return c;
}
