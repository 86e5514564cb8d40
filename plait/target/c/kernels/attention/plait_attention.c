/* plait_attention.c: the c target's fused attention (float32), a kernel family of
 * plait_isa.h.
 *
 * out = softmax(scale * Q @ K^T + mask_scale * M) @ V per (batch, head), without the
 * score matrix going to memory: each job (one batch and head, a range of query rows)
 * packs K^T and V of its head into the micro-kernel's B panels once, then for every 6
 * query rows computes the 6 x SK scores on the register tile into a scratch row block
 * (in L1), adds the mask, applies the softmax row by row (max, exp, sum: vectorized, a
 * fixed order) and multiplies the probabilities by V straight into the output rows.
 * Q, K, V, the mask and out are strided views (the heads of one QKV projection are read
 * where they lie; a mask broadcast over heads or query rows has strides of 0). */
/* plait_tile.h includes plait_vexp.h: the softmax's vectors of PLAIT_SL floats */
#include "plait_isa.h"
#include "plait_tile.h"

/* softmax(scale * s[0:n]) in place: the max, then the exponentials and their sum on
 * PLAIT_SL lanes (added up in a fixed order), then the division; NaN anywhere makes the
 * row NaN (as in numpy), a row of -inf gives NaN (0/0, as in numpy), or zeros when
 * zero_rows is set. */
static inline __attribute__((always_inline)) void
softmax_row(float* restrict s, int64_t n, float scale, int zero_rows) {
    plait_sv vmax = PLAIT_SSPLAT(-__builtin_inff());
    plait_svi nan = {0};
    int64_t j = 0;
    for (; j + PLAIT_SL <= n; j += PLAIT_SL) {
        plait_sv v = *(plait_svu*)(s + j) * scale;
        *(plait_svu*)(s + j) = v;
        nan |= v != v;
        vmax = PLAIT_SELECT(v > vmax, v, vmax);
    }
    float mx = -__builtin_inff();
    int isnan = 0;
    for (int l = 0; l < PLAIT_SL; ++l) {
        isnan |= nan[l] != 0;
        mx = vmax[l] > mx ? vmax[l] : mx;
    }
    for (; j < n; ++j) {
        float v = s[j] * scale;
        s[j] = v;
        isnan |= v != v;
        mx = v > mx ? v : mx;
    }
    if (isnan) {
        for (j = 0; j < n; ++j) s[j] = __builtin_nanf("");
        return;
    }
    if (mx == -__builtin_inff()) {
        if (zero_rows) {
            for (j = 0; j < n; ++j) s[j] = 0.0f;
            return;
        }
        mx = 0.0f;   /* all -inf: exp gives 0 everywhere, and the sum 0: NaN */
    }
    plait_sv vsum = {0};
    for (j = 0; j + PLAIT_SL <= n; j += PLAIT_SL) {
        plait_sv e = *(plait_svu*)(s + j) - mx;
        plait_exp_sv(&e);
        *(plait_svu*)(s + j) = e;
        vsum += e;
    }
    if (j < n) {
        /* the last n - j < PLAIT_SL values on one vector too (a scalar loop over
         * plait_exp_f32 stayed scalar in the AVX2 and baseline copies) */
#if PLAIT_SL == 16
        const plait_svi lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#else
        const plait_svi lane = {0, 1, 2, 3, 4, 5, 6, 7};
#endif
        plait_sv e;
        plait_sv_load_n(&e, s + j, n - j);
        e -= mx;
        plait_exp_sv(&e);
        e = PLAIT_SELECT(lane < (int32_t)(n - j), e, PLAIT_SSPLAT(0.0f));
        plait_sv_store_n(s + j, &e, n - j);
        vsum += e;
    }
    float t[8];   /* 16 lanes: the two halves first */
    for (int l = 0; l < 8; ++l) t[l] = vsum[l];
#if PLAIT_SL == 16
    for (int l = 0; l < 8; ++l) t[l] += vsum[l + 8];
#endif
    float sum = ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
    float inv = 1.0f / sum;
    for (j = 0; j + PLAIT_SL <= n; j += PLAIT_SL) *(plait_svu*)(s + j) *= inv;
    for (; j < n; ++j) s[j] *= inv;
}

/* K^T of one head as B panels ([ceil(SK/NR)][D][NR], zero-padded) and V as B panels
 * ([ceil(DV/NR)][SK][NR]). */
