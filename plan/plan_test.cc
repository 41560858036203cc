// plan_test.cc - plan file: every field round-trips; corrupt, truncated, wrong-version and
// inconsistent plans are rejected with one-line errors (exit code 2).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
#include "plan/plan.h"
#include "plan/plan.pb-c.h"
#include "plan/plan_write.h"
}

namespace {

std::string tmpdir() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::vector<uint8_t> slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void spit(const std::string &path, const std::vector<uint8_t> &b) {
  FILE *f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!b.empty()) {
    ASSERT_EQ(fwrite(b.data(), 1, b.size(), f), b.size());
  }
  fclose(f);
}

// A plan using every field with non-default values.
struct Sample {
  ApxPlan p;
  std::vector<uint8_t> w_data, b_data, m_data;
  Sample() {
    apx_plan_init(&p);
    p.model_name = "sample.onnx";
    p.model_crc32c = 0xdeadbeef;
    p.model_bytes = 123456789012ull;
    ApxPlanOptions &o = p.opts;
    o.opt_level = 2;
    o.half = APX_DT_BF16;
    o.cast_model_type = APX_DT_BF16;
    o.keep_batchnorm_fp32 = 1;
    o.master_weights = 1;
    o.training = 1;
    o.loss_scale_mode = 1;
    o.loss_scale = 65536.f;
    o.min_loss_scale = 0.25f;
    o.max_loss_scale = 16777216.f;
    o.scale_window = 2000;
    o.hysteresis = 3;
    o.optimizer = APX_OPTIM_ADAMW;
    o.lr = 1e-3f;
    o.momentum = 0.9f;
    o.beta1 = 0.85f;
    o.beta2 = 0.995f;
    o.eps = 1e-8f;
    o.weight_decay = 0.01f;
    o.nesterov = 1;
    o.clip_grad_norm = 1.5f;
    o.accumulate = 4;
    o.warmup_steps = 100;
    o.schedule = 1;
    o.total_steps = 5000000000ll;
    o.seed = 0x123456789abcdefull;
    o.bucket_mb = 25.5;
    o.first_bucket_mb = 1.25;
    o.allreduce_fp32 = 1;
    o.grad_predivide = 8.f;
    o.sync_bn = 1;

    // A plan the kernels could run (apx_plan_check_kernels reads every kernel at load).
    ApxPlanBuffer *b = apx_plan_alloc_buffers(&p, 14);
    auto buf = [&](int i, const char *name, ApxValueKind kind, ApxDType dt,
                   std::vector<int64_t> dims, ApxMemRegion r, int64_t off) {
      b[i].name = name;
      b[i].kind = kind;
      b[i].dtype = dt;
      b[i].rank = (int32_t)dims.size();
      int64_t n = 1;
      for (size_t k = 0; k < dims.size(); k++) b[i].dims[k] = dims[k], n *= dims[k];
      b[i].region = r;
      b[i].offset = off;
      b[i].bytes = n * (int64_t)apx_dtype_size(dt);
    };
    buf(0, "x", APX_VAL_INPUT, APX_DT_F32, {2, 3}, APX_MEM_ARENA, 0);
    buf(1, "W", APX_VAL_PARAM, APX_DT_F32, {3, 4}, APX_MEM_PERSISTENT, 0);
    buf(2, "b", APX_VAL_CONST, APX_DT_F16, {4}, APX_MEM_PERSISTENT, 64);
    buf(3, "y", APX_VAL_ACTIVATION, APX_DT_F32, {2, 4}, APX_MEM_ARENA, 64);
    buf(4, "loss", APX_VAL_ACTIVATION, APX_DT_F32, {}, APX_MEM_ARENA, 128);
    buf(5, "W_grad", APX_VAL_ACTIVATION, APX_DT_F32, {3, 4}, APX_MEM_ARENA, 192);
    buf(6, "y_flat", APX_VAL_ACTIVATION, APX_DT_F32, {8}, APX_MEM_ARENA, 64);
    buf(7, "W_master", APX_VAL_STATE, APX_DT_F32, {3, 4}, APX_MEM_PERSISTENT, 128);
    buf(8, "apx_found_inf", APX_VAL_STATE, APX_DT_F32, {1}, APX_MEM_PERSISTENT, 192);
    buf(9, "apx_grad_norm_sq", APX_VAL_STATE, APX_DT_F32, {1}, APX_MEM_PERSISTENT, 256);
    buf(10, "apx_lr", APX_VAL_STATE, APX_DT_F32, {1}, APX_MEM_PERSISTENT, 320);
    buf(11, "apx_optimizer_step", APX_VAL_STATE, APX_DT_I64, {1}, APX_MEM_PERSISTENT, 384);
    buf(12, "W.exp_avg", APX_VAL_STATE, APX_DT_F32, {3, 4}, APX_MEM_PERSISTENT, 448);
    buf(13, "W.exp_avg_sq", APX_VAL_STATE, APX_DT_F32, {3, 4}, APX_MEM_PERSISTENT, 512);
    b[3].flags = APX_VALF_GRAPH_OUTPUT;
    b[4].flags = APX_VALF_GRAPH_OUTPUT | APX_VALF_LOSS;
    b[5].flags = APX_VALF_GRAD;
    b[5].origin = 1;
    b[6].alias_of = 3;
    b[7].flags = APX_VALF_MASTER | APX_VALF_FROZEN;
    b[7].origin = 1;
    for (int i = 0; i < 48; i++) w_data.push_back((uint8_t)(i * 7 + 1));
    for (int i = 0; i < 8; i++) b_data.push_back((uint8_t)(0xa0 + i));
    for (int i = 0; i < 48; i++) m_data.push_back((uint8_t)(255 - i));
    b[1].data = w_data.data();
    b[2].data = b_data.data();
    b[7].data = m_data.data();

    apx_plan_alloc_kernels(&p, 5);
    ApxAttrGemm gemm = {1.5f, 0.5f, 0, 0};
    int32_t k0i[] = {0, 1, 2}, k0o[] = {3};
    apx_plan_set_kernel(&p, 0, APX_OP_Gemm, "gemm0", APX_SEC_FORWARD, &gemm, 3, k0i, 1, k0o);
    p.kernels[0].compute = APX_DT_BF16;
    ApxAttrReshape rs = {1};
    int32_t k1i[] = {3, -1}, k1o[] = {6};
    apx_plan_set_kernel(&p, 1, APX_OP_Reshape, "flat", APX_SEC_FORWARD, &rs, 2, k1i, 1, k1o);
    ApxAttrReduce red = {};
    red.n_axes = 1;
    red.axes[0] = 0;
    red.keepdims = 0;
    red.noop_with_empty_axes = 1;
    int32_t k2i[] = {6, -1}, k2o[] = {4};
    apx_plan_set_kernel(&p, 2, APX_OP_ReduceMean, "mean", APX_SEC_FORWARD, &red, 2, k2i, 1, k2o);
    p.kernels[2].compute = APX_DT_F32;
    ApxAttrFusedMatMul fm = {1, 0, 0.25f};
    int32_t k3i[] = {0, 3}, k3o[] = {5};
    apx_plan_set_kernel(&p, 3, APX_OP_FusedMatMul, "gemm0_grad", APX_SEC_BACKWARD, &fm, 2, k3i, 1, k3o);
    ApxAttrOptimizer opt = {};
    opt.kind = APX_OPTIM_ADAMW;
    opt.n_params = 1;
    opt.lr = 0.001f;
    opt.beta1 = 0.9f;
    int32_t k4i[] = {8, 9, 10, 11, 7, 5, 12, 13};
    apx_plan_set_kernel(&p, 4, APX_OP_OptimizerStep, "adamw", APX_SEC_OPTIMIZER, &opt, 8, k4i, 0, nullptr);

    p.n_decisions = 2;
    p.decisions = (ApxPlanDecision *)apx_arena_alloc(&p.arena, 2 * sizeof(ApxPlanDecision));
    p.decisions[0] = {"gemm0", "Gemm", APX_DT_BF16, 3, "allow-list", "Gemm is on the half list", 2};
    p.decisions[1] = {"mean", "ReduceMean", APX_DT_F32, 5, "deny-list", "", 1};
    p.n_buckets = 1;
    p.buckets = (ApxPlanBucket *)apx_arena_alloc(&p.arena, sizeof(ApxPlanBucket));
    static int32_t members[] = {5};
    p.buckets[0] = {0, APX_DT_F32, 1, members, 48, 3};
    static int32_t ins[] = {0}, outs[] = {3, 4};
    p.inputs = ins;
    p.n_inputs = 1;
    p.outputs = outs;
    p.n_outputs = 2;
    p.loss = 4;
    p.mem = {256, 200, 320, 576};
    apx_plan_layout_data(&p);
  }
  ~Sample() { apx_plan_free(&p); }
};

