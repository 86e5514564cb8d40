/* Threads of the application that call the library once and exit (a server's thread
 * per request) leave no memory behind: the kernels' per-thread scratch is freed when
 * each exits.  Against the CNN's library ("cnn"), linked statically.
 *
 *     ./thread_exit N     prints "threads N rss growth K kB" */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"

static cnn_model* M;
static float X[2 * 3 * 32 * 32];

static long rss_kb(void) {
    FILE* f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmRSS:", 6) == 0) v = strtol(line + 6, NULL, 10);
    if (f != NULL) fclose(f);
    return v;
}

static void* one_call(void* arg) {
    (void)arg;
    int64_t shape[4] = {2, 3, 32, 32};
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = X;
    t.device.device_type = kDLCPU;
    t.ndim = 4;
    t.dtype.code = kDLFloat;
    t.dtype.bits = 32;
    t.dtype.lanes = 1;
    t.shape = shape;
    DLManagedTensor* out[1];
    if (cnn_run_alloc(M, &t, 1, out, 1) != PLAIT_OK) {
        fprintf(stderr, "%s\n", cnn_last_error(M));
        exit(1);
    }
    out[0]->deleter(out[0]);
    return NULL;
}

static void calls_on_new_threads(int n) {
    for (int i = 0; i < n; ++i) {
        pthread_t t;
        if (pthread_create(&t, NULL, one_call, NULL) != 0) exit(1);
        pthread_join(t, NULL);
    }
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    const int n = atoi(argv[1]);
    plait_options o;
    cnn_default_options(&o);
    o.num_threads = 1;   /* each call on its own thread alone: no pool worker */
    char err[256];
    if (cnn_create(&o, &M, err, sizeof err) != PLAIT_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    calls_on_new_threads(20);
    const long before = rss_kb();
    calls_on_new_threads(n);
    printf("threads %d rss growth %ld kB\n", n, rss_kb() - before);
    cnn_destroy(M);
    return 0;
}
