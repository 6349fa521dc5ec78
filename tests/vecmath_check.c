/* The accuracy contract's exhaustive check (tests/test_vecmath.py builds it, with linearizer.vecmath's functions for
   1, 4, 8 and 16 lanes -include'd, and SLEEF's where -DWITH_SLEEF).
   usage: vecmath_check float32 FN [S] every float32 input of FN (exp2 log2 sin), each lane count's implementation
                                       (S: only every S-th block of 16 inputs, a sample across every exponent)
          vecmath_check narrow FN      every float16 and bfloat16 input: the float32 function (16 lanes), rounded
          vecmath_check float64 FN N   N random doubles and the special values: libm's double function (what the C
                                       renderer emits for float64)
   Prints one line per implementation: name, inputs checked, max error in ulps of the result's type (measured against
   the exact value: libm's double result for float32 and narrower, long double's for float64), inputs whose result is
   not the correctly rounded one, special-value violations (NaN, +-0, inf where the exact result has them). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef WITH_SLEEF
#include <sleef.h>
#endif
#define NIMPL 5
static const char *NAMES[NIMPL] = {"tsvc_f1", "tsvc_f4", "tsvc_f8", "tsvc_f16", "sleef_f16_u10"};

/* error of got against the exact value want, in ulps of a type with p significand bits, smallest normal 2^emin and
   largest finite maxf; -1 for a special-value violation */
static double ulp_err(long double got, long double want, int p, int emin, long double maxf) {
  if (isnan(want)) return isnan(got) ? 0 : -1;
  if (want == 0) return (got == 0 && signbit(got) == signbit(want)) ? 0 : -1;
  long double lim = maxf + ldexpl(1, ilogbl(maxf) - p);  /* from here the result rounds to inf */
  if (fabsl(want) >= lim) return (isinf(got) && signbit(got) == signbit(want)) ? 0 : -1;
  if (isnan(got) || isinf(got)) return -1;
  int e = ilogbl(want);
  long double ulp = ldexpl(1, (e < emin ? emin : e) - (p - 1));
  return (double)(fabsl(got - want) / ulp);
}

static double exact(int fn, float x) { double d = x; return fn == 0 ? exp2(d) : fn == 1 ? log2(d) : sin(d); }

static void f16_impls(int fn, const float *x, float *out) {  /* out[i * 16 + lane]: implementation i on 16 inputs */
  tsvc_f16 v16; memcpy(&v16, x, 64);
  tsvc_f16 r16 = fn == 0 ? tsvc_exp2_f16(v16) : fn == 1 ? tsvc_log2_f16(v16) : tsvc_sin_f16(v16);
  memcpy(out + 48, &r16, 64);
  for (int h = 0; h < 2; h++) {
    tsvc_f8 v8; memcpy(&v8, x + 8 * h, 32);
    tsvc_f8 r8 = fn == 0 ? tsvc_exp2_f8(v8) : fn == 1 ? tsvc_log2_f8(v8) : tsvc_sin_f8(v8);
    memcpy(out + 32 + 8 * h, &r8, 32);
  }
  for (int q = 0; q < 4; q++) {
    tsvc_f4 v4; memcpy(&v4, x + 4 * q, 16);
    tsvc_f4 r4 = fn == 0 ? tsvc_exp2_f4(v4) : fn == 1 ? tsvc_log2_f4(v4) : tsvc_sin_f4(v4);
    memcpy(out + 16 + 4 * q, &r4, 16);
  }
  for (int i = 0; i < 16; i++) out[i] = fn == 0 ? tsvc_exp2f(x[i]) : fn == 1 ? tsvc_log2f(x[i]) : tsvc_sinf(x[i]);
#ifdef WITH_SLEEF
  __m512 s; memcpy(&s, x, 64);
  s = fn == 0 ? Sleef_exp2f16_u10(s) : fn == 1 ? Sleef_log2f16_u10(s) : Sleef_sinf16_u10(s);
  memcpy(out + 64, &s, 64);
#endif
}

static void report(const char *name, long n, double worst, long not_cr, long special) {
  printf("%s checked=%ld max_ulp=%.6f not_correctly_rounded=%ld special_violations=%ld\n", name, n, worst, not_cr, special);
}

