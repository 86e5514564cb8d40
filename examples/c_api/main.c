/* run_model: run any model library exported by plait (plait.export_library, or
 * `plait compile model.onnx --emit library -o out/`) on inputs read from .npy files.
 *
 *     ./run_model out/libcnn.so in0.npy [in1.npy ...] -o outdir/
 *                 [--threads N] [--weights FILE] [--repeat N]
 *
 * It loads the library with dlopen, asks it for its model's name (plait_library_name)
 * and functions (plait_api_load, plait_c_api.h), checks the .npy files against the
 * inputs the library describes, runs the model once into outputs the library allocates
 * and writes each output as outdir/<output name>.npy.  --repeat N then runs N more
 * calls, alternating library-allocated and caller-provided outputs, checks that each
 * gives the same bytes as the first, and prints the time per call, the resident memory
 * (VmRSS) after the first tenth of the calls and after the last, and the process's
 * threads (the caller and the library's pool workers); and, before them, the times
 * of dlopen, create and the first call. */
#define PLAIT_API_LOADER
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "npy.h"
#include "plait_c_api.h"

#define MAX_TENSORS 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A field of /proc/self/status ("VmRSS:" in kB, "Threads:"), or -1. */
static long proc_status(const char* key) {
    FILE* f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    const size_t n = strlen(key);
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, n) == 0) v = strtol(line + n, NULL, 10);
    if (f != NULL) fclose(f);
    return v;
}

static int usage(void) {
    fprintf(stderr, "usage: run_model lib<name>.so in0.npy [in1.npy ...] -o outdir/ "
                    "[--threads N] [--weights FILE] [--repeat N]\n");
    return 2;
}

static size_t tensor_bytes(const DLTensor* t) {
    size_t n = t->dtype.bits / 8;
    for (int i = 0; i < t->ndim; ++i) n *= (size_t)t->shape[i];
    return n;
}

/* `calls` more calls; each output must equal the first call's (first[i]). */
static int repeat(const plait_api* api, void* model, const DLTensor* in, int n_in,
                  DLManagedTensor* const* first, int n_out, long calls) {
    DLTensor mine[MAX_TENSORS];
    for (int i = 0; i < n_out; ++i) {   /* caller-provided outputs of the same shapes */
        mine[i] = first[i]->dl_tensor;
        if (posix_memalign(&mine[i].data, 64, tensor_bytes(&mine[i]) + 64) != 0) return 1;
    }
    long rss_early = -1;
    const double t0 = now();
    int rc = 0;
    for (long k = 0; k < calls && rc == 0; ++k) {
        DLManagedTensor* got[MAX_TENSORS];
        const int alloc = k % 2 == 0;
        int32_t st = alloc ? api->run_alloc(model, in, n_in, got, n_out)
                           : api->run(model, in, n_in, mine, n_out);
        if (st != PLAIT_OK) {
            fprintf(stderr, "call %ld: %s: %s\n", k, api->status_name(st),
                    api->last_error(model));
            rc = 1;
            break;
        }
        for (int i = 0; i < n_out; ++i) {
            const DLTensor* t = alloc ? &got[i]->dl_tensor : &mine[i];
            if (memcmp(t->data, first[i]->dl_tensor.data, tensor_bytes(t)) != 0) {
                fprintf(stderr, "call %ld: output %d differs from the first call's\n", k, i);
                rc = 1;
            }
            if (alloc) got[i]->deleter(got[i]);
        }
        if (k + 1 == calls / 10) rss_early = proc_status("VmRSS:");
    }
    const double dt = now() - t0;
    for (int i = 0; i < n_out; ++i) free(mine[i].data);
    if (rc == 0)
        printf("repeat: %ld calls, %.3f us per call, rss_kb after %ld calls %ld, after %ld "
               "calls %ld, threads %ld\n", calls, 1e6 * dt / (double)calls, calls / 10,
               rss_early, calls, proc_status("VmRSS:"), proc_status("Threads:"));
    return rc;
}

