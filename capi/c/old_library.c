/* The library an old program (capi/c/old_options.c) was linked against: a shared object
 * named libethbcast_capi.so without a soname, exporting the functions the program calls. Its
 * bodies never run: the test runs the program against the current library instead. */
#include <stdlib.h>

int ethbcast_options_default(void *out) {
    (void)out;
    abort();
}

const char *ethbcast_last_error(void) {
    abort();
}
