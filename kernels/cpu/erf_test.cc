// erf_test.cc - apx_erf_poly_f32 (kernels/ew_math.h), the fp32 erf of Erf, Gelu and their
// gradients on CPU and GPU: max ulp error over a dense sweep of fp32 against erf in double,
// no worse than glibc's erff on the same sweep; special values; and the Erf / Gelu kernels
// compute exactly apx_erf_f32 / apx_gelu_f32.
#include <cmath>
#include <cstring>

#include "kernels/cpu/test_util.h"

extern "C" {
#include "kernels/ew_math.h"
}

using namespace apxtest;

namespace {

// |got - erf(x)| in ulps of fp32 at erf(x) (double erf: far below fp32's resolution).
double ulp_error(float got, float x) {
  double ex = std::erf((double)x), a = std::fabs(ex);
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  double ulp = a < 0x1p-126 ? 0x1p-149 : std::ldexp(1.0, e - 24);
  return std::fabs((double)got - ex) / ulp;
}

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

}  // namespace

TEST(Erf, DenseSweepNoWorseThanLibm) {
  double worst = 0, worst_libm = 0;
  float at = 0;
  auto check = [&](float x) {
    double e = ulp_error(apx_erf_poly_f32(x), x), el = ulp_error(erff(x), x);
    if (e > worst) {
      worst = e;
      at = x;
    }
    worst_libm = std::max(worst_libm, el);
  };
  // every 17th fp32 in [0, 4.5] (the polynomials' whole domain; 9.5 million values, subnormals
  // included), a sparser sweep of the negatives and beyond
  for (uint32_t b = 0; b <= 0x40900000u; b += 17) check(from_bits(b));
  for (uint32_t b = 0x80000000u; b <= 0xc0900000u; b += 101) check(from_bits(b));
  for (uint32_t b = 0x40900000u; b < 0x7f800000u; b += 1009) check(from_bits(b));
  RecordProperty("max_ulp", std::to_string(worst));
  RecordProperty("max_ulp_libm", std::to_string(worst_libm));
  printf("apx_erf_poly_f32: max %.4f ulp (at %.9g); glibc erff: max %.4f ulp\n", worst, at,
         worst_libm);
  EXPECT_LE(worst, std::max(worst_libm, 0.51)) << "at " << at;
  EXPECT_LT(worst, 1.0);
}

TEST(Erf, SpecialValues) {
  EXPECT_TRUE(std::isnan(apx_erf_poly_f32(NAN)));
  EXPECT_EQ(apx_erf_poly_f32(INFINITY), 1.0f);
  EXPECT_EQ(apx_erf_poly_f32(-INFINITY), -1.0f);
  EXPECT_EQ(apx_erf_poly_f32(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(apx_erf_poly_f32(-0.0f)));
  EXPECT_EQ(apx_erf_poly_f32(1e30f), 1.0f);
  EXPECT_EQ(apx_erf_poly_f32(0x1p-149f), erff(0x1p-149f));  // subnormal: 2/sqrt(pi) x
  for (float x : {0.5f, 0.999999f, 1.0f, 2.0f, 3.83f, 3.92f, 4.0f})  // odd function
    EXPECT_EQ(apx_erf_poly_f32(-x), -apx_erf_poly_f32(x)) << x;
}

// The kernels (vectorized loops) compute exactly the shared formula.
TEST(Erf, KernelsUseTheSharedFormula) {
  Tensor x = rand(APX_DT_F32, {4099}, -5, 5, 3), y(APX_DT_F32, {4099}), g(APX_DT_F32, {4099});
  run_ok(APX_OP_Erf, nullptr, {&x}, {&y});
  ApxAttrGelu a = {};
  run_ok(APX_OP_Gelu, &a, {&x}, {&g});
  for (int64_t i = 0; i < x.numel(); i++) {
    float v = x.as<float>()[i];
    ASSERT_EQ(y.as<float>()[i], apx_erf_f32(v)) << v;
    ASSERT_EQ(g.as<float>()[i], apx_gelu_f32(v)) << v;
  }
}
