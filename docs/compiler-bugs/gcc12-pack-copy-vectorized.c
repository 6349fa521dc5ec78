#include <math.h>
#include <stdbool.h>
#include <string.h>
static inline float bf2f(unsigned short b) { unsigned u = (unsigned)b << 16; float f; memcpy(&f, &u, 4); return f; }
static inline unsigned short f2bf(float f) {  /* round to nearest even; NaN stays NaN */
  unsigned u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float bfround(float f) { return bf2f(f2bf(f)); }
typedef float float32x16 __attribute__((vector_size(64)));
typedef float float32x16u __attribute__((vector_size(64), aligned(4)));
typedef int int32x16 __attribute__((vector_size(64)));
#if defined(__clang__) && (defined(__FMA__) || defined(__AVX512F__))
#include <immintrin.h>
#endif
static inline float32x16 mulacc_float32x16(float32x16 a, float32x16 b, float32x16 c) {
#if defined(__AVX512F__) && defined(__clang__)
  return (float32x16)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__AVX512F__)
  float32x16 r;
  for (int i = 0; i < 16; i++) r[i] = __builtin_fmaf(a[i], b[i], c[i]);
  return r;
#else
  return a * b + c;  /* no FMA: rounded twice, as the reference rounds */
#endif
}
void kernel(float* restrict data0, float* restrict data1, float* restrict data2) {
  for (long long _r0 = 0; _r0 < 160; _r0++) {
    __attribute__((aligned(64))) float pack2[2560];
    for (long long _p2_1 = 0; _p2_1 < 80; _p2_1++) {
      for (long long _p2_2 = 0; _p2_2 < 2; _p2_2++) {
        for (long long _p2_3 = 0; _p2_3 < 16; _p2_3++) {
          float v8 = data2[((_p2_1*5120)+_p2_2+(_p2_3*320)+(_r0*2))];
          pack2[((_p2_1*32)+(_p2_2*16)+_p2_3)] = v8;
        }
      }
    }
    for (long long _g1 = 0; _g1 < 80; _g1++) {
      float32x16 acc14 = ((float)0x0.0p+0)-(float32x16){};
      float32x16 v15 = (((((_r0*-1))<0))?*(float32x16u*)(data0+((_g1*16))):(float32x16){});
      acc14 = (v15+acc14);
      for (long long _r2 = 0; _r2 < 2; _r2++) {
        float v18 = data1[((_r0*2)+_r2)];
        float32x16 v19 = v18-(float32x16){};
        float32x16 v20 = *(float32x16u*)(pack2+((_g1*32)+(_r2*16)));
        acc14 = mulacc_float32x16(v19,v20,acc14);
      }
      *(float32x16u*)(data0+((_g1*16))) = acc14;
    }
  }
}
