// node_conformance_test.cc - ONNX's own backend node tests (Debian libonnx-testdata) run
// through the whole compiler and the runtime on the CPU backend (STYLE.md 12): values, in
// fp32 and in the two half types.
//
// Which tests: every test folder whose model uses only apexc v1 / compile-time ops
// (apx_node::model_is_v1), minus the v1 tests out of scope for apexc v1
// (apx_node::excluded_tests(), node_harness.cc, each with its reason:
// string/optional/sequence types, opset-1 models; node_shape_test checks they are rejected
// cleanly). Each test folder runs in three modes: Fp32, Fp16, Bf16.
//
// Every mode compiles like `apexc`/`apexrun infer` for inference: apx_onnx_load_file
// (opset_min 7, ir_version_min 3), the harness rule binding the inputs of the data set
// (node_harness.h: inputs feeding static-input slots become constants, bf16 test data is
// stored as uint16), apx_compile_graph (the whole pass table, verifier after every pass),
// pass_memplan when the pipeline left it out, apx_plan_from_graph, then the executor
// (runtime/exec.h) on the "cpu" backend with the data set's input_K.pb.
//
// Fp32 mode (-O0, training off): every graph output is compared with output_K.pb as ONNX's
// backend test runner does (onnx/backend/test/runner: dtype and shape equal, then
// np.testing.assert_allclose(want, got, rtol=1e-3, atol=1e-7)): |got - want| <= 1e-7 +
// 1e-3 |want|, NaN matches NaN, an infinity only itself; for integer and bool outputs this
// is exact equality. The expected dtype is the file's (uint16 standing for bfloat16).
// Every in-scope test must pass. Six references cannot be reproduced by design; for them
// the op's definition is checked instead (kFp32TrainingDropout, kFp32TruncatedBf16 below,
// each with its reason) and they count as passed.
//
// Fp16 / Bf16 modes (-O3 --half=fp16|bf16 --half-ops=<the model's op types>, training off,
// no loss): every forward float op runs in the half type (O3's default rule; --half-ops
// also overrides the overflow rule, which would keep e.g. Exp in fp32 at fp16), data inputs
// are rounded to it by the Casts that cast_insert adds and float constants are converted at
// compile time. The graph has no loss here: the loader marks the first output as the loss
// and the precision pass keeps a loss's producer in fp32, which would leave most single-op
// tests with nothing in half. Loss ops themselves (SoftmaxCrossEntropyLoss,
// NegativeLogLikelihoodLoss, FusedXentropy) stay fp32 by design (rule "loss").
// The test's fp32 reference outputs are *not* the oracle here: once the inputs are rounded
// the exact result is another number, whose distance to the fp32 reference depends on the
// op's conditioning, not on the kernel. Instead every kernel that reads or writes a half
// tensor is checked on the very inputs it received, against a reference computed in double
// on those (exactly representable) inputs:
//   1. the executor runs the plan one kernel at a time (apx_exec_run_range); the kernel's
//      input buffers are read before it runs (INPLACE kernels overwrite input 0), its
//      outputs after;
//   2. r64 = the same op (same typed attributes, same Philox seed and step) run by
//      apx_cpu_run on float64 copies of the inputs: math in double (cpu_kernels.h); for
//      Cast, r64 is the input value itself (the exact value to be converted);
//   3. r32 = the same op run on float32 copies of the inputs; e = |r32 - r64| is the
//      rounding error that fp32 arithmetic makes at that element on these inputs (0 for
//      Cast and for data movement);
//   4. each float output element h of type T must be one of the correctly rounded values
//      of the reals within e of r64:  RN_T(r64 - e) <= h <= RN_T(r64 + e),  where RN_T is
//      IEEE round-to-nearest-even to T with T's range (subnormals, overflow to inf),
//      implemented here independently of kernels/ (round_to below). NaN where r64 is NaN.
//      Non-float outputs (MaxPool indices, Dropout masks) must equal the double run's.
// Derivation: the CPU half contract (DESIGN.md 12, cpu_kernels.h) is "load to fp32, compute
// in fp32, round once to nearest even on store", i.e. h = RN_T(y32) for an fp32 evaluation
// y32 of the op on the same inputs. With |y32 - y| <= e (y: the exact result; r64 is y to
// double precision), monotonicity of RN_T puts h in [RN_T(y - e), RN_T(y + e)]. Where e is
// below the rounding gap (almost everywhere: fp32's 2^-24 relative error against fp16's
// 2^-11 / bf16's 2^-8 half-ulp) the interval is one value: h must be *the* correctly
// rounded result, |h - y| <= ulp_T(y) / 2 <= eps_T |y| / 2 (eps_fp16 = 2^-10, eps_bf16 =
// 2^-7); the summary reports the largest |h - r64| in ulps of T. Where fp32 itself cannot
// decide the rounding (cancellation: the normalized value of an element equal to its row's
// mean, a log-probability near 0) two neighbours are allowed, counted as "undecided".
// For fp32 outputs of such a kernel (LayerNormalization's Mean/InvStdDev) the same rule
// with T = fp32 holds. No factor is tuned: a half kernel that accumulates in half,
// truncates instead of rounding, is one ulp off, mishandles subnormals, overflow or NaN,
// or reads the wrong elements fails (NodeConformanceOracle.IntervalCheckCatchesHalfPathBugs
// shows it on a K = 64 MatMul). This proves the half path, not that fp16 equals fp32; the
// fp32 formula itself is what the Fp32 mode checks against ONNX's references (r64 is the
// kernels' double instantiation of the same source).
// Also checked when a plan data input has the half type: the fp32 test data reaches it as
// RN_T of each value (apx_exec_set_input's conversion).
// Skipped with a reason (per mode, counted in the summary): in the half modes the
// Cast/CastLike-only tests (the conversion to one specific type is the test's subject),
// tests without float tensors (integer/bool: nothing to round), tests whose float work all
// folds at compile time (Shape, Constant, ConstantOfShape, Range), and tests where no op
// but the inserted Casts touches the half type (the reason names the op and the precision
// rule: loss ops, integer-output Pow).
// A summary line per mode (passed / failed / skipped with reasons; in the half modes the
// kernels and elements checked, the largest error in ulps, the undecided elements) is
// printed at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "ir/diag.h"
#include "ir/ir.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/op.h"
#include "runtime/exec.h"
#include "plan/plan.h"
}

