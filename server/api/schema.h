/*
 * schema — JSON Schema to grammar: the text of a GBNF grammar (engine/sched/gram.h) whose
 * sentences are JSON documents valid under the schema. It lives in server/api because it reads
 * a cJSON tree and JSON stays at the edge (STYLE rule 28); the engine sees grammar text only.
 *
 * Supported (docs/structured-output.md has the table): type (the seven, and arrays of them),
 * enum, const, properties, required, additionalProperties, anyOf, oneOf (where the branches
 * are seen to be disjoint: types, const / enum values, required properties, discriminators;
 * refused otherwise), allOf of object schemas, $ref to "#", "#/$defs/..." and any
 * JSON pointer inside the document (recursion allowed), items, prefixItems, minItems, maxItems,
 * minLength, maxLength, format (date, time, date-time, uuid, email, uri), integer minimum,
 * maximum, exclusiveMinimum, exclusiveMaximum; the annotations title, description, default,
 * examples, $schema, $id, $comment, deprecated, readOnly, writeOnly are ignored. Any other
 * keyword is an error naming it: a schema deltad accepts is a schema it enforces.
 *
 * What is generated is a subset of the valid documents: properties in the order the schema
 * lists them, no properties beyond the declared ones when a schema declares some (valid under
 * any additionalProperties), whitespace bounded (at most one newline and 16 blanks between
 * tokens), integers of at most 16 digits, strings without raw control characters and without
 * \u escapes of surrogates, dates with days 01-28.
 *
 * Limits: schemas nested deeper than SCHEMA_MAX_DEPTH, more than SCHEMA_MAX_RULES generated
 * rules or a grammar over SCHEMA_MAX_TEXT bytes are refused; integer bounds beyond ±10^15 too.
 *
 * Thread safety: no shared state.
 */
#ifndef DELTAD_SCHEMA_H
#define DELTAD_SCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "engine/util.h" // defines: struct dd_buf

#define SCHEMA_MAX_DEPTH 32
#define SCHEMA_MAX_RULES 4000
#define SCHEMA_MAX_TEXT (512u << 10)

/* The grammar of any JSON object (response_format json_object); static text. */
const char *schema_json_object_gbnf(void);

/* Append to out the grammar (start rule "root") of schema. Returns 0, or -1 with err set to
 * "<JSON pointer of the failing subschema>: <what>" (e.g. "#/properties/a: 'pattern' is not
 * supported"). */
int schema_to_gbnf(const cJSON *schema, struct dd_buf *out, char *err, size_t errlen);

/* The rules of schema alone, its top rule named prefix and every other rule prefixed with it
 * (several schemas can share one grammar); the primitives (schema_primitives) must be added
 * once. Returns 0 or -1 as schema_to_gbnf. */
int schema_rules(const cJSON *schema, const char *prefix, struct dd_buf *out, char *err,
                 size_t errlen);
void schema_primitives(struct dd_buf *out);

/* JSON types as bits. A number that is whole counts as an integer; type "number" is both. */
#define SCHEMA_T_NULL 1u
#define SCHEMA_T_BOOL 2u
#define SCHEMA_T_INT 4u
#define SCHEMA_T_NUM 8u /* a number that is not whole */
#define SCHEMA_T_STR 16u
#define SCHEMA_T_ARR 32u
#define SCHEMA_T_OBJ 64u
#define SCHEMA_T_ANY 127u

/* The types a value valid under subschema s (of the document root, for $ref) can have: from
 * type, const, enum, anyOf / oneOf (the union), allOf (the intersection) and the keywords that
 * imply a type; SCHEMA_T_ANY where nothing says. Any input (an invalid schema included). */
unsigned schema_types(const cJSON *root, const cJSON *s);
/* The type bit of a JSON value (0 for none). */
unsigned schema_value_type(const cJSON *v);

/*
 * The XML tool-call form (Qwen3.5, Qwen3-Coder): rule `prefix` matches the parameters of a
 * call whose arguments are valid under the object schema `params`,
 *   <parameter=NAME>\nVALUE\n</parameter>\n   ...
 * the declared properties in their order, required ones always, optional ones maybe. A
 * property whose schema allows strings only (schema_types) has its VALUE raw, the text itself
 * (enum / const literals, format, pattern, lengths; never "</parameter>", and no '<' where a
 * length or pattern bounds it); any other VALUE is JSON under the schema, '<' written as
 * \u003c. That is how toolcall.c reads them back. The top of params must be an object schema
 * (through $ref and allOf); property names 1 to 120 bytes without '<', '>' or newlines. Needs
 * schema_primitives_xml (instead of schema_primitives) once in the grammar. Returns 0, or -1
 * with err set as schema_to_gbnf.
 */
int schema_xml_params(const cJSON *params, const char *prefix, struct dd_buf *out, char *err,
                      size_t errlen);
void schema_primitives_xml(struct dd_buf *out);

/* A GBNF string literal of the bytes s[0..n) (and a blank). */
void schema_gbnf_literal(struct dd_buf *out, const char *s, size_t n);

/* Rules name-s0 .. name-s(n-1): name-s0 matches any text that does not contain pat (n = its
 * length, 2 .. 31 characters, its first character not repeated in it). */
void schema_text_until(struct dd_buf *out, const char *name, const char *pat);

/* The rules that make `start` match free text up to the first "</think>" (which it includes,
 * with up to two newlines after it), then rule `root`: the grammar of a request whose prompt
 * leaves a thinking block open. Appended to out. */
void schema_think_prefix(struct dd_buf *out, const char *start);

#endif
