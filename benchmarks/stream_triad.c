/* A STREAM-style triad, a[i] = b[i] + s * c[i] over three arrays of doubles, on all
 * OpenMP threads: the machine's memory bandwidth, for benchmarks/llm_decode.py's
 * bandwidth limit.  Built there with `cc -O2 -fopenmp`; independent of plait's own
 * code generation (the limit must not depend on the compiler it judges).
 *
 *     stream_triad MIB REPEATS   prints the best bytes per second of REPEATS triads
 *
 * Bytes are counted as STREAM counts them: 3 arrays x 8 bytes per element (two read,
 * one written; the write-allocate read of `a` is not counted).  Each thread first
 * touches the part of the arrays it later works on (static schedule), as in STREAM. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MIB REPEATS\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]) * 1024L * 1024L / 8;
    int repeats = atoi(argv[2]);
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)),
           *c = malloc(n * sizeof(double));
    if (!a || !b || !c || n <= 0 || repeats <= 0) {
        fprintf(stderr, "stream_triad: cannot allocate 3 x %s MiB\n", argv[1]);
        return 1;
    }
    const double s = 3.0;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = 1.0;
        c[i] = 2.0;
    }
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        double t = omp_get_wtime() - t0;
        if (t < best) best = t;
    }
    if (a[n / 2] != 7.0) {
        fprintf(stderr, "stream_triad: wrong result %g\n", a[n / 2]);
        return 1;
    }
    printf("%.6e %d\n", 3.0 * 8.0 * (double)n / best, omp_get_max_threads());
    free(a);
    free(b);
    free(c);
    return 0;
}
