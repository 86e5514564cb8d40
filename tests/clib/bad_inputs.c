/* The C API's refusals, against the library of the tiny MLP exported as "tiny" (input
 * "input" float32[batch, 64] with batch in [1, 8], output "output" float32[batch, 10],
 * weights in a side file), linked statically (libtiny.a).
 *
 *     ./bad_inputs tiny.weights
 *
 * Prints one line per case, "CASE <label> <status name> | <message>"; the test
 * (test_c_library.py) checks each status and message.  Then two threads share one
 * instance (each call succeeds or is refused as busy) and two threads use an instance
 * each (every call succeeds with the first call's bytes). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiny.h"

static tiny_model* M;
static float X[8 * 64], Y[8 * 10], REF[8 * 10];
static int64_t XS[2] = {3, 64}, YS[2] = {3, 10};

static void report(const char* label, int32_t st, const char* msg) {
    printf("CASE %s %s | %s\n", label, tiny_status_name(st), msg != NULL ? msg : "");
}

static DLTensor tensor(void* data, int64_t* shape, int ndim) {
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = kDLCPU;
    t.ndim = ndim;
    t.dtype.code = kDLFloat;
    t.dtype.bits = 32;
    t.dtype.lanes = 1;
    t.shape = shape;
    return t;
}

static void run_case(const char* label, DLTensor in, DLTensor out) {
    report(label, tiny_run(M, &in, 1, &out, 1), tiny_last_error(M));
}

static void create_cases(const char* weights) {
    plait_options o;
    tiny_default_options(&o);
    tiny_model* m = NULL;
    char err[512];
    int32_t st = tiny_create(&o, NULL, err, sizeof err);
    report("create_null_model", st, err);
    o.struct_size = 0;
    report("create_struct_size", tiny_create(&o, &m, err, sizeof err), err);
    tiny_default_options(&o);
    o.num_threads = -1;
    report("create_threads", tiny_create(&o, &m, err, sizeof err), err);
    tiny_default_options(&o);
    o.weights_path = "/nonexistent/tiny.weights";
    report("create_missing_weights", tiny_create(&o, &m, err, sizeof err), err);
    o.weights_path = "bad_inputs.c";   /* a file that is not the weights */
    report("create_wrong_weights", tiny_create(&o, &m, err, sizeof err), err);
    report("create_no_error_buffer", tiny_create(&o, &m, NULL, 0), m == NULL ? "null" : "set");
    o.weights_path = weights;
    o.num_threads = 1;
    st = tiny_create(&o, &M, err, sizeof err);
    report("create_ok", st, err);
    if (st != PLAIT_OK) exit(1);
}