#include "tests/onnx_node/node_harness.h"

namespace {

using apx_node::Compiled;
using apx_node::kBf16;
using apx_node::kFp16;
using apx_node::kFp32;
using apx_node::kModeName;
using apx_node::Mode;

// In-scope tests whose fp32 reference outputs cannot be reproduced by design, and what the
// Fp32 mode checks instead (they count as passed when that check passes).
// Training-mode Dropout draws its mask from Philox (kernels/philox.h), the reference from
// numpy's generator: checked by the op's definition instead, y = x / (1 - ratio) where
// kept (the mask output, or y != 0: the inputs have no zeros) and 0 elsewhere, with the
// number kept within 5 binomial standard deviations of n (1 - ratio).
const std::set<std::string> kFp32TrainingDropout = {
    "test_training_dropout", "test_training_dropout_default", "test_training_dropout_default_mask",
    "test_training_dropout_mask"};
// Bernoulli's expanded form draws with RandomUniformLike (Philox; the reference: numpy): checked
// by definition instead, every element 0 or 1 (in the output's type).
const std::set<std::string> kFp32Bernoulli = {"test_bernoulli_expanded", "test_bernoulli_double_expanded",
                                              "test_bernoulli_seed_expanded"};
// ONNX 1.12 generated its bfloat16 references by truncating float32 (dropping the low 16
// bits); apexc rounds to nearest even, as DESIGN.md 12, the GPU (__float2bfloat16_rn) and
// ONNX's later reference implementation (onnx.reference Cast, checked with onnx 1.23) do.
// Checked instead: the reference is exactly the
// truncation of input_0 (so the note stays true) and apexc's output is exactly RN_bf16 of
// input_0.
const std::set<std::string> kFp32TruncatedBf16 = {"test_cast_FLOAT_to_BFLOAT16", "test_castlike_FLOAT_to_BFLOAT16",
                                                  "test_castlike_FLOAT_to_BFLOAT16_expanded"};

struct ModeSummary {
  int in_scope = 0, passed = 0, failed = 0, skipped = 0, by_definition = 0;
  std::map<std::string, int> skip_reasons;
  // half modes
  int64_t kernels_checked = 0, elements = 0, elements_other = 0, undecided = 0, inputs_rounded = 0;
  double max_ulps = 0;
  std::string max_ulps_where;
};
ModeSummary g_sum[3];
int g_excluded = 0;

// ---- rounding oracle, independent of kernels/ ------------------------------------------

struct Format {
  int p, emin, emax;  // significand bits (with the implicit one), exponent range
};

Format format_of(ApxDType t) {
  switch (t) {
    case APX_DT_F16: return {11, -14, 15};
    case APX_DT_BF16: return {8, -126, 127};
    case APX_DT_F32: return {24, -126, 127};
    default: return {53, -1022, 1023};
  }
}

// IEEE round-to-nearest-even of x to format t, with t's subnormals and overflow to inf.
// x is scaled by a power of two (exact), rounded to an integer once (nearbyint, ties to
// even in the default rounding mode) and scaled back (exact for p <= 53).
double round_to(double x, ApxDType t) {
  if (t == APX_DT_F64 || !std::isfinite(x) || x == 0) return x;
  Format f = format_of(t);
  int e = std::max(std::ilogb(x), f.emin);
  double q = std::ldexp(std::nearbyint(std::ldexp(x, f.p - 1 - e)), e - (f.p - 1));
  double maxf = std::ldexp(2.0 - std::ldexp(1.0, 1 - f.p), f.emax);
  return std::fabs(q) > maxf ? std::copysign(INFINITY, x) : q;
}

// Spacing of format t at |x| (the subnormal spacing below the normal range).
double ulp_of(double x, ApxDType t) {
  Format f = format_of(t);
  int e = (x == 0 || !std::isfinite(x)) ? f.emin : std::min(std::max(std::ilogb(x), f.emin), f.emax);
  return std::ldexp(1.0, e - (f.p - 1));
}

// ONNX's backend runner: np.testing.assert_allclose(want, got, rtol=1e-3, atol=1e-7).
bool onnx_allclose(double got, double want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= 1e-7 + 1e-3 * std::fabs(want);
}

// The half-mode check of one float element (file comment, step 4): h of type T against the
// float64 reference r with the fp32 evaluation error e. *undecided: more than one value of T
// is allowed (fp32 cannot decide the rounding).
bool within_rounding(double h, double r, double e, ApxDType T, bool *undecided) {
  *undecided = false;
  if (std::isnan(r)) return std::isnan(h);
  if (std::isinf(r)) return h == r;
  const double lo = round_to(r - e, T), hi = round_to(r + e, T);
  *undecided = lo != hi;
  return lo <= h && h <= hi;
}

// ---- one compiled test ------------------------------------------------------------------

// Compiles (apx_node::compile, the verifier after every pass), starts the executor on the
// cpu backend and feeds the data inputs; false with the stage and message.
bool compile_and_feed(const std::string &model, const std::string &data_dir, Mode mode,
                      const std::set<std::string> &opset, Compiled *c, std::string *err) {
  if (!apx_node::compile(model, data_dir, mode, opset, true, c, err)) return false;
  ApxExecConfig cfg;
  apx_exec_config_init(&cfg);
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  if (apx_exec_init(&c->ex, &c->plan, &cfg, &d)) {
    *err = std::string("executor: ") + d.msg;
    return false;
  }
  c->have_ex = true;
  return apx_node::set_inputs(&c->ex, *c, err);
}

// ---- per-kernel reference (half modes) --------------------------------------------------

struct HostTensor {
  ApxTensor t;                  // data is set from bytes when a call is made
  bool present = false;
  std::vector<uint8_t> bytes;
};

bool read_buffer(Compiled *c, int32_t id, HostTensor *h, std::string *err) {
  const ApxTensor *v = apx_exec_view(&c->ex, id);
  h->t = *v;
  h->present = true;
  h->bytes.assign((size_t)c->plan.bufs[id].bytes + 1, 0);
  ApxDiag d;
  apx_diag_init(&d);
  d.quiet = 1;
  if (apx_exec_read(&c->ex, id, h->bytes.data(), (size_t)c->plan.bufs[id].bytes, &d)) {
    *err = d.msg;
    return false;
  }
  return true;
}

// Copy of src with its float elements in ft (exact widening; fp64 -> fp32 rounds).
HostTensor convert(const HostTensor &src, ApxDType ft) {
  HostTensor r = src;
  if (!src.present || !apx_dtype_is_float(src.t.dtype) || src.t.dtype == ft) return r;
  int64_t n = apx_tensor_numel(&src.t);
  r.t.dtype = ft;
  r.bytes.assign((size_t)n * apx_dtype_size(ft) + 1, 0);
  for (int64_t i = 0; i < n; i++) {
    double x = apx_node::elem(src.bytes.data(), src.t.dtype, i);
    if (ft == APX_DT_F64)
      ((double *)r.bytes.data())[i] = x;
    else
      ((float *)r.bytes.data())[i] = (float)x;
  }
  return r;
}

// An empty output of kernel argument a in dtype ft for floats (its own dtype otherwise).
HostTensor blank_output(const ApxTensor &a, bool present, ApxDType ft) {
  HostTensor r;
  r.t = a;
  r.present = present;
  if (!present) return r;
  if (apx_dtype_is_float(a.dtype)) r.t.dtype = ft;
  r.bytes.assign(apx_tensor_bytes(&r.t) + 1, 0);
  return r;
}

// Runs op on host tensors with the executor's seed and step.
bool run_reference(const ApxPlanKernel *kn, uint64_t seed, int64_t step, std::vector<HostTensor> *ins,
                   std::vector<HostTensor> *outs, std::string *err) {
  std::vector<ApxTensor> ti(ins->size() + 1), to(outs->size() + 1);
  for (size_t i = 0; i < ins->size(); i++) {
    ti[i] = (*ins)[i].t;
    ti[i].data = (*ins)[i].present ? (void *)(*ins)[i].bytes.data() : nullptr;
  }
  for (size_t i = 0; i < outs->size(); i++) {
    to[i] = (*outs)[i].t;
    to[i].data = (*outs)[i].present ? (void *)(*outs)[i].bytes.data() : nullptr;
  }
  ApxCpuCtx ctx;
  apx_cpu_ctx_init(&ctx);
  ctx.n_threads = 1;
  ctx.seed = seed;
  ctx.step = step;
  ApxStatus st = apx_cpu_run(&ctx, kn->op, kn->attrs, ti.data(), (int)ins->size(), to.data(), (int)outs->size());
  if (st != APX_STATUS_OK) {
    *err = std::string(apx_status_name(st)) + ": " + ctx.err;
    return false;
  }
  return true;
}

bool is_half(ApxDType t) { return t == APX_DT_F16 || t == APX_DT_BF16; }

struct KernelCheck {
  int64_t elements = 0, elements_other = 0, undecided = 0;  // half / other output elements
  double max_ulps = 0;
  int bad = 0;
};

// Checks kernel k's outputs (already run) against the double / float references.
void check_kernel(const std::string &name, Compiled *c, int32_t k, const std::vector<HostTensor> &ins,
                  const std::vector<HostTensor> &got, KernelCheck *kc) {
  const ApxPlanKernel *kn = &c->plan.kernels[k];
  const ApxTensor *args = c->ex.args + c->ex.arg_off[k];
  const bool is_cast = kn->op == APX_OP_Cast;
  bool has_f64 = false;
  for (const HostTensor &h : ins) has_f64 |= h.present && h.t.dtype == APX_DT_F64;
  for (const HostTensor &h : got) has_f64 |= h.present && h.t.dtype == APX_DT_F64;
  const uint64_t seed = c->plan.opts.seed;
  std::string where = name + " kernel " + std::to_string(k) + " '" + kn->node + "' (" + apx_op_name(kn->op) + ")";

  // r64: inputs widened to double; Cast keeps its output type (its attribute) and is used
  // only for non-float outputs, float outputs take the input value itself.
  std::vector<HostTensor> in64, out64, in32, out32;
  for (const HostTensor &h : ins) in64.push_back(convert(h, APX_DT_F64));
  for (int o = 0; o < kn->n_out; o++)
    out64.push_back(blank_output(args[kn->n_in + o], kn->out[o] >= 0, is_cast ? args[kn->n_in + o].dtype : APX_DT_F64));
  std::string err;
  if (!run_reference(kn, seed, c->ex.step, &in64, &out64, &err)) {
    ADD_FAILURE() << where << ": the float64 reference run failed: " << err;
    kc->bad++;
    return;
  }
  bool have32 = !is_cast && !has_f64;
  if (have32) {
    for (const HostTensor &h : ins) in32.push_back(convert(h, APX_DT_F32));
    for (int o = 0; o < kn->n_out; o++) out32.push_back(blank_output(args[kn->n_in + o], kn->out[o] >= 0, APX_DT_F32));
    if (!run_reference(kn, seed, c->ex.step, &in32, &out32, &err)) {
      ADD_FAILURE() << where << ": the float32 reference run failed: " << err;
      kc->bad++;
      return;
    }
  }
  for (int o = 0; o < kn->n_out; o++) {
    if (kn->out[o] < 0) continue;
    const HostTensor &h = got[o];
    const ApxDType T = h.t.dtype;
    const int64_t n = apx_tensor_numel(&h.t);
    int shown = 0;
    auto report = [&](int64_t i, const std::string &what) {
      kc->bad++;
      if (shown++ < 3) ADD_FAILURE() << where << " output " << o << " (" << apx_dtype_name(T) << ") element " << i << ": " << what;
    };
    if (!apx_dtype_is_float(T)) {
      kc->elements_other += n;
      if (memcmp(h.bytes.data(), out64[o].bytes.data(), apx_tensor_bytes(&h.t)) != 0)
        for (int64_t i = 0; i < n; i++) {
          double a = apx_node::elem(h.bytes.data(), T, i), b = apx_node::elem(out64[o].bytes.data(), T, i);
          if (a != b) report(i, "got " + std::to_string(a) + ", float64 reference " + std::to_string(b));
        }
      continue;
    }
    for (int64_t i = 0; i < n; i++) {
      const double hv = apx_node::elem(h.bytes.data(), T, i);
      const double r = is_cast ? apx_node::elem(ins[0].bytes.data(), ins[0].t.dtype, i)
                                : ((const double *)out64[o].bytes.data())[i];
      double e = 0;
      if (have32) {
        double r32 = ((const float *)out32[o].bytes.data())[i];
        e = std::isnan(r32) ? INFINITY : std::fabs(r32 - r);
      }
      (is_half(T) ? kc->elements : kc->elements_other)++;
      bool undecided;
      if (!within_rounding(hv, r, e, T, &undecided)) {
        char buf[256];
        snprintf(buf, sizeof buf, "got %.9g, float64 reference %.17g (fp32 error %.3g): allowed [%.9g, %.9g] (%s ulp %.3g)",
                 hv, r, e, round_to(r - e, T), round_to(r + e, T), apx_dtype_name(T), ulp_of(r, T));
        report(i, buf);
      } else if (is_half(T)) {
        if (undecided)
          kc->undecided++;
        else if (std::isfinite(r) && std::isfinite(hv))
          kc->max_ulps = std::max(kc->max_ulps, std::fabs(hv - r) / ulp_of(r, T));
      }
    }
  }
}

// ---- the test ---------------------------------------------------------------------------

class NodeConformance : public ::testing::TestWithParam<std::string> {
 protected:
  // Returns "" when the test ran (passed or failed: gtest's failures say which), else the
  // reason it was skipped.
  std::string run(Mode mode);
  void account(Mode mode);
};

// Training-mode Dropout by its definition (kFp32TrainingDropout). got: plan outputs.
void dropout_by_definition(const std::string &name, const std::string &data_dir,
                           const std::vector<std::vector<uint8_t>> &got) {
  ApxArena arena;
  apx_arena_init(&arena);
  ApxTensorConst x, r;
  std::string err;
  if (!apx_node::read_tensor(data_dir + "/input_0.pb", &arena, &x, &err) ||
      !apx_node::read_tensor(data_dir + "/input_1.pb", &arena, &r, &err)) {
    ADD_FAILURE() << name << ": " << err;
    apx_arena_free(&arena);
    return;
  }
  const double ratio = apx_node::elem(r.data, r.dtype, 0), scale = 1.0 / (1.0 - ratio);
  int64_t n = 1, kept = 0, bad = 0;
  for (int i = 0; i < x.rank; i++) n *= x.dims[i];
  for (int64_t i = 0; i < n; i++) {
    double xv = apx_node::elem(x.data, x.dtype, i), y = ((const float *)got[0].data())[i];
    if (xv == 0 && got.size() == 1) {
      ADD_FAILURE() << name << ": input element " << i << " is 0, which makes the kept elements ambiguous";
      break;
    }
    bool keep = got.size() > 1 ? got[1][(size_t)i] != 0 : y != 0;
    kept += keep;
    if (!onnx_allclose(y, keep ? xv * scale : 0.0) && bad++ < 3)
      ADD_FAILURE() << name << " element " << i << ": x " << xv << ", kept " << keep << ", y " << y;
  }
  const double mean = n * (1 - ratio), sd = std::sqrt(n * ratio * (1 - ratio));
  EXPECT_LE(std::fabs(kept - mean), 5 * sd) << name << ": " << kept << " of " << n << " kept at ratio " << ratio;
  apx_arena_free(&arena);
}

// Cast to bfloat16 whose reference truncates (kFp32TruncatedBf16).
void bf16_cast_by_definition(const std::string &name, const std::string &data_dir, const ApxTensorConst &want,
                             const std::vector<uint8_t> &got) {
  ApxArena arena;
  apx_arena_init(&arena);
  ApxTensorConst x;
  std::string err;
  if (!apx_node::read_tensor(data_dir + "/input_0.pb", &arena, &x, &err)) {
    ADD_FAILURE() << name << ": " << err;
    apx_arena_free(&arena);
    return;
  }
  int64_t n = x.dtype == APX_DT_F32 ? 1 : 0, differs = 0;
  EXPECT_EQ(x.dtype, APX_DT_F32) << name;
  for (int i = 0; i < x.rank; i++) n *= x.dims[i];
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, (const float *)x.data + i, 4);
    double xv = ((const float *)x.data)[i];
    EXPECT_EQ(((const uint16_t *)want.data)[i], (uint16_t)(bits >> 16)) << name << ": the reference is not the truncation at " << i;
    double g = apx_node::elem(got.data(), APX_DT_BF16, i), rn = round_to(xv, APX_DT_BF16);
    const bool nan = std::isnan(rn);
    EXPECT_TRUE(nan ? std::isnan(g) : g == rn) << name << " element " << i << ": " << xv << " -> " << g << ", want " << rn;
    differs += !nan && rn != apx_node::elem(want.data, APX_DT_BF16, i);
  }
  EXPECT_GT(differs, 0) << name << ": no element where rounding and truncation differ";
  apx_arena_free(&arena);
}

