/*
 * toolcall — find tool calls in a chat choice's content, incrementally, in the two forms Qwen
 * models are trained on:
 *
 *   JSON (Qwen2.5, Qwen3, QwQ)          XML (Qwen3-Coder, Qwen3.5)
 *   <tool_call>                         <tool_call>
 *   {"name": "f", "arguments": {...}}   <function=f>
 *   </tool_call>                        <parameter=p>
 *                                       value
 *                                       </parameter>
 *                                       </function>
 *                                       </tool_call>
 *
 * A call is reported (TOOLCALL_START with its name) as soon as its head is complete and names
 * a declared tool; its arguments follow as TOOLCALL_ARGS pieces whose concatenation is the JSON
 * text of the arguments: the model's own bytes in the JSON form; {"p": value, ...} built per
 * parameter in the XML form: a value is the text itself (a JSON string) when the parameter's
 * schema allows strings only, else JSON when it parses as JSON of a type the schema allows
 * (schema_types: any type for an undescribed parameter), else again the text. The grammar of
 * enforced calls (schema_xml_params) writes values that read back this way. Everything else is
 * TOOLCALL_TEXT.
 *
 * Malformed output degrades to text, never to an error: a head that does not match waits for
 * </tool_call> and is then parsed as one JSON object ({"name", "arguments"} in any order,
 * arguments an object or a JSON string); failing that, the block is emitted as text, tags
 * included. IMPORTANT: once a call was reported it cannot be taken back; what follows its
 * arguments up to </tool_call> is skipped, and a call cut off by the token cap keeps the
 * arguments it had.
 *
 * Whitespace around calls (the newlines between blocks) is dropped. The events do not depend
 * on how the text was cut into pieces.
 *
 * Ownership: caller-allocated (toolcall_init / toolcall_deinit); tools is borrowed and must
 * outlive the parser; emitted pieces are borrowed for the call. Thread safety: one owner.
 */
#ifndef DELTAD_TOOLCALL_H
#define DELTAD_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "engine/util.h" // defines: struct dd_buf

enum toolcall_ev {
    TOOLCALL_TEXT,  /* plain content */
    TOOLCALL_START, /* a new call; the piece is its function name */
    TOOLCALL_ARGS,  /* more of the current call's arguments (JSON text) */
};

typedef void (*toolcall_emit_fn)(void *ud, enum toolcall_ev ev, const char *s, size_t n);

struct toolcall {
    int state;          /* internal parser state */
    struct dd_buf text; /* content not yet emitted (trailing whitespace, partial tag) */
    struct dd_buf call; /* the current block after <tool_call> */
    struct dd_buf pre;  /* whitespace dropped before the block, for a degraded block */
    size_t pos;         /* parse position in call */
    int depth;          /* JSON arguments scanner: nesting, string, escape */
    bool in_str, esc;
    int n_params;       /* XML: parameters emitted for the current call */
    char param[128];    /* XML: the parameter being read */
    bool skip_ws;       /* drop whitespace after a call */
    bool muted;         /* the current call is over max_calls: parsed, not reported */
    int n_calls;        /* calls reported */
    int max_calls;      /* 0 = any number */
    const cJSON *tools; /* the request's tools array, or NULL = accept any name */
    const cJSON *fn;    /* the current call's "function" definition, or NULL */
    toolcall_emit_fn emit;
    void *ud;
};

/* tools (borrowed, may be NULL): call names must be declared there; max_calls 0 = unlimited,
 * 1 = parallel_tool_calls false (later calls are parsed and dropped). */
void toolcall_init(struct toolcall *t, const cJSON *tools, int max_calls, toolcall_emit_fn emit,
                   void *ud);
void toolcall_feed(struct toolcall *t, const char *s, size_t n);
/* End of output: settle a pending block, flush held text. */
void toolcall_finish(struct toolcall *t);
void toolcall_deinit(struct toolcall *t);

#endif
