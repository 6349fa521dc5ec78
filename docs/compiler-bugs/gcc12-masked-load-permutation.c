/* gcc 12.2 (Debian 12.2.0-14) miscompiles both functions at -O3 with AVX-512 or AVX2 (-march=native on a Cascade Lake
   Xeon; -mavx2, -march=haswell and -march=znver2 there too: the AVX2 AMD EPYC where the fuzzer found the first), and
   `sum` at -O2 -march=native too (gcc 12 vectorizes at -O2, with the very-cheap cost model). Both are right at -O1,
   at -O3 without AVX, with -fno-tree-loop-vectorize or -fno-tree-loop-if-convert, under -fsanitize=address,undefined,
   and with clang 14 and 15. Each is the shape of C tunesvc emitted (gcc12-masked-load-permutation.md: where from, how
   reduced, and why it is not UB).

     gcc -O3 -march=native gcc12-masked-load-permutation.c && ./a.out                    # wrong values, exit 1
     gcc -O3 -march=native -fno-tree-loop-if-convert gcc12-masked-load-permutation.c && ./a.out   # right, exit 0
     gcc -O3 -march=native -DWORKAROUND gcc12-masked-load-permutation.c && ./a.out       # tunesvc's workaround: right

   Both have a loop whose loads are conditional (padding: `valid ? in[i] : 0`), which gcc's if-conversion turns into
   masked loads (.MASK_LOAD), grouped by the loop vectorizer's SLP in an order other than memory's: the SLP node needs a
   load permutation, which gcc 12 drops for masked loads (GCC PR tree-optimization/114375). */
#include <stdio.h>

#ifdef WORKAROUND
#define FN __attribute__((noipa, optimize("no-tree-loop-if-convert")))
#else
#define FN __attribute__((noipa))
#endif

/* A PACK copy: a 4x3x2 scratch array from a 2x2 input, rows a >= 2 and columns b >= 2 zero, the input's row read again
   for each b (a broadcast axis). With the b and c loops unrolled, one a iteration stores in[2a], in[2a+1], in[2a],
   in[2a+1] under a < 2: permutation {0,1,0,1}. */
FN void copy(unsigned *restrict out, const unsigned *restrict in) {
  unsigned pack[24];
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 2; c++)
        pack[a*6 + b*2 + c] = (a < 2 && b < 2) ? in[a*2 + c] : 0;
  for (int i = 0; i < 4; i++) out[i] = pack[i*6 + 2];  /* pack[i][1][0]: in[2i] for i < 2, else 0 */
}

/* A sum over 7 rows padded to 8, 16 columns upcast into 16 accumulators: gcc finds the 16 reductions last to first,
   so the loads' SLP node is in[r*16+15], ..., in[r*16]: permutation {15,...,0}. */
FN void sum(int *restrict out, const int *restrict in) {
  int a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0, a8 = 0, a9 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0,
      a14 = 0, a15 = 0;
  for (int r = 0; r < 8; r++) {
    int v0 = r < 7 ? in[r*16] : 0, v1 = r < 7 ? in[r*16 + 1] : 0, v2 = r < 7 ? in[r*16 + 2] : 0, v3 = r < 7 ? in[r*16 + 3] : 0;
    int v4 = r < 7 ? in[r*16 + 4] : 0, v5 = r < 7 ? in[r*16 + 5] : 0, v6 = r < 7 ? in[r*16 + 6] : 0, v7 = r < 7 ? in[r*16 + 7] : 0;
    int v8 = r < 7 ? in[r*16 + 8] : 0, v9 = r < 7 ? in[r*16 + 9] : 0, v10 = r < 7 ? in[r*16 + 10] : 0, v11 = r < 7 ? in[r*16 + 11] : 0;
    int v12 = r < 7 ? in[r*16 + 12] : 0, v13 = r < 7 ? in[r*16 + 13] : 0, v14 = r < 7 ? in[r*16 + 14] : 0, v15 = r < 7 ? in[r*16 + 15] : 0;
    a0 = v0 + a0; a1 = v1 + a1; a2 = v2 + a2; a3 = v3 + a3; a4 = v4 + a4; a5 = v5 + a5; a6 = v6 + a6; a7 = v7 + a7;
    a8 = v8 + a8; a9 = v9 + a9; a10 = v10 + a10; a11 = v11 + a11; a12 = v12 + a12; a13 = v13 + a13; a14 = v14 + a14; a15 = v15 + a15;
  }
  int acc[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
  for (int j = 0; j < 16; j++) out[j] = acc[j];
}

int main(void) {
  unsigned cin[4] = {1, 2, 3, 4}, cout[4];
  int sin[112], sout[16], bad = 0;
  copy(cout, cin);
  printf("copy: %u %u %u %u (want 1 3 0 0)\n", cout[0], cout[1], cout[2], cout[3]);
  bad |= !(cout[0] == 1 && cout[1] == 3 && cout[2] == 0 && cout[3] == 0);
  for (int i = 0; i < 112; i++) sin[i] = i;
  sum(sout, sin);
  printf("sum: %d %d ... %d (want 336 343 ... 441)\n", sout[0], sout[1], sout[15]);
  for (int j = 0; j < 16; j++) bad |= sout[j] != 336 + 7*j;
  return bad;
}