static void attention_pack(const plait_attention_desc* d, const float* k, const float* v,
                           float* kt, float* vp) {
    const int64_t skp = (d->SK + PLAIT_NR - 1) / PLAIT_NR;
    for (int64_t jp = 0; jp < skp; ++jp) {
        float* dst = kt + jp * d->D * PLAIT_NR;
        for (int64_t jj = 0; jj < PLAIT_NR; ++jj) {
            int64_t j = jp * PLAIT_NR + jj;
            if (j >= d->SK) {
                for (int64_t e = 0; e < d->D; ++e) dst[e * PLAIT_NR + jj] = 0.0f;
                continue;
            }
            const float* row = k + j * d->k_ss;
            for (int64_t e = 0; e < d->D; ++e) dst[e * PLAIT_NR + jj] = row[e * d->k_sd];
        }
    }
    const int64_t dvp = (d->DV + PLAIT_NR - 1) / PLAIT_NR;
    for (int64_t cp = 0; cp < dvp; ++cp) {
        float* dst = vp + cp * d->SK * PLAIT_NR;
        int64_t c0 = cp * PLAIT_NR;
        int64_t nc = d->DV - c0 < PLAIT_NR ? d->DV - c0 : PLAIT_NR;
        for (int64_t j = 0; j < d->SK; ++j) {
            const float* row = v + j * d->v_ss + c0 * d->v_sd;
            int64_t c = 0;
            if (d->v_sd == 1 && nc == PLAIT_NR) {
                *(plait_v8u*)dst = *(const plait_v8u*)row;
                *(plait_v8u*)(dst + 8) = *(const plait_v8u*)(row + 8);
                c = PLAIT_NR;
            }
            for (; c < nc; ++c) dst[c] = row[c * d->v_sd];
            for (; c < PLAIT_NR; ++c) dst[c] = 0.0f;
            dst += PLAIT_NR;
        }
    }
}

static void
attention_thread(const plait_attention_desc* d, const float* q, const float* k,
                 const float* v, const float* m, float* out, int64_t chunks, int64_t* next,
                 float* kt, float* s, float* qpad) {
    const int64_t H = d->H, SK = d->SK, D = d->D;
    const int64_t skp = (SK + PLAIT_NR - 1) / PLAIT_NR, ldS = skp * PLAIT_NR;
    float* vp = kt + skp * D * PLAIT_NR;
    const int64_t rows = (d->SQ + chunks - 1) / chunks;
    const int64_t chunk_rows = (rows + PLAIT_MR - 1) / PLAIT_MR * PLAIT_MR;
    const int64_t jobs = d->B * H * chunks;
    plait_gemm_problem p;   /* the micro-kernel's epilogue: a plain store */
    memset(&p, 0, sizeof p);
    int64_t packed = -1;   /* the head whose K^T and V are in kt / vp */
    for (int64_t job = PLAIT_NEXT_JOB(next); job < jobs; job = PLAIT_NEXT_JOB(next)) {
        int64_t bh = job / chunks, b = bh / H, h = bh % H;
        const float* qh = q + b * d->q_sb + h * d->q_sh;
        const float* mh = m ? m + b * d->m_sb + h * d->m_sh : NULL;
        float* oh = out + b * d->o_sb + h * d->o_sh;
        if (packed != bh) {
            attention_pack(d, k + b * d->k_sb + h * d->k_sh, v + b * d->v_sb + h * d->v_sh,
                           kt, vp);
            packed = bh;
        }
        int64_t i0 = (job % chunks) * chunk_rows;
        int64_t i1 = i0 + chunk_rows < d->SQ ? i0 + chunk_rows : d->SQ;
        for (int64_t i = i0; i < i1; i += PLAIT_MR) {
            int64_t mr = i1 - i < PLAIT_MR ? i1 - i : PLAIT_MR;
            const float* a = qh + i * d->q_ss;
            int64_t a_rs = d->q_ss, a_ks = d->q_sd;
            if (mr < PLAIT_MR) {
                /* the last rows, zero-padded to a panel ([D][MR]) */
                for (int64_t e = 0; e < D; ++e)
                    for (int64_t r = 0; r < PLAIT_MR; ++r)
                        qpad[e * PLAIT_MR + r] = r < mr ? a[r * d->q_ss + e * d->q_sd] : 0.0f;
                a = qpad;
                a_rs = 1;
                a_ks = PLAIT_MR;
            }
            /* scores: 6 x SK (padded to whole panels) */
            const int64_t tp = PLAIT_TILE_N / PLAIT_NR;   /* panels per wide tile */
            for (int64_t jp = 0; jp < skp; jp += tp) {
                int64_t nr = (skp - jp < tp ? skp - jp : tp) * PLAIT_NR;
                micro_kernel_wide(D, a, a_rs, a_ks, kt + jp * D * PLAIT_NR, D * PLAIT_NR,
                                  s + jp * PLAIT_NR, ldS, PLAIT_MR, nr, 1, 1, &p, 0, 0, NULL);
            }
            if (mh) {
                /* scale and mask the rows first; the tail's padding rows take row i's */
                for (int64_t r = 0; r < PLAIT_MR; ++r) {
                    float* row = s + r * ldS;
                    const float* mrow = mh + (r < mr ? i + r : i) * d->m_si;
                    for (int64_t j = 0; j < SK; ++j)
                        row[j] = row[j] * d->scale + d->mask_scale * mrow[j * d->m_sj];
                    softmax_row(row, SK, 1.0f, (int)d->zero_masked_rows);
                }
            } else {
                for (int64_t r = 0; r < PLAIT_MR; ++r) softmax_row(s + r * ldS, SK, d->scale,
                                                                (int)d->zero_masked_rows);
            }
            /* probabilities @ V into the output rows */
            for (int64_t cp = 0; cp * PLAIT_NR < d->DV; cp += tp) {
                int64_t left = d->DV - cp * PLAIT_NR;
                int64_t nr = left < PLAIT_TILE_N ? left : PLAIT_TILE_N;
                micro_kernel_wide(SK, s, ldS, 1, vp + cp * SK * PLAIT_NR, SK * PLAIT_NR,
                                  oh + i * d->o_ss + cp * PLAIT_NR, d->o_ss, mr, nr, 1, 1, &p,
                                  0, 0, NULL);
            }
        }
    }
}

