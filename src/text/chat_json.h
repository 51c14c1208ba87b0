/* chat_json.h — JSON text as Jinja's `tojson` filter writes it in chat
 * templates (json.dumps(x, ensure_ascii=False): ", " and ": " separators,
 * keys in their given order, non-ASCII kept), and Python's str() of a JSON
 * scalar (`| string`).  Internal to src/text (chat templates) and src/serve
 * (tool-call arguments).
 */
#ifndef QWISP_TEXT_CHAT_JSON_H
#define QWISP_TEXT_CHAT_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* malloc'd tojson text of v (NULL only when out of memory). */
char *qw_json_dumps(const cJSON *v);
/* malloc'd `v | string` as Python Jinja gives it: a string as itself,
 * true/false/null as True/False/None, numbers as Python prints them,
 * arrays and objects as Python's repr ("['a', 1]"). */
char *qw_json_pystr(const cJSON *v);

#endif
