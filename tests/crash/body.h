/* Self-describing message bodies for the crash tests: "id=<n>;" followed
 * by bytes derived from n, so a checker can tell a record that is whole
 * and belongs where the ledger says from anything else. */
#ifndef TN_TESTS_CRASH_BODY_H
#define TN_TESTS_CRASH_BODY_H

#include "core/platform.h"

#include <stdio.h>
#include <string.h>

/* Write the body of message id into buf (cap bytes); returns its length. */
static inline size_t crash_body(uint64_t id, char *buf, size_t cap)
{
    int k = snprintf(buf, cap, "id=%llu;", (unsigned long long)id);
    size_t len = (size_t)k + (size_t)(id * 37 % 400);
    if (len > cap)
        len = cap;
    for (size_t i = (size_t)k; i < len; i++)
        buf[i] = (char)('A' + (id + i * 3) % 26);
    return len;
}

/* id + 1 when body is exactly crash_body(id), else 0. */
static inline uint64_t crash_body_check(const char *body, size_t len)
{
    unsigned long long id;
    char tmp[40];
    size_t n = TN_MIN(len, sizeof(tmp) - 1);
    memcpy(tmp, body, n);
    tmp[n] = '\0';
    if (sscanf(tmp, "id=%llu;", &id) != 1)
        return 0;
    char expect[512];
    size_t elen = crash_body(id, expect, sizeof(expect));
    if (elen != len || memcmp(expect, body, len) != 0)
        return 0;
    return id + 1;
}

#endif
