/* plait_qgemm.c: the c target's int8 products (8-bit x 8-bit -> int32 with a fused
 * output stage), a kernel family of plait_isa.h compiled for AVX512-VNNI, AVX-VNNI,
 * AVX2 and the baseline; the running CPU picks one copy when the library is loaded.
 *
 * Every combination of uint8/int8 operands is computed as uint8 x int8, the form of the
 * dot-product instructions (vpdpbusd): an int8 A is shifted by 128 (a ^ 0x80, its zero
 * point + 128) and a uint8 B by -128 (its zero point - 128), which leaves every
 * (a - za)(b - zb) unchanged.  With A' and B' the shifted operands,
 *
 *     sum_k (a - za)(b - zb) = dot(A'[m], B'[:, n]) - zb'[n] * rowsum(A'[m])
 *                              - za'[m] * (colsum(B'[:, n]) - K * zb'[n])
 *
 * in int32 arithmetic modulo 2^32, the reference's int64 sum cast to int32 (every copy
 * wraps: vpdpbusd and vpmaddwd do not saturate).  The column terms of a constant B are
 * computed at compile time with its packing; the row sums while A is packed.
 *
 * The dot products per copy:
 *  - avx512vnni: vpdpbusd on zmm, a tile of 6 rows x 64 columns (24 accumulators);
 *  - avx512: no dot products: both operands widened to int16, vpmaddwd (zmm) sums
 *    pairs in int32, a tile of 4 rows x 32 columns;
 *  - avxvnni: vpdpbusd (VEX) on ymm, 4 rows x 16 columns;
 *  - avx2: constant panels in mode 1 (pack_b_panels: every pair of a column's K
 *    values safe, the clamped rest corrections added after the tile): vpmaddubsw then
 *    vpmaddwd by 1; else (its int16 pair sums saturate for uint8 x int8: 2 * 255 *
 *    -128 < -32768) both operands widened to int16 and vpmaddwd sums pairs in int32,
 *    exact; 3 rows x 16 columns;
 *  - baseline: portable C, 4 rows x 16 columns.
 *
 * The output stage (plait_q_out) runs on each finished tile.  Its float arithmetic is
 * one rounding per operation, as the reference's (no contraction into FMA). */
#include "plait_isa.h"
#include "plait_qtile.h"

static void q_pack_a(const plait_qgemm_problem* p, int64_t bi,
                     int64_t m0, int64_t mc, int64_t kp, uint8_t* restrict dst,
                     int32_t* restrict rs, int32_t* restrict zap) {
    const uint8_t flip = p->a_signed ? 0x80 : 0;
    const int64_t K = p->K;
    const int64_t rows = (mc + Q_MR - 1) / Q_MR * Q_MR;
    for (int64_t r = 0; r < mc; ++r) {
        const int64_t m = m0 + r;
        uint8_t* row = dst + r * kp;
        int32_t za = q_zero_point(p->za, p->a_signed, p->za_rows ? m : 0) +
                     (p->a_signed ? 128 : 0);
        zap[r] = za;
        const uint8_t* src = (const uint8_t*)p->a + bi * p->a_bs + m * p->lda_r;
        if (p->lda_c == 1 && !flip) memcpy(row, src, (size_t)K);
        else
            for (int64_t k = 0; k < K; ++k) row[k] = (uint8_t)(src[k * p->lda_c] ^ flip);
        uint32_t s = 0;
        for (int64_t k = 0; k < K; ++k) s += row[k];
        rs[r] = (int32_t)s;
        for (int64_t k = K; k < kp; ++k) row[k] = 0;
    }
    for (int64_t r = mc; r < rows; ++r) {
        memset(dst + r * kp, 0, (size_t)kp);
        rs[r] = 0;
        zap[r] = 0;
    }
}

/* B' of batch bi (strided) packed into panels, with zb'[n] and corr[n] */
static void q_pack_b(const plait_qgemm_problem* p, int64_t bi, int64_t kp, int8_t* dst,
                     int32_t* zbp, int32_t* corr) {
    const int64_t N = p->N, K = p->K;
    const int64_t panels = (N + PLAIT_Q_NR - 1) / PLAIT_Q_NR;
    const uint8_t* b = (const uint8_t*)p->b + bi * p->b_bs;
    const int shift = p->b_signed ? 0 : 128;
    memset(dst, 0, (size_t)(panels * kp * PLAIT_Q_NR));
    for (int64_t n = 0; n < N; ++n) {
        int8_t* col = dst + (n / PLAIT_Q_NR) * kp * PLAIT_Q_NR + (n % PLAIT_Q_NR) * 4;
        int32_t z = q_zero_point(p->zb, p->b_signed, p->zb_cols ? n : 0) - shift;
        uint32_t s = 0;
        for (int64_t k = 0; k < K; ++k) {
            int32_t v = (p->b_signed ? (int32_t)(int8_t)b[k * p->ldb_r + n * p->ldb_c]
                                     : (int32_t)b[k * p->ldb_r + n * p->ldb_c]) - shift;
            col[(k / 4) * 4 * PLAIT_Q_NR + (k % 4)] = (int8_t)v;
            s += (uint32_t)v;
        }
        zbp[n] = z;
        corr[n] = (int32_t)(s - (uint32_t)K * (uint32_t)z);
    }
}

