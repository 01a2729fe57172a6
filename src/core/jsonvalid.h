/* Whether a text is one well-formed JSON value, nested at most
 * TN_JSON_MAX_DEPTH deep: one pass that allocates nothing and recurses
 * nowhere, for a check before a parser that builds a tree (yajl's tree
 * is freed by a recursion per level of nesting) or keeps a stack per
 * level. Below the protocols so that every module may ask it (the NSQ
 * auth client's answers, src/auth).
 *
 * Threads: any. */
#ifndef TN_CORE_JSONVALID_H
#define TN_CORE_JSONVALID_H

#include "core/platform.h"

#define TN_JSON_MAX_DEPTH 512 /* deeper nesting is refused (yajl's stack stays small) */

/* Whether body is exactly one JSON value (whitespace around it allowed,
 * nesting at most TN_JSON_MAX_DEPTH, strings of UTF-8 as yajl checks it),
 * in one pass that allocates nothing: the verdict of yajl's parser
 * (proto/http/json.h, tn_json_events with validate_utf8), except that
 * only RFC 8259's whitespace
 * counts (yajl also skips \v and \f between tokens, which a strict
 * reader of a document embedding the value would refuse). */
bool tn_json_valid(const char *body, size_t len);

#endif
