/*
 * jinja — a Jinja2 interpreter for model chat templates, with Hugging Face's conventions.
 *
 * The server compiles a model's chat template once (jinja_compile) and renders it per request
 * (jinja_render) against a context built from the request: messages, tools,
 * add_generation_prompt and chat_template_kwargs. Semantics follow Python jinja2 3.1 as
 * transformers configures it in `_compile_jinja_template`: an ImmutableSandboxedEnvironment with
 * trim_blocks and lstrip_blocks, the loopcontrols extension ({% break %}, {% continue %}), the
 * {% generation %} tag, the globals raise_exception and strftime_now, and a tojson filter that is
 * json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
 * — default separators ", " and ": ", non-ASCII text written as is.
 *
 * Not supported: template inheritance and loading (extends, include, import, block overrides),
 * recursive for loops, autoescaping, the `%` string-format operator, and mutating methods such
 * as list.append (transformers' sandbox refuses those too, with the same message).
 *
 * Threads: a compiled template is immutable; any number of threads may render it at once.
 * A value tree belongs to one thread at a time: jinja_render touches the reference counts of the
 * context it is given, so a context must not be rendered from two threads concurrently.
 */
#ifndef DELTAD_JINJA_H
#define DELTAD_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct jinja_value jinja_value;
typedef struct jinja_tmpl jinja_tmpl;

/* ---- values: the context a template is rendered against ---------------------------------- */

/*
 * Constructors return a new reference the caller owns (release with jinja_value_release).
 * They abort on OOM like xmalloc: context trees are small and built from bounded requests.
 */
jinja_value *jinja_value_none(void);
jinja_value *jinja_value_bool(int b);
jinja_value *jinja_value_int(int64_t v);
jinja_value *jinja_value_float(double v);
/* Copies len bytes (UTF-8 expected, not validated; NUL bytes allowed). */
jinja_value *jinja_value_string(const char *s, size_t len);
jinja_value *jinja_value_cstring(const char *s);
jinja_value *jinja_value_list(void);
jinja_value *jinja_value_dict(void);

/* Appends item to a list; the list takes over the caller's reference to item (transferred).
 * Returns 0, or DD_ETYPE (item is still released) when list is not a list. */
int jinja_list_append(jinja_value *list, jinja_value *item);
/* Sets dict[key] (key copied); insertion order is kept, an existing key keeps its position and
 * gets the new value. Takes over the reference to v. Returns 0 or DD_ETYPE. */
int jinja_dict_set(jinja_value *dict, const char *key, jinja_value *v);

/*
 * Converts a cJSON tree: null, booleans, strings, arrays and objects map one to one (duplicate
 * object keys keep the first position and the last value, as Python's json does). cJSON keeps
 * numbers as doubles, so an integral number within ±2^53 becomes an int and anything else a
 * float: "1.0" therefore renders as 1 where Python would print 1.0. Returns a new reference;
 * j is borrowed.
 */
jinja_value *jinja_value_from_cjson(const cJSON *j);

/* Adds a reference (returns v for chaining) / drops one; both accept NULL. */
jinja_value *jinja_value_acquire(jinja_value *v);
void jinja_value_release(jinja_value *v);

/* ---- templates ------------------------------------------------------------------------------ */

struct jinja_opts {
    int trim_blocks;           /* drop the first newline after a block tag (HF: 1) */
    int lstrip_blocks;         /* strip spaces before a block tag on its own line (HF: 1) */
    int keep_trailing_newline; /* keep a single trailing newline of the source (HF: 0) */
    /* Render limits; 0 picks the default. Exceeding one is an error, never a hang or abort. */
    size_t max_output;  /* bytes of rendered text (and of any captured block): 16 MiB */
    size_t max_memory;  /* bytes of values alive at once during one render: 128 MiB */
    uint64_t max_steps; /* evaluation steps, loop iterations, items built: 10 M (~0.5 s) */
    int max_depth;      /* nested macro calls: 64 */
    /* strftime_now() formats this time (seconds since the epoch, local time zone); 0 = now. */
    int64_t now;
};

/* Fills o with Hugging Face's settings (trim_blocks and lstrip_blocks on) and default limits. */
void jinja_opts_init(struct jinja_opts *o);

/*
 * Compiles src[0..len) (need not be NUL-terminated). o may be NULL for jinja_opts_init's
 * settings; it is copied. On success *out is a template the caller frees with jinja_free.
 * On a syntax error returns DD_EINVAL and writes "line:col: message" into err (errlen bytes,
 * always NUL-terminated when errlen > 0). Unknown filters and tests are compile errors too, as
 * in jinja2.
 */
int jinja_compile(const char *src, size_t len, const struct jinja_opts *o, jinja_tmpl **out,
                  char *err, size_t errlen);

/*
 * Renders t with the variables of ctx (a dict; NULL renders with no variables; borrowed, see
 * the thread note above). On success *out is a NUL-terminated string of *outlen bytes, owned by
 * the caller (free()). On failure returns DD_EINVAL (template error) or DD_EFULL (a limit), sets
 * *out to NULL and writes the message into err: exactly the message given to
 * raise_exception(...), otherwise "line:col: what went wrong".
 */
int jinja_render(const jinja_tmpl *t, const jinja_value *ctx, char **out, size_t *outlen, char *err,
                 size_t errlen);

/* Frees a template; NULL is fine. */
void jinja_free(jinja_tmpl *t);

#endif
