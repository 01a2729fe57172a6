/* Names of topics and channels, one rule for every door and for storage:
 * [A-Za-z0-9._-]{1,255}, and never "." or ".." (so a name is safe as a
 * file name as it is). The engine also takes such a name followed by
 * NSQ's "#ephemeral" (255 characters in all): an ephemeral topic lives in
 * memory only, an ephemeral channel goes with its last consumer. The NSQ
 * doors narrow the rule to nsqd's 64 characters (proto/nsq/codec.h). */
#ifndef TN_CORE_NAME_H
#define TN_CORE_NAME_H

#include "core/platform.h"

#define TN_NAME_MAX           255
#define TN_NAME_EPHEMERAL     "#ephemeral"
#define TN_NAME_EPHEMERAL_LEN (sizeof(TN_NAME_EPHEMERAL) - 1)

bool tn_name_valid(const char *s, size_t len);
/* Whether s ends in "#ephemeral" after at least one character. */
bool tn_name_ephemeral(const char *s, size_t len);
/* A valid name, or a valid name followed by "#ephemeral", at most
 * TN_NAME_MAX characters in all. */
bool tn_name_valid_any(const char *s, size_t len);

/* The channels of child-topic links: "fanout." and 16 lowercase hex
 * digits (api/fanout.h). The node makes, consumes and deletes them
 * itself; no door lets a client take, settle, pause, empty, delete or
 * make one, since a message a client took there would never reach the
 * child. */
#define TN_NAME_LINK_PREFIX     "fanout."
#define TN_NAME_LINK_PREFIX_LEN (sizeof(TN_NAME_LINK_PREFIX) - 1)
/* The doors' refusal, after "channel <name> ". */
#define TN_NAME_LINK_REFUSED "belongs to the link of a child topic"

/* A dead letter of topic T's channel C moves to `T.C.DLQ`, or, when that
 * passes TN_NAME_MAX, to `<T's first TN_NAME_DLQ_PREFIX characters>.<8 hex
 * digits: a hash of T and C>.DLQ` (queue/channel.c, api/access.h). */
#define TN_NAME_DLQ_PREFIX 200

/* Whether s (len bytes, borrowed) names a link's channel. */
bool tn_name_link_channel(const char *s, size_t len);

/* The channel of a live WebSocket feed's connection (api/ws.c):
 * "ws.<node id>.<subscription id>#ephemeral", decimal. It is that
 * connection's alone (every connection gets every message): NSQ SUB
 * refuses it, so no client takes the feed's messages from under it. */
#define TN_NAME_FEED_PREFIX "ws."
/* The doors' refusal, after "channel <name> ". */
#define TN_NAME_FEED_REFUSED "belongs to a live WebSocket feed's connection"
/* Whether s (len bytes, borrowed) names a feed's channel. */
bool tn_name_feed_channel(const char *s, size_t len);

#endif
