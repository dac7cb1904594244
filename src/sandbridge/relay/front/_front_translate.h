/* The front door's translation of one exchange (sandbridge.relay.front._front): pure functions,
 * bytes in and bytes out, no I/O and no Python.h, so that a libFuzzer target links this
 * file alone (tests/fuzz/c/fuzz_translate.c).
 *
 * - requests: only the request line is parsed here (GET or OPTIONS, an origin-form target
 *   of plain URL characters, HTTP/1.1). The header block must equal, byte for byte, a block
 *   the Python relay parsed, checked and translated for the same client address and method
 *   (a cache entry); no header is parsed here.
 * - responses: a strict subset of HTTP/1.1 is read (status line, token names, values of
 *   visible characters, one Content-Length, the whole body in hand) and translated as
 *   protocol/http/forwarding.py's build_browser_response does; any other response is left
 *   for the Python relay. tests/relay/front/test_front_translation.py compares both.
 */
#ifndef SANDBRIDGE_FRONT_TRANSLATE_H
#define SANDBRIDGE_FRONT_TRANSLATE_H

#include <stddef.h>
#include <stdint.h>

#define CACHE_ENTRIES 32 /* translated request blocks per listener */
#define READ_MAX 16384   /* a browser's request, read here whole or not at all */
#define PEEK_MAX 65536   /* an app's response, relayed here whole or not at all */
#define MAX_TARGET 8192  /* parser.MAX_TARGET_BYTES */
#define MAX_FIELDS 100   /* parser.MAX_HEADER_COUNT */
/* parser.MAX_HEAD_BYTES, counted as the Python reader does: name + value + 4 a field */
#define MAX_HEAD_BYTES 65536

enum { METHOD_GET = 1, METHOD_OPTIONS = 3 };
/* translate_response's verdicts */
enum { TR_OK = 0, TR_INCOMPLETE = 1, TR_BAIL = 2 };

/* A request header block the Python relay checked, and its translation. */
typedef struct {
    uint32_t ip;
    int method;
    char *block;
    size_t block_len;
    char *out;
    size_t out_len;
    uint64_t used;
} entry_t;

/* The app's request head (malloc'd) for a browser request whose block is in cache (the
 * hit's use stamped with ++*clock), or NULL (the Python relay reads it). *method gets the
 * method. base: the app's base path. */
char *translate_request(entry_t cache[CACHE_ENTRIES], const char *base, size_t base_len,
                        uint32_t ip, const char *data, size_t n, int *method, size_t *out_len,
                        uint64_t *clock);

/* The length of the head at the start of buf (through its empty line), or 0. */
size_t head_length(const char *buf, size_t n);

/* TR_OK: *out is the browser's head (malloc'd), and the response is exactly *whole
 * bytes of buf (head and body); TR_INCOMPLETE: more may make it one; TR_BAIL: never. */
int translate_response(const char *buf, size_t n, int head_request, char **out,
                       size_t *out_len, size_t *whole);

/* A request line the relay's pool rule may let take an idle app connection
 * (app_pool.RETRYABLE_METHODS); the rest of that rule is the relay's. */
int retryable(const char *data, size_t n);

#endif
