/* ethbcast from C: every member broadcasts a greeting in turn, then all meet at a barrier.
 *
 * Build (after `cargo build --release -p ethbcast-capi`), against the shared library:
 *   cc -O2 -Icapi capi/examples/hello.c -Ltarget/release -lethbcast_capi -o hello
 * and run with the library on the loader's path (or install it: docs/mpi.md, "Linking"):
 *   LD_LIBRARY_PATH=target/release ETHBCAST_RANK=0 ETHBCAST_SIZE=4 ./hello eth0
 * or against the static library, for a program that needs nothing beside it:
 *   cc -O2 -Icapi capi/examples/hello.c target/release/libethbcast_capi.a \
 *      -lpthread -ldl -lm -o hello
 *   ETHBCAST_RANK=0 ETHBCAST_SIZE=4 ./hello eth0
 * One copy per host, with rank and size from the launcher (or ETHBCAST_RANK/SIZE as here;
 * ranks 1..3 on the other hosts), and the group key in ETHBCAST_KEY_FILE (without one, rank 0
 * warns that any host on the segment can join).
 */
#include <stdio.h>
#include <string.h>

#include "ethbcast.h"

int main(int argc, char **argv) {
    const char *iface = argc > 1 ? argv[1] : "eth0";
    ethbcast_group_t *g = NULL;
    int rc = ethbcast_open(iface, NULL, &g);
    if (rc != ETHBCAST_OK) {
        fprintf(stderr, "hello: %s (%s)\n", ethbcast_strerror(rc), ethbcast_last_error());
        return 1;
    }
    int me = ethbcast_rank(g), n = ethbcast_size(g);
    for (int root = 0; root < n; root++) {
        char msg[64];
        memset(msg, 0, sizeof msg);
        if (me == root)
            snprintf(msg, sizeof msg, "hello from rank %d", root);
        rc = ethbcast_bcast(g, root, msg, sizeof msg);
        if (rc != ETHBCAST_OK)
            break;
        printf("rank %d: from %d: %s\n", me, root, msg);
    }
    if (rc == ETHBCAST_OK)
        rc = ethbcast_barrier(g);
    if (rc != ETHBCAST_OK)
        fprintf(stderr, "rank %d: %s (%s)\n", me, ethbcast_strerror(rc), ethbcast_last_error());
    int closed = ethbcast_close(g);
    return rc == ETHBCAST_OK && closed == ETHBCAST_OK ? 0 : 1;
}
