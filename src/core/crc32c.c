/* CRC32C: slicing-by-8 tables plus the SSE4.2 instruction, picked once at
 * startup. The polynomial is 0x82F63B78 (reflected Castagnoli). */
#include "core/platform.h"

#include "core/crc32c.h"

#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256];
/* x2n[k] = x^(2^k) modulo the polynomial, reflected: for shifting a CRC
 * past runs of zero bytes (tn_crc32c_patch). */
static uint32_t x2n[32];
static bool hw_available;

/* a * b modulo the polynomial, both reflected (bit 31 is x^0). */
static uint32_t mult_mod(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^(n * 2^k) modulo the polynomial: x^(8n) for k = 3, n bytes of zeros. */
static uint32_t x_pow_mod(size_t n, unsigned k)
{
    uint32_t p = 1u << 31; /* x^0 */
    while (n != 0) {
        if (n & 1)
            p = mult_mod(x2n[k & 31], p);
        n >>= 1;
        k++;
    }
    return p;
}

__attribute__((constructor)) static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
    }
    uint32_t x = 1u << 30; /* x^1 */
    x2n[0] = x;
    for (int k = 1; k < 32; k++)
        x2n[k] = x = mult_mod(x, x);
#if defined(__x86_64__)
    __builtin_cpu_init();
    hw_available = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t tn_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    crc = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        /* Table slicing assumes little-endian word loads. */
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
              table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
        len--;
    }
    return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t tn_crc32c_hw(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t c = ~crc;
    while (len > 0 && ((uintptr_t)p & 7) != 0) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        len -= 8;
    }
    while (len > 0) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        len--;
    }
    return ~(uint32_t)c;
}
#else
uint32_t tn_crc32c_hw(uint32_t crc, const void *data, size_t len)
{
    return tn_crc32c_sw(crc, data, len);
}
#endif

bool tn_crc32c_hw_available(void)
{
    return hw_available;
}

uint32_t tn_crc32c(uint32_t crc, const void *data, size_t len)
{
    if (TN_LIKELY(hw_available))
        return tn_crc32c_hw(crc, data, len);
    return tn_crc32c_sw(crc, data, len);
}

uint32_t tn_crc32c_patch(uint32_t crc, const void *was, const void *now, size_t n, size_t after)
{
    /* A CRC's register is linear in the message: the CRCs of two messages
     * of one length differ by the register of their XOR run from zero
     * (the initial and final inversions cancel), and leading zero bytes
     * leave a zero register unchanged. So the change is the register of
     * was ^ now alone, carried past the `after` bytes that follow. */
    const unsigned char *a = was, *b = now;
    uint32_t reg = 0;
    for (size_t i = 0; i < n; i++)
        reg = (reg >> 8) ^ table[0][(reg ^ a[i] ^ b[i]) & 0xff];
    return crc ^ mult_mod(x_pow_mod(after, 3), reg);
}