std::string write_sample(const char *name) {
  Sample s;
  ApxDiag d;
  apx_diag_init(&d);
  std::string path = tmpdir() + "/" + name;
  EXPECT_EQ(apx_plan_write(&s.p, path.c_str(), &d), 0) << d.msg;
  return path;
}

// Reads path; returns the diag (code 0 on success).
ApxDiag try_read(const std::string &path) {
  ApxPlan p;
  apx_plan_init(&p);
  ApxDiag d;
  apx_diag_init(&d);
  int rc = apx_plan_read(&p, path.c_str(), &d);
  EXPECT_EQ(rc == 0, d.code == 0);
  apx_plan_free(&p);
  return d;
}

// Replaces a string field of an unpacked message (allocated by protobuf-c with malloc).
void set_str(char **field, const char *v) {
  free(*field);
  *field = strdup(v);
}

// Rewrites the metadata of a plan file through protobuf with a fresh, valid header and
// checksum, so that only the semantic checks can reject it.
std::string rewrite_meta(const std::string &src, const char *name,
                         const std::function<void(Apexc__Plan *)> &mutate) {
  std::vector<uint8_t> f = slurp(src);
  uint64_t meta_len, data_off, data_len;
  memcpy(&meta_len, &f[24], 8);
  memcpy(&data_off, &f[32], 8);
  memcpy(&data_len, &f[40], 8);
  Apexc__Plan *m = apexc__plan__unpack(nullptr, meta_len, &f[64]);
  EXPECT_NE(m, nullptr);
  mutate(m);
  std::vector<uint8_t> meta(apexc__plan__get_packed_size(m));
  apexc__plan__pack(m, meta.data());
  apexc__plan__free_unpacked(m, nullptr);
  uint64_t new_off = (64 + meta.size() + 63) / 64 * 64;
  std::vector<uint8_t> out(new_off + data_len, 0);
  memcpy(out.data(), f.data(), 64);
  memcpy(&out[64], meta.data(), meta.size());
  memcpy(&out[new_off], &f[data_off], data_len);
  uint64_t ml = meta.size();
  memcpy(&out[24], &ml, 8);
  memcpy(&out[32], &new_off, 8);
  memset(&out[48], 0, 4);
  uint32_t crc = apx_crc32c(0, out.data(), out.size());
  memcpy(&out[48], &crc, 4);
  std::string path = tmpdir() + "/" + name;
  spit(path, out);
  return path;
}

}  // namespace

TEST(Crc32c, KnownValueAndChaining) {
  const char *s = "123456789";
  EXPECT_EQ(apx_crc32c(0, s, 9), 0xE3069283u);
  EXPECT_EQ(apx_crc32c(apx_crc32c(0, s, 4), s + 4, 5), 0xE3069283u);
  std::vector<uint8_t> big(100003);
  for (size_t i = 0; i < big.size(); i++) big[i] = (uint8_t)(i * 31 + (i >> 8));
  uint32_t whole = apx_crc32c(0, big.data(), big.size());
  uint32_t parts = apx_crc32c(apx_crc32c(0, big.data(), 777), big.data() + 777, big.size() - 777);
  EXPECT_EQ(whole, parts);
}

