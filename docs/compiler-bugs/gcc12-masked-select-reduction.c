/* gcc 12.2 (Debian 12.2.0-14) miscompiles `k` at -O3 with AVX-512 (-march=native on an AMD EPYC Zen 4, -mavx512f,
   -march=skylake-avx512), under -fwrapv (the CPU device's flags). It is right at -O2 -march=native, at -O3 with AVX2
   (-mavx2 -mfma) or without AVX, without -fwrapv, with -fno-tree-loop-if-convert or -fno-tree-loop-vectorize, under
   -fsanitize=address,undefined, and with clang 14. The shape of C tunesvc emitted for a padded window's mask
   (gcc12-masked-select-reduction.md: where from, and why it is not UB).

     gcc -O3 -march=native -fwrapv gcc12-masked-select-reduction.c && ./a.out                 # 6 6 6, exit 1 (AVX-512)
     gcc -O3 -march=native -fwrapv -fno-tree-loop-if-convert gcc12-masked-select-reduction.c && ./a.out   # 4 6 6, exit 0
     gcc -O3 -march=native -fwrapv -DWORKAROUND gcc12-masked-select-reduction.c && ./a.out    # tunesvc's workaround: right

   A SUM over a 3x4 window of a value that is 1 where the window's position lies inside a padded input and 0 outside
   (`valid ? 1.0f : 0.0f`, no load at all): the corner output's window has 2x2 positions inside, so 4; gcc's code gives 6. */
#include <stdio.h>

#ifdef WORKAROUND
#define FN __attribute__((noipa, optimize("no-tree-loop-if-convert")))
#else
#define FN __attribute__((noipa))
#endif

FN void k(float *restrict out) {
  for (long long g1 = 0; g1 < 14; g1++)
    for (long long g2 = 0; g2 < 14; g2++) {
      float acc = 0.0f;
      for (long long r3 = 0; r3 < 3; r3++)
        for (long long r4 = 0; r4 < 4; r4++)  /* padded to 4: r4 == 3 is outside the window */
          acc = ((((g1 * -2) + (r3 * -1)) < 0) && (((g2 * -2) + (r4 * -1)) < 0) && (r4 < 3) ? 1.0f : 0.0f) + acc;
      out[g1 * 14 + g2] = acc;
    }
}

int main(void) {
  float out[196];
  k(out);
  printf("%g %g %g\n", out[0], out[1], out[14]);
  return out[0] != 4.0f || out[1] != 6.0f || out[14] != 6.0f;
}
