/* jsonstr.h — the exact bytes of a top-level JSON string member, NULs
 * included.
 *
 * cJSON hands out strings NUL-terminated and keeps no length, so a decoded
 * "\u0000" ends the string early: a prompt "a\u0000b" read with strlen was
 * cut to "a" (issue 21, item 4).  This reads the one member that needs its
 * true length straight from the request text, after cJSON has accepted it.
 */
#ifndef QWISP_SERVE_JSONSTR_H
#define QWISP_SERVE_JSONSTR_H

#include <stdbool.h>
#include <stddef.h>

/* body[0..len) is a JSON object cJSON has parsed.  Finds its first member
 * named key (as cJSON_GetObjectItemCaseSensitive does) whose value is a
 * string, or an array whose first element is a string, and returns that
 * string decoded: malloc'd, NUL-terminated after *n bytes.  NULL when the
 * member is absent or of another type. */
char *qw_json_member_string(const char *body, size_t len, const char *key, size_t *n);

/* True when a string anywhere in the JSON text body[0..len) holds a "\u0000"
 * escape (a NUL character).  Chat messages go through the template as C
 * strings, so /v1/chat/completions refuses such a request instead of
 * silently cutting a message at the NUL. */
bool qw_json_has_nul(const char *body, size_t len);

#endif
