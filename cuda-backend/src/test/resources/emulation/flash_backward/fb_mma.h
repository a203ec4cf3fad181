// mma.sync.m16n8k16 (row.col, float32 sums) and ldmatrix.x4 (plain and .trans) of a warp, emulated from PTX's fragment
// layouts: A a0 (row g, k 2t..2t+1), a1 (row g+8), a2 (k +8), a3 (row g+8, k +8); B b0 (k 2t..2t+1, column g), b1 (k +8);
// C (row g, columns 2t..2t+1), then row g+8 (g = lane / 4, t = lane % 4; the lower index in a register's low half).
// ldmatrix: lanes 8m..8m+7 give matrix m's row addresses; lane l gets row l/4, elements 2(l%4) and +1 (transposed: that
// column's two rows). Included where the kernels' own primitives were; FT and at_f defined before.
inline float ef(unsigned short b) { FT x; std::memcpy(&x, &b, 2); return at_f(x); }
inline float lo(unsigned w) { return ef((unsigned short) (w & 0xffff)); }
inline float hi(unsigned w) { return ef((unsigned short) (w >> 16)); }
inline void fb_mma(float* d, const unsigned* a, unsigned b0, unsigned b1) {
    unsigned t = threadIdx.x, base = t & ~31u;
    slots[t][0] = a[0]; slots[t][1] = a[1]; slots[t][2] = a[2]; slots[t][3] = a[3]; slots[t][4] = b0; slots[t][5] = b1;
    warpsync();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t4 = l & 3;
        unsigned w[6]; for (int i = 0; i < 6; i++) w[i] = (unsigned) slots[base + l][i];
        A[g][2*t4] = lo(w[0]); A[g][2*t4+1] = hi(w[0]);
        A[g+8][2*t4] = lo(w[1]); A[g+8][2*t4+1] = hi(w[1]);
        A[g][2*t4+8] = lo(w[2]); A[g][2*t4+9] = hi(w[2]);
        A[g+8][2*t4+8] = lo(w[3]); A[g+8][2*t4+9] = hi(w[3]);
        B[2*t4][g] = lo(w[4]); B[2*t4+1][g] = hi(w[4]);
        B[2*t4+8][g] = lo(w[5]); B[2*t4+9][g] = hi(w[5]);
    }
    warpsync();
    int l = t & 31, g = l >> 2, t4 = l & 3;
    for (int x = 0; x < 4; x++) {
        int r = g + (x >= 2 ? 8 : 0), c = 2 * t4 + (x & 1);
        float s = 0; for (int k = 0; k < 16; k++) s += A[r][k] * B[k][c];
        d[x] += s;
    }
}
inline void ldsm(unsigned* r, const void* p, bool trans) {
    unsigned t = threadIdx.x, base = t & ~31u;
    slots[t][0] = (unsigned long long) p;
    warpsync();
    int l = t & 31;
    for (int m = 0; m < 4; m++) {
        unsigned short e0, e1;
        if (!trans) {
            const unsigned short* row = (const unsigned short*) slots[base + m * 8 + l / 4][0];
            e0 = row[2 * (l % 4)]; e1 = row[2 * (l % 4) + 1];
        } else {
            const unsigned short* r0 = (const unsigned short*) slots[base + m * 8 + 2 * (l % 4)][0];
            const unsigned short* r1 = (const unsigned short*) slots[base + m * 8 + 2 * (l % 4) + 1][0];
            e0 = r0[l / 4]; e1 = r1[l / 4];
        }
        r[m] = (unsigned) e0 | ((unsigned) e1 << 16);
    }
    warpsync();
}
inline void fb_ldsm4(unsigned* r, const void* p) { ldsm(r, p, false); }
inline void fb_ldsm4t(unsigned* r, const void* p) { ldsm(r, p, true); }