// Fp32 mode: compares every plan output with output_K.pb (ONNX's tolerances); returns true
// when a by-definition check replaced the comparison.
bool outputs_fp32(const std::string &name, const std::string &ops, Compiled *c, const std::string &data_dir) {
  std::vector<ApxTensorConst> want;
  std::string err;
  ApxArena arena;
  apx_arena_init(&arena);
  if (!apx_node::read_outputs(data_dir, &arena, &want, &err)) {
    ADD_FAILURE() << name << ": " << err;
    apx_arena_free(&arena);
    return false;
  }
  EXPECT_EQ((size_t)c->plan.n_outputs, want.size()) << name << ": plan outputs vs output_K.pb files";
  std::vector<std::vector<uint8_t>> gots;
  for (size_t k = 0; k < want.size() && k < (size_t)c->plan.n_outputs; k++) {
    const ApxPlanBuffer *b = &c->plan.bufs[c->plan.outputs[k]];
    const ApxTensorConst &t = want[k];
    const ApxDType wdt = apx_node::data_dtype(t.dtype, b->dtype);
    gots.emplace_back((size_t)b->bytes + 1);
    std::vector<uint8_t> &got = gots.back();
    bool same = b->dtype == wdt && b->rank == t.rank;
    for (int i = 0; same && i < t.rank; i++) same = b->dims[i] == t.dims[i];
    if (!same) {
      ADD_FAILURE() << name << " (" << ops << ") output " << k << " '" << b->name << "': plan has "
                    << apx_dtype_name(b->dtype) << " " << apx_node::dims_str(b->rank, b->dims) << ", expected "
                    << apx_dtype_name(wdt) << " " << apx_node::dims_str(t.rank, t.dims);
      continue;
    }
    ApxDiag d;
    apx_diag_init(&d);
    d.quiet = 1;
    if (apx_exec_read(&c->ex, c->plan.outputs[k], got.data(), (size_t)b->bytes, &d)) {
      ADD_FAILURE() << name << ": reading output " << k << ": " << d.msg;
      continue;
    }
    if (kFp32TrainingDropout.count(name)) continue;
    if (kFp32Bernoulli.count(name)) {
      int64_t n = 1, bad = 0;
      for (int i = 0; i < t.rank; i++) n *= t.dims[i];
      for (int64_t i = 0; i < n; i++) {
        double g = apx_node::elem(got.data(), wdt, i);
        if (g != 0.0 && g != 1.0 && bad++ < 3)
          ADD_FAILURE() << name << " output " << k << " element " << i << ": " << g << " is not 0 or 1";
      }
      continue;
    }
    if (kFp32TruncatedBf16.count(name)) {
      bf16_cast_by_definition(name, data_dir, t, got);
      continue;
    }
    int64_t n = 1;
    for (int i = 0; i < t.rank; i++) n *= t.dims[i];
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
      double g = apx_node::elem(got.data(), wdt, i), w = apx_node::elem(t.data, wdt, i);
      bool ok = apx_dtype_is_float(wdt) ? onnx_allclose(g, w) : g == w;
      if (!ok && bad++ < 3)
        ADD_FAILURE() << name << " (" << ops << ") output " << k << " '" << b->name << "' element " << i
                      << ": got " << g << ", want " << w;
    }
    if (bad > 3) ADD_FAILURE() << name << " output " << k << ": " << bad << " of " << n << " elements differ";
  }
  bool by_definition = false;
  if (kFp32TrainingDropout.count(name) && !::testing::Test::HasFailure()) {
    dropout_by_definition(name, data_dir, gots);
    by_definition = true;
  }
  by_definition |= kFp32TruncatedBf16.count(name) > 0 || kFp32Bernoulli.count(name) > 0;
  apx_arena_free(&arena);
  return by_definition;
}

