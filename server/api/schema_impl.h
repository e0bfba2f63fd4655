/*
 * schema_impl — what the schema module's files share (schema.c: the compiler; schema_re.c: the
 * pattern keyword). Not for users of schema.h.
 */
#ifndef DELTAD_SCHEMA_IMPL_H
#define DELTAD_SCHEMA_IMPL_H

#include <stddef.h>

#include "engine/util.h" // defines: struct dd_buf

/* Append to e the GBNF of the JSON string contents (without the quotes) that match the regular
 * expression re (the subset in schema_re.c). Returns 0, or -1 with err set. */
int schema__pattern(const char *re, struct dd_buf *e, char *err, size_t errlen);

#endif
