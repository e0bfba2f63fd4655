/*
 * server_srcs — the server modules a unit test reaches by including their .c files (the
 * server is not in libdeltad.a): the request side (api, chat, templates, Jinja), the response
 * side (resp) and the chat output parsers (reply, reasoning, toolcall). One translation unit
 * with all of them, so their static names must not collide.
 */
#ifndef DELTAD_TEST_SERVER_SRCS_H
#define DELTAD_TEST_SERVER_SRCS_H

#include "../../server/api.c"
#include "../../server/api_chat.c"
#include "../../server/chat.c"
#include "../../server/chat_tmpl.c"
#include "../../server/jinja_eval.c"
#include "../../server/jinja_exec.c"
#include "../../server/jinja_expr.c"
#include "../../server/jinja_filters.c"
#include "../../server/jinja_json.c"
#include "../../server/jinja_lex.c"
#include "../../server/jinja_methods.c"
#include "../../server/jinja_ops.c"
#include "../../server/jinja_parse.c"
#include "../../server/jinja_seq.c"
#include "../../server/jinja_str.c"
#include "../../server/jinja_text.c"
#include "../../server/jinja_value.c"
#include "../../server/json.c"
#include "../../server/reasoning.c"
#include "../../server/reply.c"
#include "../../server/resp.c"
#include "../../server/toolcall.c"

#endif