// Half modes: checks the input rounding, then runs kernel by kernel with the references.
// Returns a skip reason when nothing but Casts ran in the half type.
std::string kernels_half(const std::string &name, Mode mode, Compiled *c) {
  ModeSummary &s = g_sum[mode];
  // 1. data inputs: fp32 test data rounded to the plan input's half type
  for (int32_t i = 0; i < c->plan.n_inputs; i++) {
    int32_t id = c->plan.inputs[i];
    const ApxPlanBuffer *b = &c->plan.bufs[id];
    size_t j = 0;
    while (j < c->data_names.size() && c->data_names[j] != b->name) j++;
    if (j == c->data_names.size() || !is_half(b->dtype) || c->data[j].dtype == b->dtype ||
        !apx_dtype_is_float(c->data[j].dtype))
      continue;
    HostTensor h;
    std::string err;
    if (!read_buffer(c, id, &h, &err)) {
      ADD_FAILURE() << name << ": reading input " << b->name << ": " << err;
      return "";
    }
    int64_t n = apx_tensor_numel(&h.t);
    int shown = 0;
    for (int64_t e = 0; e < n; e++) {
      double x = apx_node::elem(c->data[j].data, c->data[j].dtype, e);
      double want = round_to(x, b->dtype), got = apx_node::elem(h.bytes.data(), b->dtype, e);
      if (!(got == want || (std::isnan(got) && std::isnan(want))) && shown++ < 3)
        ADD_FAILURE() << name << ": input '" << b->name << "' element " << e << ": " << x << " became " << got
                      << " in " << apx_dtype_name(b->dtype) << ", want " << want;
    }
    s.inputs_rounded += n;
  }
  // 2. kernel by kernel
  const int32_t begin = c->plan.sec_begin[APX_SEC_FORWARD], end = c->plan.sec_end[APX_SEC_FORWARD];
  int half_ops = 0;
  std::set<std::string> kept;  // why float ops stayed out of half
  for (int32_t k = begin; k < end; k++) {
    const ApxPlanKernel *kn = &c->plan.kernels[k];
    const ApxTensor *args = c->ex.args + c->ex.arg_off[k];
    bool touches_half = false, float_io = false;
    for (int i = 0; i < kn->n_in + kn->n_out; i++) {
      int32_t id = i < kn->n_in ? kn->in[i] : kn->out[i - kn->n_in];
      if (id < 0) continue;
      touches_half |= is_half(args[i].dtype);
      float_io |= apx_dtype_is_float(args[i].dtype) != 0;
    }
    std::vector<HostTensor> ins(kn->n_in), got(kn->n_out);
    std::string err;
    for (int i = 0; touches_half && i < kn->n_in; i++) {
      ins[i].t = args[i];
      if (kn->in[i] >= 0 && !read_buffer(c, kn->in[i], &ins[i], &err)) {
        ADD_FAILURE() << name << ": reading kernel " << k << " input " << i << ": " << err;
        return "";
      }
    }
    ApxDiag d;
    apx_diag_init(&d);
    d.quiet = 1;
    if (apx_exec_run_range(&c->ex, k, k + 1, &d)) {
      ADD_FAILURE() << name << ": " << d.msg;
      return "";
    }
    if (kn->op != APX_OP_Cast && float_io) {
      if (touches_half) {
        half_ops++;
      } else {
        std::string rule = "?";
        for (int32_t q = 0; q < c->plan.n_decisions; q++)
          if (!strcmp(c->plan.decisions[q].node, kn->node)) rule = c->plan.decisions[q].rule;
        kept.insert(std::string(apx_op_name(kn->op)) + " runs in " + apx_dtype_short(kn->compute) + " (rule " + rule + ")");
      }
    }
    if (!touches_half) continue;
    for (int o = 0; o < kn->n_out; o++) {
      got[o].t = args[kn->n_in + o];
      if (kn->out[o] >= 0 && !read_buffer(c, kn->out[o], &got[o], &err)) {
        ADD_FAILURE() << name << ": reading kernel " << k << " output " << o << ": " << err;
        return "";
      }
    }
    KernelCheck kc;
    check_kernel(name, c, k, ins, got, &kc);
    if (getenv("APX_NODE_VERBOSE") && kc.undecided)
      std::printf("%s %s kernel %d (%s): %lld of %lld elements undecided by fp32\n", kModeName[mode], name.c_str(), k,
                  apx_op_name(kn->op), (long long)kc.undecided, (long long)kc.elements);
    s.kernels_checked++;
    s.elements += kc.elements;
    s.elements_other += kc.elements_other;
    s.undecided += kc.undecided;
    if (kc.max_ulps > s.max_ulps) {
      s.max_ulps = kc.max_ulps;
      s.max_ulps_where = name + " (" + apx_op_name(kn->op) + ")";
    }
  }
  if (half_ops == 0) {
    bool any_float = false;
    for (int32_t b = 0; b < c->plan.n_bufs; b++) any_float |= apx_dtype_is_float(c->plan.bufs[b].dtype) != 0;
    if (!any_float) return "no float tensors (integer/bool test)";
    if (kept.empty()) return "no kernel touches float data (it all folds at compile time)";
    std::string r = "no op runs in " + std::string(kModeName[mode]) + ":";
    for (const std::string &k : kept) r += " " + k;
    return r;
  }
  return "";
}

