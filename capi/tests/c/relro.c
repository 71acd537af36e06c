/* shmem_init keeps the program's RELRO pages (.dynamic, .got) private and read-only and shares
 * only .data/.bss; the shared data segment's memfd is close-on-exec, so a child started by
 * system() does not inherit it. */
#define _DEFAULT_SOURCE
#include <shmem.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "check.h"

extern char _DYNAMIC[]; /* the program's .dynamic section (defined by the linker) */
extern char _GLOBAL_OFFSET_TABLE_[]; /* its .got.plt: 3 loader words, then one per PLT slot */
static long var = 7;

/* The permissions field ("r--p") of the /proc/self/maps line mapping `addr`. */
static int perms_of(const void *addr, char out[5]) {
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && (uintptr_t)addr >= lo &&
            (uintptr_t)addr < hi) {
            memcpy(out, perms, 5);
            found = 1;
            break;
        }
    }
    fclose(f);
    return found;
}

/* 1 if this process has an fd open on the rshmem-region memfd. */
static int have_data_fd(void) {
    char path[64], target[256];
    int found = 0;
    for (int fd = 0; fd < 1024; fd++) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 0) {
            target[n] = 0;
            if (strstr(target, "rshmem-region")) found = 1;
        }
    }
    return found;
}

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    int peer = (me + 1) % npes;
    char p[5];

    /* RELRO stays a private read-only mapping; the variables are shared writable. */
    CHECK(perms_of(_DYNAMIC, p));
    CHECK(strcmp(p, "r--p") == 0);
    CHECK(perms_of(&var, p));
    CHECK(strcmp(p, "rw-s") == 0);

    /* .dynamic is not symmetric; the variable is. */
    CHECK(shmem_addr_accessible(_DYNAMIC, peer) == 0);
    CHECK(shmem_ptr(_DYNAMIC, peer) == NULL);
    for (int i = 0; i < 6; i++) { /* the loader's words and the first lazily bound slots */
        CHECK(shmem_addr_accessible(_GLOBAL_OFFSET_TABLE_ + 8 * i, peer) == 0);
        CHECK(shmem_ptr(_GLOBAL_OFFSET_TABLE_ + 8 * i, peer) == NULL);
    }
    CHECK(shmem_addr_accessible(&var, peer) == 1);
    CHECK(shmem_ptr(&var, peer) != NULL);
    CHECK(shmem_long_g(&var, peer) == 7);

    /* The memfd exists here but is not inherited by a child program. */
    CHECK(have_data_fd());
    int st = system("ls -l /proc/self/fd/ | grep -q rshmem-region");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1); /* grep found nothing */

    shmem_barrier_all();
    DONE("relro");
    shmem_finalize();
    return 0;
}