TEST(Plan, RoundTripsEveryField) {
  Sample s;
  ApxDiag d;
  apx_diag_init(&d);
  std::string path = tmpdir() + "/roundtrip.apx";
  ASSERT_EQ(apx_plan_write(&s.p, path.c_str(), &d), 0) << d.msg;
  ApxPlan r;
  apx_plan_init(&r);
  ASSERT_EQ(apx_plan_read(&r, path.c_str(), &d), 0) << d.msg;
  const ApxPlan &a = s.p;
  EXPECT_EQ(r.format_version, APX_PLAN_FORMAT_VERSION);
  EXPECT_EQ(r.attrs_abi, (uint32_t)APX_ATTRS_ABI);
  EXPECT_STREQ(r.producer, APX_PLAN_PRODUCER);
  EXPECT_STREQ(r.model_name, "sample.onnx");
  EXPECT_EQ(r.model_crc32c, 0xdeadbeefu);
  EXPECT_EQ(r.model_bytes, 123456789012ull);
  EXPECT_EQ(0, memcmp(&r.opts, &a.opts, sizeof a.opts)) << "options differ";
  ASSERT_EQ(r.n_bufs, a.n_bufs);
  for (int i = 0; i < a.n_bufs; i++) {
    const ApxPlanBuffer &x = a.bufs[i], &y = r.bufs[i];
    SCOPED_TRACE(x.name);
    EXPECT_STREQ(y.name, x.name);
    EXPECT_EQ(y.kind, x.kind);
    EXPECT_EQ(y.flags, x.flags);
    EXPECT_EQ(y.dtype, x.dtype);
    ASSERT_EQ(y.rank, x.rank);
    for (int k = 0; k < x.rank; k++) EXPECT_EQ(y.dims[k], x.dims[k]);
    EXPECT_EQ(y.region, x.region);
    EXPECT_EQ(y.offset, x.offset);
    EXPECT_EQ(y.bytes, x.bytes);
    EXPECT_EQ(y.data_offset, x.data_offset);
    EXPECT_EQ(y.data_len, x.data_len);
    EXPECT_EQ(y.alias_of, x.alias_of);
    EXPECT_EQ(y.origin, x.origin);
    ASSERT_EQ(y.data != nullptr, x.data != nullptr);
    if (x.data) {
      EXPECT_EQ(0, memcmp(y.data, x.data, x.data_len));
      EXPECT_EQ((uintptr_t)y.data % 64, 0u);  // aligned in the mapped file
    }
  }
  ASSERT_EQ(r.n_kernels, a.n_kernels);
  for (int k = 0; k < a.n_kernels; k++) {
    const ApxPlanKernel &x = a.kernels[k], &y = r.kernels[k];
    SCOPED_TRACE(x.node);
    EXPECT_EQ(y.op, x.op);
    EXPECT_STREQ(y.node, x.node);
    EXPECT_EQ(y.section, x.section);
    EXPECT_EQ(y.compute, x.compute);
    EXPECT_EQ(0, memcmp(y.attrs, x.attrs, apx_op_info(x.op)->attrs_size));
    ASSERT_EQ(y.n_in, x.n_in);
    ASSERT_EQ(y.n_out, x.n_out);
    for (int i = 0; i < x.n_in; i++) EXPECT_EQ(y.in[i], x.in[i]);
    for (int i = 0; i < x.n_out; i++) EXPECT_EQ(y.out[i], x.out[i]);
  }
  ASSERT_EQ(r.n_decisions, 2);
  for (int i = 0; i < 2; i++) {
    EXPECT_STREQ(r.decisions[i].node, a.decisions[i].node);
    EXPECT_STREQ(r.decisions[i].op, a.decisions[i].op);
    EXPECT_EQ(r.decisions[i].decision, a.decisions[i].decision);
    EXPECT_EQ(r.decisions[i].rule_code, a.decisions[i].rule_code);
    EXPECT_STREQ(r.decisions[i].rule, a.decisions[i].rule);
    EXPECT_STREQ(r.decisions[i].detail, a.decisions[i].detail);
    EXPECT_EQ(r.decisions[i].casts_added, a.decisions[i].casts_added);
  }
  ASSERT_EQ(r.n_buckets, 1);
  EXPECT_EQ(r.buckets[0].id, 0);
  EXPECT_EQ(r.buckets[0].dtype, APX_DT_F32);
  ASSERT_EQ(r.buckets[0].n_members, 1);
  EXPECT_EQ(r.buckets[0].members[0], 5);
  EXPECT_EQ(r.buckets[0].bytes, 48);
  EXPECT_EQ(r.buckets[0].ready_at, 3);
  ASSERT_EQ(r.n_inputs, 1);
  EXPECT_EQ(r.inputs[0], 0);
  ASSERT_EQ(r.n_outputs, 2);
  EXPECT_EQ(r.outputs[0], 3);
  EXPECT_EQ(r.outputs[1], 4);
  EXPECT_EQ(r.loss, 4);
  EXPECT_EQ(0, memcmp(&r.mem, &a.mem, sizeof a.mem));
  EXPECT_EQ(r.data_bytes, a.data_bytes);
  // sections are contiguous ranges
  EXPECT_EQ(r.sec_begin[APX_SEC_FORWARD], 0);
  EXPECT_EQ(r.sec_end[APX_SEC_FORWARD], 3);
  EXPECT_EQ(r.sec_begin[APX_SEC_BACKWARD], 3);
  EXPECT_EQ(r.sec_end[APX_SEC_BACKWARD], 4);
  EXPECT_EQ(r.sec_begin[APX_SEC_OPTIMIZER], 4);
  EXPECT_EQ(r.sec_end[APX_SEC_OPTIMIZER], 5);
  EXPECT_EQ(apx_plan_find_buffer(&r, "W_master"), 7);
  EXPECT_EQ(apx_plan_find_buffer(&r, "nope"), -1);

  // the dump shows the main facts readably
  char *text = nullptr;
  size_t len = 0;
  FILE *mf = open_memstream(&text, &len);
  apx_plan_dump(&r, mf);
  fclose(mf);
  std::string dump(text, len);
  free(text);
  for (const char *want : {"Gemm", "gemm0", "alpha=1.5", "W_master", "master", "persistent@128",
                           "alias-of #3", "OptimizerStep", "backward", "bucket 0", "allow-list",
                           "lower bound", "loss: loss"})
    EXPECT_NE(dump.find(want), std::string::npos) << want << "\n" << dump;
  // names, not enum numbers (issue 13): optimizer kind, lr schedule, switches
  for (const char *want : {"optimizer: adamw ", "kind=adamw", "lr_schedule=cosine", "master_weights=on",
                           "nesterov=on", "training=on", "allreduce_fp32=on"})
    EXPECT_NE(dump.find(want), std::string::npos) << want << "\n" << dump;
  for (const char *gone : {"kind 1", "kind=1", "schedule=0", "training=1"})
    EXPECT_EQ(dump.find(gone), std::string::npos) << gone << "\n" << dump;
  apx_plan_free(&r);
}

TEST(Plan, WriteIsAtomicAndReplaces) {
  std::string path = write_sample("atomic.apx");
  std::string again = write_sample("atomic.apx");
  EXPECT_EQ(try_read(path).code, 0);
  // no temporary file left behind
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  EXPECT_NE(access(tmp.c_str(), F_OK), 0);
}

TEST(Plan, EveryCorruptByteIsRejected) {
  std::string path = write_sample("corrupt_src.apx");
  std::vector<uint8_t> good = slurp(path);
  ASSERT_GT(good.size(), 256u);
  std::string bad_path = tmpdir() + "/corrupt.apx";
  for (size_t i = 0; i < good.size(); i++) {
    for (uint8_t flip : {0x01, 0x80}) {
      std::vector<uint8_t> b = good;
      b[i] ^= flip;
      spit(bad_path, b);
      ApxDiag d = try_read(bad_path);
      ASSERT_EQ(d.code, APX_EXIT_BAD_INPUT) << "byte " << i << " ^ " << (int)flip << " accepted";
      ASSERT_EQ(strchr(d.msg, '\n'), nullptr);
      ASSERT_EQ(strncmp(d.msg, bad_path.c_str(), bad_path.size()), 0) << d.msg;
    }
  }
}