static void run_cases(void) {
    int64_t s1[1] = {64}, wide[2] = {3, 63}, big[2] = {9, 64}, zero[2] = {0, 64};
    int64_t strides[2] = {1, 3}, small[2] = {2, 10}, large[2] = {4, 10};
    DLTensor in = tensor(X, XS, 2), out = tensor(Y, YS, 2), t;
    report("run_null_model", tiny_run(NULL, &in, 1, &out, 1), "");
    report("run_null_inputs", tiny_run(M, NULL, 1, &out, 1), tiny_last_error(M));
    report("run_input_count", tiny_run(M, &in, 2, &out, 1), tiny_last_error(M));
    t = in; t.data = NULL; run_case("input_null_data", t, out);
    t = in; t.shape = NULL; run_case("input_null_shape", t, out);
    t = in; t.dtype.bits = 64; run_case("input_dtype", t, out);
    t = in; t.dtype.code = kDLInt; run_case("input_dtype_code", t, out);
    t = in; t.dtype.lanes = 4; run_case("input_lanes", t, out);
    t = tensor(X, s1, 1); run_case("input_rank", t, out);
    t = tensor(X, wide, 2); run_case("input_shape", t, out);
    t = tensor(X, big, 2); run_case("input_above_range", t, out);
    t = tensor(X, zero, 2); run_case("input_below_range", t, out);
    t = in; t.device.device_type = kDLCUDA; run_case("input_device", t, out);
    t = in; t.strides = strides; run_case("input_strides", t, out);
    t = in; t.byte_offset = 2; run_case("input_misaligned", t, out);
    report("run_null_outputs", tiny_run(M, &in, 1, NULL, 1), tiny_last_error(M));
    report("run_output_count", tiny_run(M, &in, 1, &out, 0), tiny_last_error(M));
    t = tensor(Y, small, 2); run_case("output_too_small", in, t);
    t = tensor(Y, large, 2); run_case("output_shape", in, t);
    t = out; t.data = NULL; run_case("output_null_data", in, t);
    t = out; t.dtype.bits = 16; run_case("output_dtype", in, t);
    t = out; t.ndim = 3; run_case("output_rank", in, t);
    DLManagedTensor* managed[1];
    report("run_alloc_null_outputs", tiny_run_alloc(M, &in, 1, NULL, 1), tiny_last_error(M));
    t = tensor(X, big, 2);
    report("run_alloc_bad_input", tiny_run_alloc(M, &t, 1, managed, 1), tiny_last_error(M));
    report("run_alloc_bad_input_outputs_null", managed[0] == NULL ? PLAIT_OK : 99, "");
    int64_t shape[2] = {-1, -1};
    int64_t* shapes[1] = {shape};
    t = tensor(NULL, XS, 2);   /* output_shapes reads no data */
    int32_t st = tiny_output_shapes(M, &t, 1, shapes, 1);
    char msg[64];
    snprintf(msg, sizeof msg, "%lld %lld", (long long)shape[0], (long long)shape[1]);
    report("output_shapes", st, msg);
    report("status_name_unknown", PLAIT_OK, tiny_status_name(99));
    report("info_out_of_range", tiny_input_info(1) == NULL && tiny_output_info(-1) == NULL
           ? PLAIT_OK : 99, "");
    const plait_tensor_info* info = tiny_input_info(0);
    snprintf(msg, sizeof msg, "%s %d %s %lld %lld %lld", info->name, (int)info->ndim,
             info->dims[0].name, (long long)info->dims[0].min, (long long)info->dims[0].max,
             (long long)info->dims[1].size);
    report("input_info", PLAIT_OK, msg);
    /* a good call after the refusals: run and run_alloc give the same bytes */
    st = tiny_run(M, &in, 1, &out, 1);
    report("run_ok", st, tiny_last_error(M));
    memcpy(REF, Y, sizeof Y);
    st = tiny_run_alloc(M, &in, 1, managed, 1);
    int same = st == PLAIT_OK && memcmp(managed[0]->dl_tensor.data, REF, 30 * sizeof(float)) == 0
               && managed[0]->dl_tensor.shape[0] == 3 && managed[0]->dl_tensor.shape[1] == 10;
    report("run_alloc_ok", same ? st : 99, tiny_last_error(M));
    if (st == PLAIT_OK) managed[0]->deleter(managed[0]);
}

typedef struct {
    tiny_model* m;
    int calls, ok, busy, other, differs;
} job;

static void* hammer(void* arg) {
    job* j = (job*)arg;
    float y[3 * 10];
    int64_t ys[2] = {3, 10};
    DLTensor in = tensor(X, XS, 2), out = tensor(y, ys, 2);
    for (int k = 0; k < j->calls; ++k) {
        int32_t st = tiny_run(j->m, &in, 1, &out, 1);
        if (st == PLAIT_OK) {
            ++j->ok;
            if (memcmp(y, REF, sizeof y) != 0) ++j->differs;
        } else if (st == PLAIT_ERR_BUSY) {
            ++j->busy;
        } else {
            ++j->other;
        }
    }
    return NULL;
}

static void thread_cases(const char* weights) {
    job a = {M, 3000, 0, 0, 0, 0}, b = {M, 3000, 0, 0, 0, 0};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, hammer, &a);
    pthread_create(&tb, NULL, hammer, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    char msg[160];
    snprintf(msg, sizeof msg, "ok %d busy %d other %d differs %d", a.ok + b.ok,
             a.busy + b.busy, a.other + b.other, a.differs + b.differs);
    report("shared_instance", PLAIT_OK, msg);
    plait_options o;
    tiny_default_options(&o);
    o.weights_path = weights;
    tiny_model* second = NULL;
    char err[256];
    if (tiny_create(&o, &second, err, sizeof err) != PLAIT_OK) exit(1);
    job c = {M, 2000, 0, 0, 0, 0}, d = {second, 2000, 0, 0, 0, 0};
    pthread_create(&ta, NULL, hammer, &c);
    pthread_create(&tb, NULL, hammer, &d);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    snprintf(msg, sizeof msg, "ok %d busy %d other %d differs %d", c.ok + d.ok,
             c.busy + d.busy, c.other + d.other, c.differs + d.differs);
    report("two_instances", PLAIT_OK, msg);
    tiny_destroy(second);
}

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    for (int i = 0; i < 8 * 64; ++i) X[i] = (float)((i * 37) % 19) / 7.0f - 1.0f;
    create_cases(argv[1]);
    run_cases();
    thread_cases(argv[1]);
    tiny_destroy(M);
    tiny_destroy(NULL);
    return 0;
}