int main(int argc, char** argv) {
    const char* lib = NULL;
    const char* outdir = NULL;
    const char* weights = NULL;
    const char* files[MAX_TENSORS];
    int n_files = 0, threads = 0;
    long calls = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) outdir = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc) weights = argv[++i];
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) calls = atol(argv[++i]);
        else if (lib == NULL) lib = argv[i];
        else if (n_files < MAX_TENSORS) files[n_files++] = argv[i];
        else return usage();
    }
    if (lib == NULL || outdir == NULL) return usage();
    const double t_open = now();
    void* handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    const double t_opened = now();
    if (handle == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", lib, dlerror());
        return 1;
    }
    plait_api api;
    const char* name = NULL;
    if (plait_api_load(handle, &api, &name) != 0) {
        fprintf(stderr, "%s is not a library exported by plait (a function is missing)\n",
                lib);
        return 1;
    }
    const int n_in = api.num_inputs(), n_out = api.num_outputs();
    if (n_files != n_in || n_out > MAX_TENSORS) {
        fprintf(stderr, "model %s takes %d input(s), %d .npy file(s) given\n", name, n_in,
                n_files);
        return 2;
    }
    plait_options opt;
    api.default_options(&opt);
    opt.num_threads = threads;
    opt.weights_path = weights;
    void* model = NULL;
    char err[512];
    const double t_create = now();
    int32_t st = api.create(&opt, &model, err, sizeof err);
    const double t_created = now();
    if (st != PLAIT_OK) {
        fprintf(stderr, "create: %s: %s\n", api.status_name(st), err);
        return 1;
    }
    npy_array arrays[MAX_TENSORS];
    DLTensor in[MAX_TENSORS];
    int rc = 0, n_read = 0;
    for (int i = 0; i < n_in && rc == 0; ++i, ++n_read) {
        if (npy_read(files[i], &arrays[i], err, sizeof err) != 0) {
            fprintf(stderr, "input %d (%s): %s\n", i, api.input_info(i)->name, err);
            rc = 1;
            break;
        }
        memset(&in[i], 0, sizeof in[i]);
        in[i].data = arrays[i].data;
        in[i].device.device_type = kDLCPU;
        in[i].ndim = arrays[i].ndim;
        in[i].dtype = arrays[i].dtype;
        in[i].shape = arrays[i].shape;
    }
    DLManagedTensor* out[MAX_TENSORS];
    const double t_run = now();
    if (rc == 0 && (st = api.run_alloc(model, in, n_in, out, n_out)) != PLAIT_OK) {
        fprintf(stderr, "run: %s: %s\n", api.status_name(st), api.last_error(model));
        rc = 1;
    }
    for (int i = 0; rc == 0 && i < n_out; ++i) {
        char path[4096], file[256];
        snprintf(file, sizeof file, "%s", api.output_info(i)->name);
        for (char* c = file; *c; ++c)
            if (*c == '/' || *c == '\\') *c = '_';
        snprintf(path, sizeof path, "%s/%s.npy", outdir, file);
        if (npy_write(path, &out[i]->dl_tensor, err, sizeof err) != 0) {
            fprintf(stderr, "output %d: %s\n", i, err);
            rc = 1;
        }
    }
    const double t_ran = now();
    if (rc == 0 && calls > 0) {
        printf("load: dlopen %.1f us, create %.1f us, first call %.1f us\n",
               1e6 * (t_opened - t_open), 1e6 * (t_created - t_create), 1e6 * (t_ran - t_run));
        rc = repeat(&api, model, in, n_in, out, n_out, calls);
    }
    if (rc == 0 || st == PLAIT_OK)
        for (int i = 0; i < n_out && st == PLAIT_OK; ++i) out[i]->deleter(out[i]);
    for (int i = 0; i < n_read; ++i) npy_free(&arrays[i]);
    api.destroy(model);
    dlclose(handle);
    return rc;
}