std::string NodeConformance::run(Mode mode) {
  const std::string name = GetParam();
  const std::string dir = std::string(apx_node::node_dir()) + "/" + name;
  const std::string model = dir + "/model.onnx";
  std::string ops;
  std::set<std::string> opset;
  if (!apx_node::model_is_v1(model, &ops, &opset)) return "-";  // not counted
  const auto &excl = apx_node::excluded_tests();
  if (excl.count(name)) {
    if (mode == kFp32) g_excluded++;
    return "=" + excl.at(name);
  }
  g_sum[mode].in_scope++;
  if (mode != kFp32) {
    bool cast_only = true;
    for (const std::string &op : opset) cast_only &= op == "Cast" || op == "CastLike";
    if (cast_only) return "Cast to one specific type: the conversion is the test's subject";
  }
  std::vector<std::string> sets = apx_node::list_data_sets(dir);
  if (sets.empty()) {
    ADD_FAILURE() << name << ": no test_data_set_* folder";
    return "";
  }
  std::string skip;
  for (const std::string &set : sets) {
    Compiled c(model);
    std::string err;
    if (!compile_and_feed(model, dir + "/" + set, mode, opset, &c, &err)) {
      ADD_FAILURE() << name << " (" << ops << ") " << kModeName[mode] << ": " << err;
      return "";
    }
    if (mode == kFp32) {
      ApxDiag d;
      apx_diag_init(&d);
      d.quiet = 1;
      if (apx_exec_run(&c.ex, APX_SEC_FORWARD, &d)) {
        ADD_FAILURE() << name << " (" << ops << "): " << d.msg;
        return "";
      }
      if (outputs_fp32(name, ops, &c, dir + "/" + set)) skip = "+";
    } else {
      skip = kernels_half(name, mode, &c);
    }
  }
  return skip;
}