TEST(Plan, EveryTruncationIsRejected) {
  std::string path = write_sample("trunc_src.apx");
  std::vector<uint8_t> good = slurp(path);
  std::string bad_path = tmpdir() + "/trunc.apx";
  for (size_t n = 0; n < good.size(); n++) {
    spit(bad_path, std::vector<uint8_t>(good.begin(), good.begin() + n));
    ApxDiag d = try_read(bad_path);
    ASSERT_EQ(d.code, APX_EXIT_BAD_INPUT) << "truncated at " << n << " accepted";
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  spit(bad_path, longer);
  EXPECT_EQ(try_read(bad_path).code, APX_EXIT_BAD_INPUT);
  EXPECT_EQ(try_read(tmpdir() + "/does_not_exist.apx").code, APX_EXIT_BAD_INPUT);
}

TEST(Plan, WrongFormatVersionIsRejectedByName) {
  std::string path = write_sample("version_src.apx");
  std::vector<uint8_t> f = slurp(path);
  uint32_t v = APX_PLAN_FORMAT_VERSION + 1;
  memcpy(&f[8], &v, 4);
  memset(&f[48], 0, 4);
  uint32_t crc = apx_crc32c(0, f.data(), f.size());  // a well-formed file of another version
  memcpy(&f[48], &crc, 4);
  std::string bad_path = tmpdir() + "/version.apx";
  spit(bad_path, f);
  ApxDiag d = try_read(bad_path);
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
  EXPECT_NE(std::string(d.msg).find("format version " + std::to_string(v)), std::string::npos) << d.msg;
}

TEST(Plan, NotAPlanIsRejected) {
  std::string bad_path = tmpdir() + "/notaplan.apx";
  std::string text = "this is a text file that is long enough to have a header of 64 bytes...";
  spit(bad_path, std::vector<uint8_t>(text.begin(), text.end()));
  ApxDiag d = try_read(bad_path);
  EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT);
  EXPECT_NE(std::string(d.msg).find("not an apexc plan"), std::string::npos) << d.msg;
}

// Files with a valid checksum whose metadata breaks the contract.
TEST(Plan, SemanticErrorsAreRejected) {
  std::string src = write_sample("sem_src.apx");
  struct Case {
    const char *what;
    std::function<void(Apexc__Plan *)> mutate;
  } cases[] = {
      {"unknown op", [](Apexc__Plan *m) { set_str(&m->kernels[0]->op, "NoSuchOp"); }},
      {"attributes are", [](Apexc__Plan *m) { m->kernels[0]->attrs.len -= 4; }},
      {"refers to buffer", [](Apexc__Plan *m) { m->kernels[1]->inputs[0] = 99; }},
      {"refers to buffer", [](Apexc__Plan *m) { m->kernels[0]->outputs[0] = -2; }},
      {"attribute ABI", [](Apexc__Plan *m) { m->attrs_abi = APX_ATTRS_ABI + 1; }},
      {"outside the data section", [](Apexc__Plan *m) { m->buffers[1]->data_offset = 1u << 20; }},
      {"outside the persistent", [](Apexc__Plan *m) { m->buffers[7]->offset = 1 << 20; }},
      {"outside the arena", [](Apexc__Plan *m) { m->memory->arena_bytes = 100; }},
      {"shape and dtype give", [](Apexc__Plan *m) { m->buffers[3]->bytes = 31; }},
      {"has id", [](Apexc__Plan *m) { m->buffers[2]->id = 5; }},
      {"alias", [](Apexc__Plan *m) { m->buffers[6]->alias_of = 1; }},
      {"unsupported dtype", [](Apexc__Plan *m) { m->buffers[0]->dtype = 8; }},
      {"backward kernel after", [](Apexc__Plan *m) { m->kernels[3]->section = 1, m->kernels[4]->section = 1, m->kernels[2]->section = 2; }},
      {"compile-time only",
       [](Apexc__Plan *m) {
         set_str(&m->kernels[1]->op, "Shape");
         free(m->kernels[1]->attrs.data);
         m->kernels[1]->attrs.data = (uint8_t *)calloc(1, sizeof(ApxAttrShape));
         m->kernels[1]->attrs.len = sizeof(ApxAttrShape);
       }},
      {"ready_at", [](Apexc__Plan *m) { m->buckets[0]->ready_at = 9; }},
      {"not an input buffer", [](Apexc__Plan *m) { m->inputs[0] = 1; }},
      {"loss refers", [](Apexc__Plan *m) { m->loss = 99; }},
      {"metadata version", [](Apexc__Plan *m) { m->format_version = 7; }},
  };
  int i = 0;
  for (const Case &c : cases) {
    std::string path = rewrite_meta(src, ("sem" + std::to_string(i++) + ".apx").c_str(), c.mutate);
    ApxDiag d = try_read(path);
    EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT) << c.what;
    EXPECT_NE(std::string(d.msg).find(c.what), std::string::npos) << c.what << ": " << d.msg;
  }
  // the unmutated rewrite is accepted (the helper itself is sound)
  EXPECT_EQ(try_read(rewrite_meta(src, "sem_ok.apx", [](Apexc__Plan *) {})).code, 0);
}

// The two-part check emit_plan runs (before and after the arena offsets settle) accepts and
// refuses what the whole check does: arena placement faults only in the second part, every
// other fault (a persistent buffer's placement included) in the first.
TEST(Plan, ValidationInTwoPartsSplitsAtTheArenaPlacement) {
  ApxDiag d;
  apx_diag_init(&d);
  {
    Sample s;
    EXPECT_EQ(apx_plan_validate_unplaced(&s.p, &d), 0) << d.msg;
    EXPECT_EQ(apx_plan_validate_placed(&s.p, &d), 0) << d.msg;
    EXPECT_EQ(apx_plan_validate(&s.p, &d), 0) << d.msg;
  }
  struct Case {
    const char *what;
    std::function<void(ApxPlan *)> mutate;
    bool placement;  // refused by the second part (else by the first)
  } cases[] = {
      {"outside the arena", [](ApxPlan *p) { p->bufs[3].offset = 1 << 20; }, true},
      {"outside the arena", [](ApxPlan *p) { p->bufs[0].offset = -1; }, true},
      {"misaligned", [](ApxPlan *p) { p->bufs[5].offset = 194; }, true},
      {"not inside the buffer it aliases", [](ApxPlan *p) { p->bufs[6].offset = 96; }, true},
      {"negative memory summary", [](ApxPlan *p) { p->mem.arena_bytes = -1; }, true},
      {"outside the persistent", [](ApxPlan *p) { p->bufs[7].offset = 1 << 20; }, false},
      {"alias_of", [](ApxPlan *p) { p->bufs[6].alias_of = 99; }, false},
      {"shape and dtype give", [](ApxPlan *p) { p->bufs[3].bytes = 31; }, false},
      {"refers to buffer", [](ApxPlan *p) { p->kernels[1].in[0] = 99; }, false},
  };
  for (const Case &c : cases) {
    Sample s;
    c.mutate(&s.p);
    apx_diag_init(&d);
    int first = apx_plan_validate_unplaced(&s.p, &d);
    std::string msg1 = d.msg;
    EXPECT_EQ(first, c.placement ? 0 : -1) << c.what << ": " << msg1;
    if (first == 0) {
      apx_diag_init(&d);
      EXPECT_EQ(apx_plan_validate_placed(&s.p, &d), -1) << c.what;
      EXPECT_NE(std::string(d.msg).find(c.what), std::string::npos) << c.what << ": " << d.msg;
    } else {
      EXPECT_NE(msg1.find(c.what), std::string::npos) << c.what << ": " << msg1;
    }
    apx_diag_init(&d);
    EXPECT_EQ(apx_plan_validate(&s.p, &d), -1) << c.what;
    EXPECT_NE(std::string(d.msg).find(c.what), std::string::npos) << c.what << ": " << d.msg;
  }
}

