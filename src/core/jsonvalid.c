/* JSON validation without a parser. See jsonvalid.h. */
#include "core/platform.h"

#include "core/jsonvalid.h"

#include <string.h>

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} vcur_t;

static void v_ws(vcur_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool v_hex(unsigned char x)
{
    return (x >= '0' && x <= '9') || (x >= 'a' && x <= 'f') || (x >= 'A' && x <= 'F');
}

/* A string after its opening quote. UTF-8 as yajl's lexer checks it: a
 * lead byte 110xxxxx, 1110xxxx or 11110xxx followed by that many
 * 10xxxxxx bytes. */
static bool v_string(vcur_t *c)
{
    while (c->p < c->end) {
        unsigned char x = *c->p++;
        if (x == '"')
            return true;
        if (x < 0x20)
            return false;
        if (x == '\\') {
            if (c->p == c->end)
                return false;
            unsigned char e = *c->p++;
            if (e == 'u') {
                for (int i = 0; i < 4; i++)
                    if (c->p == c->end || !v_hex(*c->p++))
                        return false;
            } else if (strchr("\"\\/bfnrt", e) == NULL || e == '\0') {
                return false;
            }
            continue;
        }
        if (x < 0x80)
            continue;
        int more = (x >> 5) == 0x6 ? 1 : (x >> 4) == 0xe ? 2 : (x >> 3) == 0x1e ? 3 : -1;
        if (more < 0)
            return false;
        for (int i = 0; i < more; i++)
            if (c->p == c->end || (*c->p++ >> 6) != 0x2)
                return false;
    }
    return false;
}

static bool v_digits(vcur_t *c)
{
    const unsigned char *start = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
        c->p++;
    return c->p > start;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static bool v_number(vcur_t *c)
{
    if (*c->p == '-')
        c->p++;
    if (c->p == c->end)
        return false;
    if (*c->p == '0')
        c->p++;
    else if (!v_digits(c))
        return false;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!v_digits(c))
            return false;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        if (!v_digits(c))
            return false;
    }
    return true;
}

static bool v_word(vcur_t *c, const char *w, size_t n)
{
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* An object member's key and its colon, from the opening quote on. */
static bool v_key(vcur_t *c)
{
    if (c->p == c->end || *c->p++ != '"' || !v_string(c))
        return false;
    v_ws(c);
    return c->p < c->end && *c->p++ == ':';
}

/* Iterative: a stack of one bit per open container (1 object, 0 array)
 * holds the nesting, so depth costs no recursion. */
bool tn_json_valid(const char *body, size_t len)
{
    vcur_t c = {(const unsigned char *)body, (const unsigned char *)body + len};
    unsigned char stack[(TN_JSON_MAX_DEPTH + 7) / 8] = {0};
    int depth = 0;
    enum { VALUE, AFTER } state = VALUE;
    for (;;) {
        v_ws(&c);
        if (state == VALUE) {
            if (c.p == c.end)
                return false;
            unsigned char x = *c.p;
            bool ok;
            if (x == '{' || x == '[') {
                if (depth == TN_JSON_MAX_DEPTH)
                    return false;
                unsigned char bit = (unsigned char)(1u << (depth % 8));
                stack[depth / 8] =
                    (unsigned char)(x == '{' ? stack[depth / 8] | bit : stack[depth / 8] & ~bit);
                depth++;
                c.p++;
                v_ws(&c);
                if (c.p < c.end && *c.p == (x == '{' ? '}' : ']')) {
                    c.p++;
                    depth--;
                    state = AFTER;
                    continue;
                }
                if (x == '{' && !v_key(&c))
                    return false;
                continue; /* a value follows */
            }
            if (x == '"') {
                c.p++;
                ok = v_string(&c);
            } else if (x == '-' || (x >= '0' && x <= '9')) {
                ok = v_number(&c);
            } else {
                ok = v_word(&c, "true", 4) || v_word(&c, "false", 5) || v_word(&c, "null", 4);
            }
            if (!ok)
                return false;
            state = AFTER;
            continue;
        }
        /* AFTER a value: the end, a comma, or a closing bracket. */
        if (depth == 0)
            return c.p == c.end;
        if (c.p == c.end)
            return false;
        bool in_object = (stack[(depth - 1) / 8] >> ((depth - 1) % 8)) & 1;
        unsigned char x = *c.p++;
        if (x == (in_object ? '}' : ']')) {
            depth--;
            continue;
        }
        if (x != ',')
            return false;
        if (in_object) {
            v_ws(&c);
            if (!v_key(&c))
                return false;
        }
        state = VALUE;
    }
}