void NodeConformance::account(Mode mode) {
  std::string why = run(mode);
  ModeSummary &s = g_sum[mode];
  if (why == "-") GTEST_SKIP() << "not a v1 model";
  if (!why.empty() && why[0] == '=') GTEST_SKIP() << "excluded: " << why.substr(1);
  if (HasFailure()) {
    s.failed++;
    return;
  }
  if (why == "+") {  // passed by definition (Fp32 mode, see kFp32TrainingDropout)
    s.by_definition++;
    why.clear();
  }
  if (!why.empty()) {
    s.skipped++;
    s.skip_reasons[why]++;
    GTEST_SKIP() << why;
  }
  s.passed++;
}

TEST_P(NodeConformance, Fp32) { account(kFp32); }
TEST_P(NodeConformance, Fp16) { account(kFp16); }
TEST_P(NodeConformance, Bf16) { account(kBf16); }

std::string param_name(const ::testing::TestParamInfo<std::string> &info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Onnx, NodeConformance, ::testing::ValuesIn(apx_node::list_tests()), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NodeConformance);

TEST(NodeConformanceData, TestDataIsInstalled) {
  EXPECT_GT(apx_node::list_tests().size(), 100u) << "libonnx-testdata not found at " << apx_node::node_dir();
}

// The rounding oracle itself, on values whose roundings are known by construction.
TEST(NodeConformanceOracle, RoundToNearestEven) {
  EXPECT_EQ(round_to(1.0 + std::ldexp(1.0, -11), APX_DT_F16), 1.0);                      // tie -> even
  EXPECT_EQ(round_to(1.0 + 3 * std::ldexp(1.0, -11), APX_DT_F16), 1.0 + std::ldexp(1.0, -9));  // tie -> even
  EXPECT_EQ(round_to(65504.0, APX_DT_F16), 65504.0);
  EXPECT_EQ(round_to(65519.99, APX_DT_F16), 65504.0);
  EXPECT_TRUE(std::isinf(round_to(65520.0, APX_DT_F16)));                                 // max + half ulp
  EXPECT_EQ(round_to(std::ldexp(1.0, -25), APX_DT_F16), 0.0);                              // half the min subnormal
  EXPECT_EQ(round_to(std::ldexp(3.0, -26), APX_DT_F16), std::ldexp(1.0, -24));
  EXPECT_EQ(round_to(1.0 + std::ldexp(1.0, -8), APX_DT_BF16), 1.0);
  EXPECT_EQ(round_to(1.0 + std::ldexp(3.0, -9), APX_DT_BF16), 1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(round_to(1.0 / 3.0, APX_DT_F32), (double)(1.0f / 3.0f));
  EXPECT_EQ(ulp_of(1.0, APX_DT_F16), std::ldexp(1.0, -10));
  EXPECT_EQ(ulp_of(0.0, APX_DT_F16), std::ldexp(1.0, -24));
  EXPECT_EQ(ulp_of(3.0, APX_DT_BF16), std::ldexp(1.0, -6));
}

// The half-mode check has the power it claims: on a K = 64 dot-product kernel (MatMul) with
// fp16 inputs, the correctly rounded result passes everywhere, while a result one ulp off,
// a truncating store, or accumulation in fp16 is caught.
TEST(NodeConformanceOracle, IntervalCheckCatchesHalfPathBugs) {
  const int M = 16, K = 64, N = 16;
  std::vector<double> a(M * K), b(K * N), r64(M * N);
  std::vector<float> a32(M * K), b32(K * N), r32(M * N);
  uint64_t st = 12345;
  auto uniform = [&st]() {  // xorshift64*, in [-1, 1)
    st ^= st >> 12, st ^= st << 25, st ^= st >> 27;
    return (double)((st * 2685821657736338717ull) >> 11) * std::ldexp(1.0, -52) - 1.0;
  };
  for (int i = 0; i < M * K; i++) a32[i] = (float)(a[i] = round_to(uniform(), APX_DT_F16));
  for (int i = 0; i < K * N; i++) b32[i] = (float)(b[i] = round_to(uniform(), APX_DT_F16));
  auto run = [&](void *x, void *y, void *z, ApxDType t) {
    ApxTensor in[2] = {{x, t, 2, {M, K}}, {y, t, 2, {K, N}}}, out[1] = {{z, t, 2, {M, N}}};
    ApxCpuCtx ctx;
    apx_cpu_ctx_init(&ctx);
    ASSERT_EQ(apx_cpu_run(&ctx, APX_OP_MatMul, nullptr, in, 2, out, 1), APX_STATUS_OK) << ctx.err;
  };
  run(a.data(), b.data(), r64.data(), APX_DT_F64);
  run(a32.data(), b32.data(), r32.data(), APX_DT_F32);
  int fail[4] = {0, 0, 0, 0};  // correct, one ulp off, truncated, fp16 accumulation
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      const double r = r64[i * N + j], e = std::fabs(r32[i * N + j] - r), h = round_to(r32[i * N + j], APX_DT_F16);
      double trunc = h;
      if (std::fabs(trunc) > std::fabs((double)r32[i * N + j])) trunc -= std::copysign(ulp_of(h, APX_DT_F16), h);
      double acc = 0;
      for (int k = 0; k < K; k++) acc = round_to(acc + a[i * K + k] * b[k * N + j], APX_DT_F16);
      const double cand[4] = {h, h + ulp_of(h, APX_DT_F16), trunc, acc};
      for (int c = 0; c < 4; c++) {
        bool undecided;
        fail[c] += !within_rounding(cand[c], r, e, APX_DT_F16, &undecided);
      }
    }
  EXPECT_EQ(fail[0], 0);
  EXPECT_GT(fail[1], M * N * 9 / 10);
  EXPECT_GT(fail[2], M * N / 4);
  EXPECT_GT(fail[3], M * N / 4);
  std::printf("interval check on %d fp16 dot products: correct %d failed, one ulp off %d, truncated %d, fp16 "
              "accumulation %d\n", M * N, fail[0], fail[1], fail[2], fail[3]);
}

class SummaryPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    for (int m = 0; m < 3; m++) {
      const ModeSummary &s = g_sum[m];
      if (s.in_scope == 0) continue;
      std::printf("\nONNX node conformance %s: %d in-scope v1 tests (%d more excluded): %d passed, %d failed, %d skipped",
                  kModeName[m], s.in_scope, g_excluded, s.passed, s.failed, s.skipped);
      const char *sep = " (";
      for (const auto &r : s.skip_reasons) {
        std::printf("%s%d: %s", sep, r.second, r.first.c_str());
        sep = "; ";
      }
      std::printf("%s", s.skip_reasons.empty() ? "" : ")");
      if (s.by_definition)
        std::printf("; %d of the passed checked by the op's definition instead of a reference that cannot be "
                    "reproduced (training-mode Dropout, bfloat16 references truncated by ONNX 1.12)",
                    s.by_definition);
      if (m != kFp32) {
        std::printf("; %lld kernels checked against float64: %lld %s output elements (largest error %.3f ulp, in "
                    "%s; %lld undecided by fp32), %lld fp32/integer/bool output elements",
                    (long long)s.kernels_checked, (long long)s.elements, kModeName[m], s.max_ulps,
                    s.max_ulps_where.c_str(), (long long)s.undecided, (long long)s.elements_other);
        if (s.inputs_rounded) std::printf(", %lld data-input elements rounded", (long long)s.inputs_rounded);
      }
      std::printf("\n");
    }
  }
};

const ::testing::Environment *const kSummary = ::testing::AddGlobalTestEnvironment(new SummaryPrinter);

}  // namespace
