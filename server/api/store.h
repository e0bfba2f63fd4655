/*
 * store — the bounded in-memory store of /v1/responses objects (store: true, the API's
 * default): GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel, and
 * previous_response_id, which continues the conversation kept with each response.
 *
 * Bounds: at most max entries (the oldest is evicted first) and ttl_s seconds per entry
 * (expired ones are dropped on the next access); an evicted or expired id is unknown (404).
 * An entry is added when a response starts (status in_progress, so it can be cancelled) and
 * replaced when it ends.
 *
 * Ownership: strings passed in are copied; strings handed out are malloc'd copies (free).
 * Thread safety: every function may be called from any thread (one mutex).
 */
#ifndef DELTAD_STORE_H
#define DELTAD_STORE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct store store_t;

/* max 0 = keep nothing (store_put is a no-op; every id is unknown). */
store_t *store_create(int64_t max, double ttl_s);
void store_destroy(store_t *s);

/* Add or replace the entry of id: the response object's JSON text and the conversation it
 * ends (a JSON array of chat messages, for previous_response_id; may be NULL while running). */
void store_put(store_t *s, const char *id, const char *object, const char *messages);
/* Copies of the entry's object and messages (either pointer may be NULL to skip it). Returns
 * false for an unknown id. */
bool store_get(store_t *s, const char *id, char **object, char **messages);
/* Remove; false for an unknown id. */
bool store_delete(store_t *s, const char *id);
/* Ask the running response id to stop; false for an unknown id. */
bool store_cancel(store_t *s, const char *id);
/* Was a cancel asked for (false for an unknown id)? */
bool store_cancel_requested(store_t *s, const char *id);

#endif
