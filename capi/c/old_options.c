/* A program as it was built against ethbcast.h before the options carried their size (run
 * by capi/tests/c_abi_compat.rs). Its header declared the options as the struct below, 36
 * bytes, and ethbcast_options_default as a library function taking a pointer to it. A
 * library that writes its own, larger options there overwrites what follows the struct: here
 * canary bytes, in a real program its stack. Prints "canary intact" or "canary overwritten at
 * byte N" (exit 2); with a library of another ABI, the program must not get this far. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct old_options_t {
    uint32_t group_id;
    uint32_t timeout_ms;
    uint32_t wait;
    uint32_t algorithm;
    uint32_t expected;
    uint32_t progress_thread;
    uint32_t linger_ms;
    uint32_t root_waits_above;
    uint32_t host_spin_us;
} old_options_t;

int ethbcast_options_default(old_options_t *out);
const char *ethbcast_last_error(void);

int main(void) {
    struct {
        old_options_t opts;
        unsigned char canary[32];
    } frame;
    memset(frame.canary, 0x5A, sizeof frame.canary);
    printf("calling ethbcast_options_default\n");
    fflush(stdout);
    int rc = ethbcast_options_default(&frame.opts);
    printf("ethbcast_options_default returned %d (%s)\n", rc, ethbcast_last_error());
    for (size_t i = 0; i < sizeof frame.canary; i++)
        if (frame.canary[i] != 0x5A) {
            printf("canary overwritten at byte %zu\n", i);
            return 2;
        }
    printf("canary intact\n");
    return 0;
}