static void run_float32(int fn, long step) {
  double worst[NIMPL] = {0.5, 0.5, 0.5, 0.5, 0.5};  /* correctly rounded results are within 0.5 ulp: only others are measured */
  long not_cr[NIMPL] = {0}, special[NIMPL] = {0}, checked = 0;
  /* sin's exact fallback (|x| >= 2^22, inf, NaN: libm's double sin rounded, the reference itself) costs a libm call of
     a huge argument per lane: blocks wholly in it are checked one in 64 */
  #pragma omp parallel for schedule(dynamic, 64) reduction(max: worst[:NIMPL]) reduction(+: not_cr[:NIMPL], special[:NIMPL], checked)
  for (long blk = 0; blk < (1L << 28); blk++) {
    uint32_t base = (uint32_t)blk << 4;
    if (blk % step || (fn == 2 && ((base >> 23) & 0xff) >= 127 + 22 && blk % 64)) continue;
    float x[16], out[16 * NIMPL];
    for (int i = 0; i < 16; i++) { uint32_t u = base + i; memcpy(&x[i], &u, 4); }
    f16_impls(fn, x, out);
    checked += 16;
    for (int i = 0; i < 16; i++) {
      double want = exact(fn, x[i]);
      float cr = (float)want;
      for (int k = 0; k < NIMPL; k++) {
#ifndef WITH_SLEEF
        if (k == 4) continue;
#endif
        float got = out[k * 16 + i];
        if (!memcmp(&got, &cr, 4) || (isnan(got) && isnan(cr))) continue;  /* correctly rounded: within 0.5 ulp, NaN */
        not_cr[k]++;
        double e = ulp_err(got, want, 24, -126, 0x1.fffffep127L);
        if (e < 0) special[k]++; else if (e > worst[k]) worst[k] = e;
      }
    }
  }
  for (int k = 0; k < NIMPL; k++) {
#ifndef WITH_SLEEF
    if (k == 4) continue;
#endif
    report(NAMES[k], checked, worst[k], not_cr[k], special[k]);
  }
}

static float bfround(float f) {  /* as the C renderer rounds to bfloat16: to nearest even, NaN stays NaN */
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u; else u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &u, 4); return f;
}

static void run_narrow(int fn) {
  for (int bf = 0; bf < 2; bf++) {
    double worst = 0; long not_cr = 0, special = 0;
    for (uint32_t b = 0; b < 65536; b += 16) {
      float x[16], out[16 * NIMPL];
      for (int i = 0; i < 16; i++) {
        if (bf) { uint32_t u = (b + i) << 16; memcpy(&x[i], &u, 4); }
        else { uint16_t h = b + i; _Float16 hf; memcpy(&hf, &h, 2); x[i] = hf; }
      }
      f16_impls(fn, x, out);
      for (int i = 0; i < 16; i++) {
        double want = exact(fn, x[i]);
        float got = bf ? bfround(out[48 + i]) : (float)(_Float16)out[48 + i];
        float cr = bf ? bfround((float)want) : (float)(_Float16)want;  /* (float)want first for bfloat16: ties only */
        double e = bf ? ulp_err(got, want, 8, -126, 0x1.fep127L) : ulp_err(got, want, 11, -14, 65504.0L);
        if (e < 0) special++; else if (e > worst) worst = e;
        if (memcmp(&got, &cr, 4) && !(isnan(got) && isnan(cr))) not_cr++;
      }
    }
    report(bf ? "bfloat16_via_tsvc_f16" : "float16_via_tsvc_f16", 65536, worst, not_cr, special);
  }
}

static void run_float64(int fn, long n) {
  static const double SPECIAL[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 2.0, 0.5, 1024.0, -1075.0, 1023.999, -1074.5,
                                   0x1p-1074, -0x1p-1074, 0x1p-1022, 0x1.fffffffffffffp1023, 3.141592653589793, 1.5707963267948966,
                                   1e22, 1e300, -1e300, 0x1.0p+52, 6381956970095103.0 * 0x1p797};  /* a hard case for sin */
  int ns = sizeof(SPECIAL) / sizeof(SPECIAL[0]);
  double worst = 0; long not_cr = 0, special = 0;
  uint64_t s = 0x9e3779b97f4a7c15ULL;
  for (long i = 0; i < n + ns; i++) {
    double x;
    if (i < ns) x = SPECIAL[i];
    else {
      s ^= s << 13; s ^= s >> 7; s ^= s << 17;
      if (i % 2) memcpy(&x, &s, 8);                                                 /* any bit pattern */
      else x = ldexp((double)(s >> 11) * 0x1p-53, (int)(s % 16) - 4) * (s & (1ULL << 10) ? -1 : 1) * (fn == 0 ? 64 : 1);  /* moderate */
    }
    long double xl = x;
    double got = fn == 0 ? exp2(x) : fn == 1 ? log2(x) : sin(x);
    long double want = fn == 0 ? exp2l(xl) : fn == 1 ? log2l(xl) : sinl(xl);
    double cr = (double)want;
    double e = ulp_err(got, want, 53, -1022, 0x1.fffffffffffffp1023L);
    if (e < 0) special++; else if (e > worst) worst = e;
    if (memcmp(&got, &cr, 8) && !(isnan(got) && isnan(cr))) not_cr++;
  }
  report("libm_double", n + ns, worst, not_cr, special);
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s float32|narrow|float64 exp2|log2|sin [N]\n", argv[0]); return 2; }
  int fn = !strcmp(argv[2], "exp2") ? 0 : !strcmp(argv[2], "log2") ? 1 : !strcmp(argv[2], "sin") ? 2 : -1;
  if (fn < 0) { fprintf(stderr, "unknown function %s\n", argv[2]); return 2; }
  if (!strcmp(argv[1], "float32")) run_float32(fn, argc > 3 ? atol(argv[3]) : 1);
  else if (!strcmp(argv[1], "narrow")) run_narrow(fn);
  else if (!strcmp(argv[1], "float64")) run_float64(fn, argc > 3 ? atol(argv[3]) : 1000000);
  else { fprintf(stderr, "unknown mode %s\n", argv[1]); return 2; }
  return 0;
}