TEST(Plan, InvalidPlanIsNotWritten) {
  Sample s;
  s.p.kernels[2].in[0] = 42;
  ApxDiag d;
  apx_diag_init(&d);
  std::string path = tmpdir() + "/invalid_write.apx";
  unlink(path.c_str());
  EXPECT_EQ(apx_plan_write(&s.p, path.c_str(), &d), -1);
  EXPECT_NE(std::string(d.msg).find("kernel 2 ('mean'"), std::string::npos) << d.msg;
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

// The kernel checks run on a thread beside the write (plan.c): a plan that fails them (here
// a kernel reading what only a later kernel writes, which the format check cannot see)
// leaves an existing file at the path as it was and no temporary file, through both entry
// points.
TEST(Plan, PlanFailingTheKernelChecksReplacesNothing) {
  std::string dir = tmpdir() + "/kernel_check_write";
  mkdir(dir.c_str(), 0755);
  std::string path = dir + "/plan.apx";
  {
    Sample ok;
    ApxDiag d;
    apx_diag_init(&d);
    ASSERT_EQ(apx_plan_write(&ok.p, path.c_str(), &d), 0) << d.msg;
  }
  std::ifstream f0(path, std::ios::binary);
  std::string before((std::istreambuf_iterator<char>(f0)), std::istreambuf_iterator<char>());
  for (int validated = 0; validated < 2; validated++) {
    Sample s;
    s.p.kernels[2].in[0] = 5;  // W_grad: written by a later kernel
    ApxDiag d;
    apx_diag_init(&d);
    int rc = validated ? apx_plan_write_validated(&s.p, path.c_str(), &d)
                       : apx_plan_write(&s.p, path.c_str(), &d);
    EXPECT_EQ(rc, -1);
    EXPECT_EQ(d.code, APX_EXIT_BAD_INPUT) << d.msg;
    EXPECT_NE(std::string(d.msg).find(path + ": invalid plan: kernel 2 ('mean'"), std::string::npos)
        << d.msg;
    std::ifstream f(path, std::ios::binary);
    std::string after((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(after, before);
    std::string ls = dir + "/plan.apx.tmp." + std::to_string((long)getpid());
    EXPECT_NE(access(ls.c_str(), F_OK), 0) << ls;
  }
}

// Records encoded ahead (apexc encodes them while the packing runs) are put as they are: the
// file is the same byte for byte wherever the encoding stopped (no record, some kernels,
// every kernel and some decisions, all), in whatever steps it went.
TEST(PlanWrite, RecordsEncodedAheadMakeTheSameFile) {
  std::string dir = tmpdir() + "/ahead";
  mkdir(dir.c_str(), 0755);
  ApxDiag d;
  apx_diag_init(&d);
  std::vector<uint8_t> want;
  {
    Sample s;
    std::string path = dir + "/plain.apx";
    ASSERT_EQ(apx_plan_write(&s.p, path.c_str(), &d), 0) << d.msg;
    want = slurp(path);
  }
  Sample probe;
  const int total = probe.p.n_kernels + probe.p.n_decisions;
  ASSERT_GE(probe.p.n_kernels, 2);
  ASSERT_GE(probe.p.n_decisions, 2);
  for (int step : {1, 2, 1000})
    for (int stop = 0; stop <= total; stop++) {
      Sample s;
      ASSERT_EQ(apx_plan_validate(&s.p, &d), 0) << d.msg;
      ApxPlanAhead ahead;
      apx_plan_ahead_init(&ahead);
      int done = 0;
      while (!done && ahead.n_kernels + ahead.n_decisions + step <= stop)
        done = apx_plan_ahead_step(&ahead, &s.p, step);
      EXPECT_EQ(done, ahead.n_kernels + ahead.n_decisions == total) << "step " << step;
      EXPECT_EQ(ahead.n_decisions > 0, ahead.n_kernels == s.p.n_kernels && ahead.n_decisions > 0);
      std::string path = dir + "/ahead.apx";
      ASSERT_EQ(apx_plan_write_validated_ahead(&s.p, &ahead, path.c_str(), &d), 0) << d.msg;
      EXPECT_EQ(slurp(path), want) << "step " << step << ", " << ahead.n_kernels << " kernels and "
                                   << ahead.n_decisions << " decisions ahead";
      apx_plan_ahead_free(&ahead);
    }
  // a plan without decisions: its kernels are encoded ahead all the same
  Sample z, z2;
  z.p.n_decisions = z2.p.n_decisions = 0;
  std::string zp = dir + "/no_decisions.apx", zq = dir + "/no_decisions_ahead.apx";
  ASSERT_EQ(apx_plan_write(&z.p, zp.c_str(), &d), 0) << d.msg;
  ASSERT_EQ(apx_plan_validate(&z2.p, &d), 0) << d.msg;
  ApxPlanAhead ahead;
  apx_plan_ahead_init(&ahead);
  EXPECT_EQ(apx_plan_ahead_step(&ahead, &z2.p, 1000), 1);
  EXPECT_EQ(ahead.n_kernels, z2.p.n_kernels);
  ASSERT_EQ(apx_plan_write_validated_ahead(&z2.p, &ahead, zq.c_str(), &d), 0) << d.msg;
  EXPECT_EQ(slurp(zq), slurp(zp));
  apx_plan_ahead_free(&ahead);
}

TEST(Plan, BlobsRoundTripAfterTheBuffers) {
  Sample s;
  const char text[] = "an embedded model: any bytes \x00\x01\x02";
  ASSERT_EQ(apx_plan_add_blob(&s.p, "model.onnx", text, sizeof text), 0);
  ASSERT_EQ(apx_plan_add_blob(&s.p, "empty", nullptr, 0), 0);
  apx_plan_layout_data(&s.p);
  ApxDiag d;
  apx_diag_init(&d);
  std::string path = tmpdir() + "/blobs.apx";
  ASSERT_EQ(apx_plan_write(&s.p, path.c_str(), &d), 0) << d.msg;
  ApxPlan r;
  apx_plan_init(&r);
  ASSERT_EQ(apx_plan_read(&r, path.c_str(), &d), 0) << d.msg;
  ASSERT_EQ(r.n_blobs, 2);
  const ApxPlanBlob *b = apx_plan_find_blob(&r, "model.onnx");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->data_len, sizeof text);
  EXPECT_EQ(b->data_offset % APX_PLAN_ALIGN, 0u);
  for (int32_t i = 0; i < r.n_bufs; i++)  // placed after every buffer's bytes
    EXPECT_GE(b->data_offset, r.bufs[i].data_offset + r.bufs[i].data_len);
  EXPECT_EQ(0, memcmp(b->data, text, sizeof text));
  EXPECT_EQ(apx_plan_find_blob(&r, "empty")->data_len, 0u);
  EXPECT_EQ(apx_plan_find_blob(&r, "nope"), nullptr);
  for (int32_t i = 0; i < r.n_bufs; i++)  // buffers unchanged by the blobs
    if (s.p.bufs[i].data_len) {
      EXPECT_EQ(0, memcmp(r.bufs[i].data, s.p.bufs[i].data, s.p.bufs[i].data_len));
    }
  apx_plan_free(&r);
  // a blob range outside the data section is rejected
  s.p.blobs[0].data_offset = s.p.data_bytes;
  EXPECT_EQ(apx_plan_validate(&s.p, &d), -1);
  EXPECT_NE(std::string(d.msg).find("blob 0 ('model.onnx')"), std::string::npos) << d.msg;
}

// Format 2: a buffer derived at load from another's bytes (a half parameter from its fp32
// master) round-trips with no data of its own; broken derivations are refused; format 1 plans
// (no derived buffers) are still read.
TEST(Plan, DerivedBuffersRoundTripAndAreChecked) {
  Sample s;
  ApxPlanBuffer &w = s.p.bufs[1];  // W becomes the bf16 copy of W_master
  w.dtype = APX_DT_BF16;
  w.bytes = 24;
  w.data = nullptr;
  w.init_from = 7;
  apx_plan_layout_data(&s.p);
  ApxDiag d;
  apx_diag_init(&d);
  std::string path = tmpdir() + "/derived.apx";
  ASSERT_EQ(apx_plan_write(&s.p, path.c_str(), &d), 0) << d.msg;
  ApxPlan r;
  apx_plan_init(&r);
  ASSERT_EQ(apx_plan_read(&r, path.c_str(), &d), 0) << d.msg;
  EXPECT_EQ(r.bufs[1].init_from, 7);
  EXPECT_EQ(r.bufs[1].data_len, 0u);
  EXPECT_EQ(r.bufs[1].data, nullptr);
  for (int i = 0; i < r.n_bufs; i++) {
    EXPECT_EQ(r.bufs[i].init_from, i == 1 ? 7 : -1) << i;
  }
  char *dump = nullptr;
  size_t dump_len = 0;
  FILE *f = open_memstream(&dump, &dump_len);
  apx_plan_dump(&r, f);
  fclose(f);
  EXPECT_NE(std::string(dump).find("derived-from #7"), std::string::npos) << dump;
  free(dump);
  apx_plan_free(&r);

  struct Case {
    const char *what;
    std::function<void(Apexc__Plan *)> mutate;
  } cases[] = {
      {"derived entry 0 refers to buffers", [](Apexc__Plan *m) { m->derived[0]->from = 99; }},
      {"cannot be derived from buffer 5", [](Apexc__Plan *m) { m->derived[0]->from = 5; }},  // no data
      {"derived but not an unaliased persistent buffer", [](Apexc__Plan *m) { m->derived[0]->buffer = 2; }},
      {"cannot be derived", [](Apexc__Plan *m) { m->buffers[1]->dtype = APX_DT_F64; m->buffers[1]->bytes = 96; }},
      {"derived buffers in a format 1 plan", [](Apexc__Plan *m) { m->format_version = 1; }},
  };
  int i = 0;
  for (const Case &c : cases) {
    std::string bad = rewrite_meta(path, ("derived" + std::to_string(i++) + ".apx").c_str(), c.mutate);
    ApxDiag e = try_read(bad);
    EXPECT_EQ(e.code, APX_EXIT_BAD_INPUT) << c.what;
    EXPECT_NE(std::string(e.msg).find(c.what), std::string::npos) << c.what << ": " << e.msg;
  }

  Sample old;  // what the format 1 writer wrote: every initial byte stored
  old.p.format_version = 1;
  std::string v1 = tmpdir() + "/format1.apx";
  ASSERT_EQ(apx_plan_write(&old.p, v1.c_str(), &d), 0) << d.msg;
  ApxPlan r1;
  apx_plan_init(&r1);
  ASSERT_EQ(apx_plan_read(&r1, v1.c_str(), &d), 0) << d.msg;
  EXPECT_EQ(r1.format_version, 1u);
  EXPECT_EQ(r1.bufs[1].init_from, -1);
  EXPECT_EQ(r1.bufs[1].data_len, 48u);
  apx_plan_free(&r1);
}

TEST(Crc32c, CombineEqualsTheWhole) {
  std::vector<uint8_t> big(300007);
  for (size_t i = 0; i < big.size(); i++) big[i] = (uint8_t)(i * 131 + (i >> 9));
  uint32_t whole = apx_crc32c(0, big.data(), big.size());
  for (size_t cut : {(size_t)0, (size_t)1, (size_t)64, (size_t)4097, (size_t)300000, big.size()}) {
    uint32_t a = apx_crc32c(0, big.data(), cut), b = apx_crc32c(0, big.data() + cut, big.size() - cut);
    EXPECT_EQ(apx_crc32c_combine(a, b, big.size() - cut), whole) << cut;
  }
}

// The writer encodes the metadata itself (plan_write.c): its bytes are exactly protobuf-c's
// packing of the same message (an unpack and re-pack gives them back), on the sample with
// blobs, derived buffers and edge values (negative, -0.0, NaN, zero), and on a plan whose
// metadata and data pass through the staging buffer several times.
TEST(PlanWrite, MetadataIsProtobufCsPacking) {
  auto check = [](ApxPlan *p, const char *name) {
    ApxDiag d;
    apx_diag_init(&d);
    std::string path = tmpdir() + "/" + name;
    ASSERT_EQ(apx_plan_write(p, path.c_str(), &d), 0) << d.msg;
    std::vector<uint8_t> f = slurp(path);
    uint64_t meta_len;
    memcpy(&meta_len, &f[24], 8);
    Apexc__Plan *m = apexc__plan__unpack(nullptr, meta_len, &f[64]);
    ASSERT_NE(m, nullptr);
    std::vector<uint8_t> repacked(apexc__plan__get_packed_size(m));
    apexc__plan__pack(m, repacked.data());
    apexc__plan__free_unpacked(m, nullptr);
    ASSERT_EQ(repacked.size(), meta_len) << name;
    EXPECT_EQ(0, memcmp(repacked.data(), &f[64], meta_len)) << name;
    ApxPlan r;
    apx_plan_init(&r);
    EXPECT_EQ(apx_plan_read(&r, path.c_str(), &d), 0) << d.msg;  // checksum and all
    apx_plan_free(&r);
  };
  {
    Sample s;
    const char text[] = "blob bytes";
    ASSERT_EQ(apx_plan_add_blob(&s.p, "model.onnx", text, sizeof text), 0);
    s.p.bufs[1].dtype = APX_DT_BF16;  // derived from W_master
    s.p.bufs[1].bytes = 24;
    s.p.bufs[1].data = nullptr;
    s.p.bufs[1].init_from = 7;
    s.p.opts.momentum = -0.0f;
    s.p.opts.grad_predivide = std::nanf("");
    s.p.opts.lr = 0.f;
    s.p.opts.total_steps = -5;
    s.p.opts.first_bucket_mb = -0.0;
    s.p.opts.seed = ~0ull;
    apx_plan_layout_data(&s.p);
    check(&s.p, "packing_sample.apx");
  }
  {
    // 200k small buffers (about 9 MB of metadata), a 6 MB parameter, a 1 MiB zero constant
    // and 1.2M data-input entries (a field longer than the staging buffer): flushes, straight
    // writes, holes
    ApxPlan p;
    apx_plan_init(&p);
    const int32_t n = 200000;
    ApxPlanBuffer *b = apx_plan_alloc_buffers(&p, n + 3);
    std::vector<std::string> names(n);
    std::vector<float> big(1536 * 1024), small(n);
    std::vector<uint8_t> zeros(1 << 20, 0);
    for (size_t i = 0; i < big.size(); i++) big[i] = (float)i * 0.5f;
    for (int32_t i = 0; i < n + 3; i++) {
      b[i].kind = APX_VAL_CONST;
      b[i].dtype = APX_DT_F32;
      b[i].region = APX_MEM_PERSISTENT;
      b[i].rank = 1;
    }
    for (int32_t i = 0; i < n; i++) {
      names[i] = "c" + std::to_string(i);
      small[i] = (float)i;
      b[i].name = names[i].c_str();
      b[i].dims[0] = 1;
      b[i].bytes = 4;
      b[i].offset = 64 * (int64_t)i;
      b[i].data = &small[i];
    }
    b[n].name = "big";
    b[n].dims[0] = (int64_t)big.size();
    b[n].bytes = (int64_t)big.size() * 4;
    b[n].offset = 64 * (int64_t)n;
    b[n].data = big.data();
    b[n + 1].name = "zeros";
    b[n + 1].dtype = APX_DT_U8;
    b[n + 1].dims[0] = (int64_t)zeros.size();
    b[n + 1].bytes = (int64_t)zeros.size();
    b[n + 1].offset = b[n].offset + b[n].bytes;
    b[n + 1].data = zeros.data();
    p.mem.persistent_bytes = b[n + 1].offset + b[n + 1].bytes;
    b[n + 2].name = "x";
    b[n + 2].kind = APX_VAL_INPUT;
    b[n + 2].region = APX_MEM_ARENA;
    b[n + 2].dims[0] = 1;
    b[n + 2].bytes = 4;
    p.mem.arena_bytes = 64;
    std::vector<int32_t> inputs(1200000, n + 2);
    p.inputs = inputs.data();
    p.n_inputs = (int32_t)inputs.size();
    apx_plan_layout_data(&p);
    check(&p, "packing_large.apx");
    struct stat st;
    ASSERT_EQ(stat((tmpdir() + "/packing_large.apx").c_str(), &st), 0);
    printf("plan file %lld bytes, %lld bytes on disk\n", (long long)st.st_size,
           (long long)st.st_blocks * 512);
    ApxPlan r;
    apx_plan_init(&r);
    ApxDiag d;
    apx_diag_init(&d);
    ASSERT_EQ(apx_plan_read(&r, (tmpdir() + "/packing_large.apx").c_str(), &d), 0) << d.msg;
    EXPECT_EQ(0, memcmp(r.bufs[n].data, big.data(), big.size() * 4));
    EXPECT_EQ(0, memcmp(r.bufs[n + 1].data, zeros.data(), zeros.size()));
    EXPECT_EQ(*(const float *)r.bufs[n - 1].data, (float)(n - 1));
    ASSERT_EQ(r.n_inputs, (int32_t)inputs.size());
    EXPECT_EQ(r.inputs[inputs.size() - 1], n + 2);
    apx_plan_free(&r);
    apx_plan_free(&p);
  }
}

// The name index (built with its slots prefetched ahead of the inserts) finds every name, the
// first buffer of a repeated name, and nothing else; it agrees with the scan it replaces.
TEST(PlanIndex, FindsEveryNameAndTheFirstOfARepeat) {
  ApxPlan p;
  apx_plan_init(&p);
  const int32_t n = 5000;
  ApxPlanBuffer *b = apx_plan_alloc_buffers(&p, n);
  std::vector<std::string> names(n);
  for (int32_t i = 0; i < n; i++) {
    names[i] = i % 7 == 3 ? "rep" + std::to_string(i / 70) : "value/with_a_long_name_" + std::to_string(i);
    b[i].name = names[i].c_str();
  }
  b[10].flags = APX_VALF_MASTER;
  b[10].origin = 4000;
  ASSERT_EQ(apx_plan_index(&p), 0);
  for (int32_t i = 0; i < n; i++) {
    int32_t first = 0;
    while (names[first] != names[i]) first++;
    EXPECT_EQ(apx_plan_find_buffer(&p, names[i].c_str()), first) << names[i];
  }
  EXPECT_EQ(apx_plan_find_buffer(&p, "value/with_a_long_name_5000"), -1);
  EXPECT_EQ(apx_plan_find_buffer(&p, ""), -1);
  EXPECT_EQ(apx_plan_master_of(&p, 4000), 10);
  EXPECT_EQ(apx_plan_master_of(&p, 10), -1);
  apx_plan_free(&p);
}

// A plan file prepared while the compile runs (apx_plan_prepare_output: created early, its
// pages filled with zeros on a thread) ends byte for byte the file an unprepared write makes,
// whether the hint was larger than the plan (truncated) or smaller, with its zero blocks
// still holes; a preparation no write takes is removed by apx_plan_cancel_output, and one
// for another path leaves a write alone.
TEST(PlanWrite, PreparedOutputIsTheSameFile) {
  ApxPlan p;
  apx_plan_init(&p);
  ApxPlanBuffer *b = apx_plan_alloc_buffers(&p, 3);
  std::vector<float> big(1536 * 1024);
  std::vector<uint8_t> zeros(1 << 20, 0);
  for (size_t i = 0; i < big.size(); i++) big[i] = (float)i * 0.25f;
  const char *names[3] = {"big", "zeros", "x"};
  for (int i = 0; i < 3; i++) {
    b[i].name = names[i];
    b[i].kind = APX_VAL_CONST;
    b[i].dtype = APX_DT_F32;
    b[i].region = APX_MEM_PERSISTENT;
    b[i].rank = 1;
  }
  b[0].dims[0] = (int64_t)big.size();
  b[0].bytes = (int64_t)big.size() * 4;
  b[0].data = big.data();
  b[1].dtype = APX_DT_U8;
  b[1].dims[0] = (int64_t)zeros.size();
  b[1].bytes = (int64_t)zeros.size();
  b[1].offset = b[0].bytes;
  b[1].data = zeros.data();
  p.mem.persistent_bytes = b[1].offset + b[1].bytes;
  b[2].kind = APX_VAL_INPUT;
  b[2].region = APX_MEM_ARENA;
  b[2].dims[0] = 1;
  b[2].bytes = 4;
  p.mem.arena_bytes = 64;
  int32_t input = 2;
  p.inputs = &input;
  p.n_inputs = 1;
  apx_plan_layout_data(&p);
  ApxDiag d;
  apx_diag_init(&d);
  const std::string dir = tmpdir() + "/prepared";
  mkdir(dir.c_str(), 0755);
  const std::string plain = dir + "/plain.apx";
  ASSERT_EQ(apx_plan_write(&p, plain.c_str(), &d), 0) << d.msg;
  const std::vector<uint8_t> want = slurp(plain);
  struct stat st_plain;
  ASSERT_EQ(stat(plain.c_str(), &st_plain), 0);
  auto tmp_files = [&dir]() {  // leftovers of a write: "<name>.tmp.<pid>"
    int n = 0;
    for (const char *name : {"big_hint.apx", "small_hint.apx", "cancelled.apx", "other.apx"}) {
      std::string t = dir + "/" + name + ".tmp." + std::to_string((long)getpid());
      n += access(t.c_str(), F_OK) == 0;
    }
    return n;
  };
  for (uint64_t hint : {(uint64_t)12 << 20, (uint64_t)1 << 20}) {
    const std::string path = dir + (hint > want.size() ? "/big_hint.apx" : "/small_hint.apx");
    apx_plan_prepare_output(path.c_str(), hint);
    EXPECT_EQ(tmp_files(), 1) << "the prepared file exists before the write";
    // the write waits for nothing: here the filling is let finish (the temporary file
    // reaches the hint's size) so that the write goes over zeros everywhere
    const std::string tmp = path + ".tmp." + std::to_string((long)getpid());
    struct stat ts = {};
    for (int i = 0; i < 2000 && (stat(tmp.c_str(), &ts) != 0 || (uint64_t)ts.st_size < hint); i++)
      usleep(5000);
    EXPECT_EQ((uint64_t)ts.st_size, hint);
    ASSERT_EQ(apx_plan_write(&p, path.c_str(), &d), 0) << d.msg;
    EXPECT_EQ(tmp_files(), 0);
    EXPECT_EQ(slurp(path), want) << "hint " << hint;
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_size, st_plain.st_size);
    if ((int64_t)st_plain.st_blocks * 512 < st_plain.st_size) {  // a file system with holes
      EXPECT_LE((int64_t)st.st_blocks * 512, (int64_t)st_plain.st_blocks * 512 + (64 << 10))
          << "the 1 MiB zero block is a hole in the prepared file too";
    }
    apx_plan_cancel_output();  // nothing left to cancel
  }
  {  // a hint raised while it fills (apx_plan_prepare_more): the filling goes on to it
    const std::string path = dir + "/more.apx", tmp = path + ".tmp." + std::to_string((long)getpid());
    apx_plan_prepare_output(path.c_str(), 1 << 20);
    apx_plan_prepare_more(512 << 10);  // smaller: nothing changes
    apx_plan_prepare_more((uint64_t)12 << 20);
    struct stat ts = {};
    for (int i = 0; i < 2000 && (stat(tmp.c_str(), &ts) != 0 || ts.st_size < (12 << 20)); i++) usleep(5000);
    EXPECT_EQ(ts.st_size, 12 << 20);
    ASSERT_EQ(apx_plan_write(&p, path.c_str(), &d), 0) << d.msg;
    EXPECT_EQ(slurp(path), want);
    EXPECT_NE(access(tmp.c_str(), F_OK), 0);
    apx_plan_prepare_more((uint64_t)16 << 20);  // nothing prepared: nothing happens
    EXPECT_NE(access(tmp.c_str(), F_OK), 0);
  }
  const std::string cancelled = dir + "/cancelled.apx";
  apx_plan_prepare_output(cancelled.c_str(), 8 << 20);
  EXPECT_EQ(tmp_files(), 1);
  apx_plan_cancel_output();
  EXPECT_EQ(tmp_files(), 0);
  EXPECT_NE(access(cancelled.c_str(), F_OK), 0);
  // prepared for one path, written to another: the write makes its own file
  apx_plan_prepare_output(cancelled.c_str(), 8 << 20);
  const std::string other = dir + "/other.apx";
  ASSERT_EQ(apx_plan_write(&p, other.c_str(), &d), 0) << d.msg;
  EXPECT_EQ(slurp(other), want);
  EXPECT_EQ(tmp_files(), 1);
  apx_plan_cancel_output();
  EXPECT_EQ(tmp_files(), 0);
  // nothing prepared over a path that is not a regular file
  apx_plan_prepare_output("/dev/null", 1 << 20);
  EXPECT_NE(access(("/dev/null.tmp." + std::to_string((long)getpid())).c_str(), F_OK), 0);
  apx_plan_cancel_output();
  apx_plan_free(&p);
}