/* ---------------------------------------------------------------------- driver */

typedef struct {
    const plait_qgemm_problem* p;
    const int8_t* bp;        /* the panels of batch 0 (the next batches bp_bs further) */
    const int32_t* zbp;
    const int32_t* corr;
    int64_t bp_bs, vec_bs;   /* per batch (0: one B for every batch) */
    int64_t kp, mblocks, nblocks, ncb;
    int pairs;               /* constant panels in mode 1 (q_tile's swapped 3) */
    int64_t ncorr;           /* their corrections (column, k, residual), by column */
    const int32_t* bcorr;
    int64_t next;
    int status;
} q_task;

/* Mode 1's corrections of the columns [n, n + nj) of a tile: a weight clamped at
 * packing (a pair safe for vpmaddubsw) left residual * a'[k] of each row out of the
 * sums; added before the zero-point terms, modulo 2^32 as the sums. */
static void q_add_corrections(const q_task* t, int64_t n, int64_t nj, const uint8_t* ar,
                              int64_t mr, int32_t* tile) {
    int64_t lo = 0, hi = t->ncorr;   /* the first correction of a column >= n */
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (t->bcorr[3 * mid] < n) lo = mid + 1;
        else hi = mid;
    }
    for (int64_t e = lo; e < t->ncorr && t->bcorr[3 * e] < n + nj; ++e) {
        const int32_t* c = t->bcorr + 3 * e;
        const int64_t q = c[0] - n, k = c[1];
        const uint32_t res = (uint32_t)c[2];
        for (int64_t r = 0; r < mr; ++r)
            tile[r * Q_TN + q] = (int32_t)((uint32_t)tile[r * Q_TN + q] +
                                           res * (uint32_t)ar[r * t->kp + k]);
    }
}

static void q_job(const q_task* t, int64_t job, uint8_t* apack, int32_t* rs, int32_t* zap) {
    const plait_qgemm_problem* p = t->p;
    const int64_t kp = t->kp, k4 = kp / 4, N = p->N, K = p->K;
    const int64_t bi = job / (t->mblocks * t->nblocks);
    const int64_t mb = job / t->nblocks % t->mblocks, nb = job % t->nblocks;
    const int64_t m0 = mb * Q_MC, mc = p->M - m0 < Q_MC ? p->M - m0 : Q_MC;
    const int64_t n0 = nb * t->ncb, nc = N - n0 < t->ncb ? N - n0 : t->ncb;
    const int8_t* bp = t->bp + bi * t->bp_bs;
    const int32_t* zbp = t->zbp + bi * t->vec_bs;
    const int32_t* corr = t->corr + bi * t->vec_bs;
    const int64_t panel = kp * PLAIT_Q_NR;
    (void)K;
    q_pack_a(p, bi, m0, mc, kp, apack, rs, zap);
    int32_t tile[Q_MR * Q_TN];
    uint32_t blk[Q_MC * Q_TN];   /* the row block's sums of one column tile, [row][col] */
    for (int64_t j = 0; j < nc; j += Q_TN) {
        const int64_t nj = nc - j < Q_TN ? nc - j : Q_TN;
        const int64_t n = n0 + j;
        const int8_t* bj = bp + (n / PLAIT_Q_NR) * panel;
        for (int64_t r0 = 0; r0 < mc; r0 += Q_MR) {
            const uint8_t* ar = apack + r0 * kp;
            const int64_t np = (nj + PLAIT_Q_NR - 1) / PLAIT_Q_NR;
            q_tile_n(np, t->pairs ? 3 : 0, k4, ar, kp, 4, bj, panel, NULL, tile, 0);
            const int64_t mr = mc - r0 < Q_MR ? mc - r0 : Q_MR;
            if (t->ncorr) q_add_corrections(t, n, nj, ar, mr, tile);
            for (int64_t r = 0; r < mr; ++r) {
                const uint32_t rsum = (uint32_t)rs[r0 + r], za = (uint32_t)zap[r0 + r];
                uint32_t* restrict dst = blk + (r0 + r) * Q_TN;
                for (int64_t q = 0; q < nj; ++q)
                    dst[q] = (uint32_t)tile[r * Q_TN + q] - (uint32_t)zbp[n + q] * rsum -
                             za * (uint32_t)corr[n + q];
            }
        }
        const int64_t base = bi * p->c_bs + m0 * p->ldc_r + n * p->ldc_c;
        for (int64_t r = 0; r < mc; ++r)
            q_store(&p->out, blk + r * Q_TN, nj, n, 1, p->c, base + r * p->ldc_r);
    }
}

