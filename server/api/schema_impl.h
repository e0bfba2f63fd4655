/*
 * schema_impl — what the schema module's files share (schema.c: the compiler; schema_re.c: the
 * pattern keyword). Not for users of schema.h.
 */
#ifndef DELTAD_SCHEMA_IMPL_H
#define DELTAD_SCHEMA_IMPL_H

#include <stddef.h>

#include "engine/util.h" // defines: struct dd_buf

/* How the text of a string is written:
 *   JSON      JSON string contents (escapes where JSON needs them)
 *   JSON_XML  the same, '<' always as the escape \u003c: a JSON value inside a parameter of the
 *             XML tool-call form, which must never contain "</parameter>"
 *   RAW       the characters themselves, never '<' (a string parameter of the XML form: its
 *             value is the text up to "</parameter>") */
enum schema_text { SCHEMA_TEXT_JSON, SCHEMA_TEXT_JSON_XML, SCHEMA_TEXT_RAW };

/* Append to e the GBNF of the string contents (without the quotes) that match the regular
 * expression re (the subset in schema_re.c), written as mode says. Returns 0, or -1 with err
 * set. */
int schema__pattern(const char *re, enum schema_text mode, struct dd_buf *e, char *err,
                    size_t errlen);

#endif