typedef struct {
    const plait_attention_desc* d;
    const float *q, *k, *v, *m;
    float* out;
    int64_t chunks;
    size_t kvfloats, sfloats;
    int64_t next;                 /* the next job (see PLAIT_NEXT_JOB) */
    int status;                   /* 1: a thread was out of memory */
} plait_attention_task;

static void plait_attention_task_run(void* arg) {
    plait_attention_task* t = (plait_attention_task*)arg;
    float* kt = plait_scratch(1, t->kvfloats);
    float* s = plait_scratch(2, t->sfloats);
    float* qpad = plait_scratch(0, (size_t)(t->d->D * PLAIT_MR));
    if (kt && s && qpad)
        attention_thread(t->d, t->q, t->k, t->v, t->m, t->out, t->chunks, &t->next, kt, s,
                         qpad);
    else
        __atomic_store_n(&t->status, 1, __ATOMIC_RELAXED);
}

PLAIT_ISA_HIDDEN int
PLAIT_ISA_FN(plait_attention)(const plait_attention_desc* d, const float* q, const float* k,
                              const float* v, const float* m, float* out) {
    if (d->B <= 0 || d->H <= 0 || d->SQ <= 0 || d->DV <= 0) return 0;
    if (d->SK <= 0 || d->D <= 0) return 2;
    q += d->q_off;
    k += d->k_off;
    v += d->v_off;
    if (m) m += d->m_off;
    const int64_t heads = d->B * d->H;
    int nthreads = plait_max_threads();
    if (heads * d->SQ * d->SK * (d->D + d->DV) < (1 << 20)) nthreads = 1;
    /* jobs: each head's query rows in chunks (of whole panels), so that every thread
     * has about 2 jobs */
    int64_t chunks = (2 * nthreads + heads - 1) / heads;
    int64_t most = (d->SQ + PLAIT_MR - 1) / PLAIT_MR;
    if (chunks > most) chunks = most;
    if (chunks < 1) chunks = 1;
    if (heads * chunks < nthreads) nthreads = (int)(heads * chunks);
    const int64_t skp = (d->SK + PLAIT_NR - 1) / PLAIT_NR;
    const int64_t dvp = (d->DV + PLAIT_NR - 1) / PLAIT_NR;
    const size_t kvfloats = (size_t)((skp * d->D + dvp * d->SK) * PLAIT_NR);
    const size_t sfloats = (size_t)(PLAIT_MR * skp * PLAIT_NR);
    plait_attention_task task = {d, q, k, v, m, out, chunks, kvfloats, sfloats, 0, 0};
    plait_parallel(plait_attention_task_run, &task, nthreads);
    return task.status;
}

PLAIT_ISA_FAMILY("attention")
PLAIT_ISA_DISPATCH(int, plait_attention,
                   (const plait_attention_desc* d, const float* q, const float* k,
                    const float* v, const float* m, float* out),
                   (d, q, k, v, m, out))