static void q_task_run(void* arg) {
    q_task* t = (q_task*)arg;
    const int64_t rows = Q_MC;
    size_t bytes = (size_t)(rows * t->kp) + 2 * sizeof(int32_t) * (size_t)rows + 64;
    uint8_t* apack = (uint8_t*)plait_scratch(0, (bytes + 3) / 4);
    if (!apack) {
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
        return;
    }
    int32_t* rs = (int32_t*)(apack + ((rows * t->kp + 63) / 64) * 64);
    int32_t* zap = rs + rows;
    const int64_t jobs = t->p->batch * t->mblocks * t->nblocks;
    for (int64_t job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED); job < jobs;
         job = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED))
        q_job(t, job, apack, rs, zap);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_qgemm)(const plait_qgemm_problem* p) {
    if (p->M <= 0 || p->N <= 0 || p->batch <= 0) return 0;
    const int64_t kp = (p->K + 3) / 4 * 4;
    const int64_t panels = (p->N + PLAIT_Q_NR - 1) / PLAIT_Q_NR;
    q_task t;
    memset(&t, 0, sizeof t);
    t.p = p;
    t.kp = kp;
    void* owned = NULL;
    if (p->bp) {
        t.bp = p->bp;
        t.zbp = p->b_zp;
        t.corr = p->b_corr;
        /* the panels' tail (plait's pack_b_panels): mode, count, corrections */
        int32_t head[2];
        memcpy(head, p->bp + panels * kp * PLAIT_Q_NR, sizeof head);
        t.pairs = head[0] == 1;
        t.ncorr = t.pairs ? head[1] : 0;
        t.bcorr = (const int32_t*)(const void*)(p->bp + panels * kp * PLAIT_Q_NR + 8);
    } else {
        const int64_t nb = p->b_bs ? p->batch : 1;
        const int64_t pbytes = panels * kp * PLAIT_Q_NR;
        const int64_t vec = panels * PLAIT_Q_NR;
        owned = malloc((size_t)(nb * pbytes + 2 * nb * vec * 4 + 64));
        if (!owned) return 1;
        int8_t* bp = (int8_t*)owned;
        int32_t* zbp = (int32_t*)(bp + (nb * pbytes + 63) / 64 * 64);
        int32_t* corr = zbp + nb * vec;
        for (int64_t bi = 0; bi < nb; ++bi)
            q_pack_b(p, bi, kp, bp + bi * pbytes, zbp + bi * vec, corr + bi * vec);
        t.bp = bp;
        t.zbp = zbp;
        t.corr = corr;
        if (p->b_bs) {
            t.bp_bs = pbytes;
            t.vec_bs = vec;
        }
    }
    int nthreads = plait_max_threads();
    const int64_t work = p->M * p->N * (p->K > 0 ? p->K : 1) * p->batch;
    if (work < Q_MIN_PARALLEL) nthreads = 1;
    t.mblocks = (p->M + Q_MC - 1) / Q_MC;
    /* columns in blocks of whole tiles, enough jobs for the threads (about 4 each) */
    int64_t tiles = (p->N + Q_TN - 1) / Q_TN;
    int64_t nblocks = 1;
    if (nthreads > 1) {
        int64_t want = (4 * nthreads + p->batch * t.mblocks - 1) / (p->batch * t.mblocks);
        nblocks = want < tiles ? want : tiles;
        if (nblocks < 1) nblocks = 1;
    }
    t.ncb = (tiles + nblocks - 1) / nblocks * Q_TN;
    t.nblocks = (p->N + t.ncb - 1) / t.ncb;
    const int64_t jobs = p->batch * t.mblocks * t.nblocks;
    if (jobs < nthreads) nthreads = (int)jobs;
    plait_parallel(q_task_run, &t, nthreads);
    free(owned);
    return t.status;
}

PLAIT_ISA_FAMILY("qgemm")
PLAIT_ISA_DISPATCH(int, plait_qgemm, (const plait_qgemm_problem* p), (p))
