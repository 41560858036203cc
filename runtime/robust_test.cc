// robust_test.cc - apexrun and apexc against hostile inputs and failing outputs (issue 16):
//  - every reader (plan, .npy, checkpoint, ONNX model, infer's input_K.pb, --policy,
//    --dump-plan) refuses a FIFO, a symlink to /dev/zero and a folder at once, one line, exit 2;
//  - headers are checked against the file size before the payload: a 4 GiB .npy (sparse) whose
//    sample count mismatches the labels fails without reading it, an oversized .npy header and
//    a checkpoint larger than its plan allows are refused unread (peak RSS stays small);
//  - checkpoint scaler/schedule/position fields are validated; a resume on other data refused;
//  - no output over an input (plan, data, resumed checkpoint, checkpoint names) or over another
//    output; failed writes (/dev/full, a file size limit) exit 1 naming the file and never leave
//    a log cut mid-line;
//  - SIGINT/SIGTERM: the step finishes, a checkpoint is written, exit 130/143, resume continues
//    bit for bit; a second signal exits at once without leaving a temporary file;
//  - the initial loss scale is clamped into [min, max] at run time; infer's labels out of range
//    are bad input (exit 2) as in training.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "compiler/onnx_load.h"
#include "runtime/dataset.h"
#include "ir/fileio.h"
#include "runtime/npy.h"
#include "plan/plan.h"
}
#include "tests/testing/compile_plan.h"

namespace {

std::string Tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

std::string Slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void Put(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

bool Exists(const std::string &p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0;
}

struct Result {
  int code;
  std::string out;
};

// cmd under `timeout 60`: a reader that blocks shows as exit 124, not as a hung test.
Result Sh(const std::string &cmd) {
  FILE *p = popen(("timeout 60 " + cmd + " 2>&1").c_str(), "r");
  Result r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return r;
}

Result Apexrun(const std::string &args) { return Sh("./runtime/apexrun " + args); }
Result Apexc(const std::string &args) { return Sh("./compiler/apexc " + args); }

int Lines(const std::string &s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string Ckpt(const std::string &dir, long step) {
  char b[64];
  snprintf(b, sizeof b, "/ckpt-%012ld.apxckpt", step);
  return dir + b;
}

const std::string kData = "examples/mlp/data";

// The MLP at -O2 (batch 32, AdamW, dynamic loss scale), compiled once by the apexc binary.
const std::string &Plan() {
  static std::string p;
  if (p.empty()) {
    p = Tmp() + "/robust_mlp.apx";
    Result r = Apexc("examples/mlp/model.onnx -O2 -q -o " + p);
    EXPECT_EQ(r.code, 0) << r.out;
  }
  return p;
}

// exit code 2, one line, starting with `path` and containing `want`.
void ExpectRefused(const Result &r, const std::string &path, const std::string &want, const std::string &what) {
  EXPECT_EQ(r.code, 2) << what << ": " << r.out;
  EXPECT_EQ(Lines(r.out), 1) << what << ": " << r.out;
  EXPECT_EQ(r.out.rfind(path, 0), 0u) << what << ": " << r.out;
  EXPECT_NE(r.out.find(want), std::string::npos) << what << ": " << r.out << "want: " << want;
}

// Largest resident set of this process and of the children waited for so far, in MiB.
long MaxRssMiB(int who) {
  rusage u{};
  getrusage(who, &u);
  return u.ru_maxrss / 1024;
}

std::string NpyHeader(const std::string &descr, const std::string &shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict += std::string(padded - total, ' ') + "\n";
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  h += (char)(dict.size() & 0xff);
  h += (char)(dict.size() >> 8);
  return h + dict;
}

// A .npy file of `shape` whose payload is a hole of `payload` bytes (sparse: no disk used).
bool SparseNpy(const std::string &path, const std::string &descr, const std::string &shape, uint64_t payload) {
  std::string h = NpyHeader(descr, shape);
  Put(path, h);
  return truncate(path.c_str(), (off_t)(h.size() + payload)) == 0;
}

void CopyFile(const std::string &from, const std::string &to) { Put(to, Slurp(from)); }

// A --data folder: a copy of the MLP's data.
std::string DataCopy(const std::string &name) {
  std::string d = Tmp() + "/" + name;
  mkdir(d.c_str(), 0755);
  CopyFile(kData + "/x.npy", d + "/x.npy");
  CopyFile(kData + "/labels.npy", d + "/labels.npy");
  return d;
}

// infer's inputs for the MLP in dir: input_0.pb (x, 32 x 64) and input_1.pb (labels, 32),
// label `bad_at` set to `bad` when bad_at >= 0.
void MlpInferInputs(const std::string &dir, int bad_at = -1, int64_t bad = 0) {
  mkdir(dir.c_str(), 0755);
  ApxDiag d;
  apx_diag_init(&d);
  std::vector<float> x(32 * 64, 0.5f);
  std::vector<int64_t> y(32, 1);
  if (bad_at >= 0) y[bad_at] = bad;
  ApxTensor tx = {x.data(), APX_DT_F32, 2, {32, 64}}, ty = {y.data(), APX_DT_I64, 1, {32}};
  ASSERT_EQ(apx_onnx_write_tensor_file((dir + "/input_0.pb").c_str(), "x", &tx, &d), 0) << d.msg;
  ASSERT_EQ(apx_onnx_write_tensor_file((dir + "/input_1.pb").c_str(), "labels", &ty, &d), 0) << d.msg;
}

}  // namespace

// ---- bounded reads -----------------------------------------------------------------------

// A FIFO would block a plain open forever; /dev/zero never ends; a folder is not a file. Every
// reader of both programs refuses all three at open, naming the file and what it is.
TEST(Robust, EveryReaderRefusesFifosDevicesAndFolders) {
  std::string dir = Tmp() + "/nonreg";
  mkdir(dir.c_str(), 0755);
  std::string fifo = dir + "/fifo", zero = dir + "/zero", folder = dir + "/folder";
  unlink(fifo.c_str());
  unlink(zero.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0) << strerror(errno);
  ASSERT_EQ(symlink("/dev/zero", zero.c_str()), 0) << strerror(errno);
  mkdir(folder.c_str(), 0755);
  const std::string kind[] = {"(a FIFO)", "(a character device: /dev/zero)", "(a folder)"};
  const std::string bad[] = {fifo, zero, folder};
  const std::string &plan = Plan();
  for (int k = 0; k < 3; k++) {
    const std::string &b = bad[k], &want = kind[k];
    ExpectRefused(Apexrun(b + " --data " + kData + " --steps 1"), b, "cannot read plan: not a regular file " + want,
                  "plan");
    ExpectRefused(Apexc("--dump-plan " + b), b, "cannot read plan: not a regular file " + want, "--dump-plan");
    ExpectRefused(Apexc(b + " -O2 -q -o " + dir + "/x.apx"), b, "cannot read model: not a regular file " + want,
                  "apexc model");
    ExpectRefused(Apexc("examples/mlp/model.onnx -O2 -q -o " + dir + "/x.apx --policy " + b), b,
                  "cannot read policy: not a regular file " + want, "--policy");
    ExpectRefused(Apexrun("infer " + b + " --input-dir " + dir + " --output-dir " + dir + "/out"), b,
                  "cannot read model: not a regular file " + want, "infer model");
    // a --data file
    std::string data = Tmp() + "/nonreg_data" + std::to_string(k);
    mkdir(data.c_str(), 0755);
    CopyFile(kData + "/labels.npy", data + "/labels.npy");
    unlink((data + "/x.npy").c_str());
    rmdir((data + "/x.npy").c_str());
    if (k == 2) {
      ASSERT_EQ(mkdir((data + "/x.npy").c_str(), 0755), 0);
    } else {
      ASSERT_EQ(symlink(b.c_str(), (data + "/x.npy").c_str()), 0);
    }
    // through a symlink the message says where it leads: "(a FIFO: /path/to/fifo)"
    std::string kw = k == 0 ? "(a FIFO: " + fifo + ")" : k == 1 ? "(a character device: /dev/zero)" : "(a folder)";
    ExpectRefused(Apexrun(plan + " --data " + data + " --steps 1"), data + "/x.npy",
                  "cannot read .npy file: not a regular file " + kw, "--data file");
    // the checkpoint --resume would read
    std::string ck = Tmp() + "/nonreg_ckpt" + std::to_string(k);
    mkdir(ck.c_str(), 0755);
    if (k == 2) {
      mkdir(Ckpt(ck, 1).c_str(), 0755);
    } else if (!Exists(Ckpt(ck, 1))) {
      ASSERT_EQ(symlink(b.c_str(), Ckpt(ck, 1).c_str()), 0);
    }
    ExpectRefused(Apexrun(plan + " --data " + kData + " --steps 2 --resume --checkpoint-dir " + ck), Ckpt(ck, 1),
                  "cannot read checkpoint: not a regular file " + kw, "checkpoint");
    // infer's input_0.pb
    std::string in = Tmp() + "/nonreg_in" + std::to_string(k);
    mkdir(in.c_str(), 0755);
    if (k == 2) {
      mkdir((in + "/input_0.pb").c_str(), 0755);
    } else if (!Exists(in + "/input_0.pb")) {
      ASSERT_EQ(symlink(b.c_str(), (in + "/input_0.pb").c_str()), 0);
    }
    ExpectRefused(Apexrun("infer " + plan + " --input-dir " + in + " --output-dir " + in + "/out"),
                  in + "/input_0.pb", "cannot read tensor file: not a regular file " + kw, "input_0.pb");
  }
}

// The .npy header is checked against the file size before any element is read, and only the
// declared bytes are read: a valid 4 GiB file (sparse) costs two small reads, an oversized
// header is refused unread, a file whose size disagrees with its header is named.
TEST(Robust, NpyHeaderIsCheckedBeforeThePayload) {
  std::string dir = Tmp() + "/npyhdr";
  mkdir(dir.c_str(), 0755);
  std::string big = dir + "/big.npy";
  const uint64_t n = (uint64_t)1 << 24;  // 2^24 samples x 64 fp32 = 4 GiB
  if (!SparseNpy(big, "<f4", "(" + std::to_string(n) + ", 64)", n * 256)) GTEST_SKIP() << "no sparse files here";
  long rss0 = MaxRssMiB(RUSAGE_SELF);
  ApxNpy a;
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_npy_read_header(big.c_str(), &a, &d), 0) << d.msg;
  EXPECT_EQ(a.numel, (int64_t)(n * 64));
  EXPECT_EQ(a.bytes, (size_t)(n * 256));
  EXPECT_EQ(a.data, nullptr);
  EXPECT_LT(MaxRssMiB(RUSAGE_SELF) - rss0, 64) << "the header read touched the payload";
  // a header length past the end, or beyond what any numpy writes (a v2 header of 3 GiB)
  std::string over = NpyHeader("<f4", "(4,)");
  over[6] = 2;
  over.insert(10, 2, '\0');
  over[8] = 0, over[9] = 0, over[10] = 0, over[11] = (char)0xc0;  // hlen 3 GiB
  Put(dir + "/over.npy", over);
  struct Case {
    std::string file, want;
  } cases[] = {{"over.npy", "header of 3221225472 bytes runs past the end of the file"}};
  for (auto &c : cases) {
    apx_diag_init(&d);
    EXPECT_EQ(apx_npy_read((dir + "/" + c.file).c_str(), &a, &d), -1);
    EXPECT_NE(std::string(d.msg).find(c.want), std::string::npos) << d.msg;
  }
  ASSERT_EQ(truncate((dir + "/over.npy").c_str(), (off_t)((uint64_t)13 << 28)), 0);
  apx_diag_init(&d);
  EXPECT_EQ(apx_npy_read((dir + "/over.npy").c_str(), &a, &d), -1);
  EXPECT_NE(std::string(d.msg).find("header of 3221225472 bytes, more than the 1048576 bytes this reader accepts"),
            std::string::npos)
      << d.msg;
  // one byte short / one byte long: named as such from the sizes alone
  ASSERT_TRUE(SparseNpy(dir + "/short.npy", "<f4", "(1000, 64)", 1000 * 256 - 1));
  ASSERT_TRUE(SparseNpy(dir + "/long.npy", "<f4", "(1000, 64)", 1000 * 256 + 1));
  apx_diag_init(&d);
  EXPECT_EQ(apx_npy_read_header((dir + "/short.npy").c_str(), &a, &d), -1);
  EXPECT_NE(std::string(d.msg).find("truncated: the header promises 64000 elements"), std::string::npos) << d.msg;
  apx_diag_init(&d);
  EXPECT_EQ(apx_npy_read_header((dir + "/long.npy").c_str(), &a, &d), -1);
  EXPECT_NE(std::string(d.msg).find("1 bytes after the 256000 data bytes"), std::string::npos) << d.msg;
  EXPECT_LT(MaxRssMiB(RUSAGE_SELF) - rss0, 64);
}

// A valid 4 GiB x.npy (sparse) whose sample count does not match labels.npy: every header is
// read and compared before any payload, so the error comes without reading 4 GiB, in process
// (apx_dataset_open) and through apexrun.
TEST(Robust, CountMismatchOfAHugeNpyFailsWithoutReadingIt) {
  std::string dir = Tmp() + "/huge_data";
  mkdir(dir.c_str(), 0755);
  const uint64_t n = (uint64_t)1 << 24;
  if (!SparseNpy(dir + "/x.npy", "<f4", "(" + std::to_string(n) + ", 64)", n * 256)) GTEST_SKIP() << "no sparse files";
  CopyFile(kData + "/labels.npy", dir + "/labels.npy");  // 2048 samples
  ApxPlan plan;
  apx_plan_init(&plan);
  ApxDiag d;
  apx_diag_init(&d);
  ASSERT_EQ(apx_plan_read(&plan, Plan().c_str(), &d), 0) << d.msg;
  long rss0 = MaxRssMiB(RUSAGE_SELF);
  ApxDataset ds;
  EXPECT_EQ(apx_dataset_open(&ds, &plan, dir.c_str(), &d), -1);
  EXPECT_EQ(std::string(d.msg), dir + "/labels.npy: 2048 samples, but " + dir + "/x.npy has 16777216");
  EXPECT_LT(MaxRssMiB(RUSAGE_SELF) - rss0, 64) << "the 4 GiB payload was read";
  apx_dataset_free(&ds);
  apx_plan_free(&plan);
  Result r = Apexrun(Plan() + " --data " + dir + " --steps 1");
  ExpectRefused(r, dir + "/labels.npy", "2048 samples, but " + dir + "/x.npy has 16777216", "apexrun");
  EXPECT_LT(MaxRssMiB(RUSAGE_CHILDREN), 1024) << "a child read the 4 GiB payload";
}

// ---- checkpoints ---------------------------------------------------------------------------

namespace {

// A checkpoint of Plan() after 3 steps (written once).
const std::string &GoodCheckpoint() {
  static std::string bytes;
  if (bytes.empty()) {
    std::string dir = Tmp() + "/good_ckpt";
    Result r = Apexrun(Plan() + " --data " + kData + " --steps 3 --quiet --checkpoint-dir " + dir);
    EXPECT_EQ(r.code, 0) << r.out;
    bytes = Slurp(Ckpt(dir, 3));
  }
  return bytes;
}

void Reseal(std::string &bytes) {  // the checksum of the edited file
  uint8_t *b = (uint8_t *)&bytes[0];
  apx_le_put_u32(b + 36, 0);
  apx_le_put_u32(b + 36, apx_crc32c(0, b, bytes.size()));
}

// Resumes Plan() from a checkpoint with these bytes (step 3) and returns the result.
Result ResumeFrom(const std::string &name, const std::string &bytes, const std::string &flags = "") {
  std::string dir = Tmp() + "/resume_" + name;
  mkdir(dir.c_str(), 0755);
  Put(Ckpt(dir, 3), bytes);
  return Apexrun(Plan() + " --data " + kData + " --steps 6 --quiet --resume --checkpoint-dir " + dir + " " + flags);
}

}  // namespace

// The 64-byte header is checked first: a declared size that no checkpoint of this plan can
// have (a sparse 8 GiB file whose header agrees) is refused without reading it, and the
// reserved header bytes must be zero.
TEST(Robust, CheckpointHeaderIsCheckedBeforeThePayload) {
  std::string good = GoodCheckpoint();
  ASSERT_GT(good.size(), 1000u);
  std::string huge = good;
  apx_le_put_u64((uint8_t *)&huge[24], (uint64_t)8 << 30);
  std::string dir = Tmp() + "/resume_huge";
  mkdir(dir.c_str(), 0755);
  Put(Ckpt(dir, 3), huge);
  ASSERT_EQ(truncate(Ckpt(dir, 3).c_str(), (off_t)((uint64_t)8 << 30)), 0);
  Result r = Apexrun(Plan() + " --data " + kData + " --steps 6 --quiet --resume --checkpoint-dir " + dir);
  ExpectRefused(r, Ckpt(dir, 3), "corrupt checkpoint: 8589934592 bytes, more than a checkpoint of this plan can have",
                "huge");
  EXPECT_LT(MaxRssMiB(RUSAGE_CHILDREN), 1024) << "a child read the 8 GiB file";
  unlink(Ckpt(dir, 3).c_str());
  std::string reserved = good;
  reserved[50] = 1;
  Reseal(reserved);
  std::string rdir = Tmp() + "/resume_reserved";
  ExpectRefused(ResumeFrom("reserved", reserved), rdir, "corrupt checkpoint: nonzero reserved header bytes",
                "reserved");
}

// The training state of a checkpoint (valid checksum around crafted values) is validated
// before anything is loaded: counters >= 0, a known sample order, the loss scale in the plan's
// range, scaler counters within the plan's window and hysteresis, a consistent data position.
TEST(Robust, CheckpointStateFieldsAreValidated) {
  const std::string &good = GoodCheckpoint();
  enum { STEP, BATCHES, EPOCH, EPOCH_POS, SEED, ORDER, WORLD, ACCUM, DROPOUT, DSEED, SCALE, CLEAN, HYST, RUN,
         OVERFLOWS, BELOW_ONE, LR_TOTAL, LR_WARMUP };
  struct Case {
    const char *name;
    int field;
    double v;  // as int64, except SCALE (a double's bits)
    const char *want;
  } cases[] = {
      {"scale_high", SCALE, 1073741824.0, "invalid training state (loss scale 1.07374e+09 outside this plan's range [0, 1.67772e+07])"},
      {"clean_neg", CLEAN, -1, "invalid training state (clean-step count -1): it must be >= 0"},
      {"run_neg", RUN, -3, "invalid training state (overflow run -3): it must be >= 0"},
      {"overflows_neg", OVERFLOWS, -1, "invalid training state (overflow count -1): it must be >= 0"},
      {"hyst_neg", HYST, -2, "invalid training state (hysteresis counter -2): it must be >= 0"},
      {"lr_total_neg", LR_TOTAL, -5, "invalid training state (lr schedule length -5): it must be >= 0"},
      {"warmup_neg", LR_WARMUP, -1, "invalid training state (lr warmup -1): it must be >= 0"},
      {"epoch_neg", EPOCH, -1, "invalid training state (epoch -1): it must be >= 0"},
      {"order", ORDER, 7, "invalid training state (sample order 7)"},
      {"below_one", BELOW_ONE, 3, "invalid training state (below-one flag 3)"},
      {"run_gt_overflows", RUN, 2, "invalid training state (overflow run 2 longer than the 0 overflows in all)"},
      {"batches", BATCHES, 99, "invalid training state (step 3, 99 batches, Dropout counter 3): with accumulation 1"},
      {"clean_window", CLEAN, 5000, "invalid training state (5000 clean steps since the last scale change, the plan's "
                                    "window is 2000)"},
      {"hyst_high", HYST, 9, "invalid training state (hysteresis counter 9, the plan's hysteresis is 1)"},
      {"position", EPOCH_POS, 5, "invalid training state (data position epoch 0 sample 5, but batch 3 of 2048 samples "
                                 "starts at epoch 0 sample 96)"},
  };
  for (auto &c : cases) {
    std::string bytes = good;
    uint8_t *b = (uint8_t *)&bytes[0];
    uint64_t bits;
    if (c.field == SCALE) {
      memcpy(&bits, &c.v, 8);
    } else {
      bits = (uint64_t)(int64_t)c.v;
    }
    apx_le_put_u64(b + 64 + 8 * c.field, bits);
    Reseal(bytes);
    Result r = ResumeFrom(c.name, bytes);
    ExpectRefused(r, Ckpt(Tmp() + "/resume_" + c.name, 3), std::string("corrupt checkpoint: ") + c.want, c.name);
  }
  // the unedited file resumes
  Result ok = ResumeFrom("unedited", good);
  EXPECT_EQ(ok.code, 0) << ok.out;
}

// The checkpoint records a digest of the --data files (size, dtype, shape, every byte): a
// resume on the same data in another folder continues, one on changed data is refused.
TEST(Robust, ResumeWithOtherDataIsRefused) {
  std::string a = DataCopy("data_a"), b = DataCopy("data_b"), dir = Tmp() + "/ckpt_data";
  Result r = Apexrun(Plan() + " --data " + a + " --steps 3 --quiet --checkpoint-dir " + dir);
  ASSERT_EQ(r.code, 0) << r.out;
  r = Apexrun(Plan() + " --data " + b + " --steps 4 --quiet --resume --checkpoint-dir " + dir);
  EXPECT_EQ(r.code, 0) << "the same bytes in another folder: " << r.out;
  // one label changed (same shape and size)
  std::string labels = Slurp(b + "/labels.npy");
  labels[labels.size() - 8] ^= 1;
  Put(b + "/labels.npy", labels);
  r = Apexrun(Plan() + " --data " + b + " --steps 6 --quiet --resume --checkpoint-dir " + dir);
  ExpectRefused(r, Ckpt(dir, 4), "the checkpoint was trained with other data (digest ", "changed data");
  EXPECT_NE(r.out.find(b + " has "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resume with the data it was trained on"), std::string::npos) << r.out;
}

// ---- outputs -----------------------------------------------------------------------------

// An output that would overwrite an input of the run (the plan, a --data file, the checkpoint
// being resumed, a file named like the checkpoints the run writes) or another output is
// refused before training (exit 2, one line), whatever the spelling (by inode for existing
// files: a hard link or a symlink; by canonical path otherwise); the inputs are left intact.
TEST(Robust, OutputsNeverOverwriteInputs) {
  std::string dir = Tmp() + "/outs";
  mkdir(dir.c_str(), 0755);
  std::string plan = dir + "/p.apx";
  CopyFile(Plan(), plan);
  std::string hard = dir + "/hard.apx", sym = dir + "/sym.apx";
  unlink(hard.c_str());
  unlink(sym.c_str());
  ASSERT_EQ(link(plan.c_str(), hard.c_str()), 0);
  ASSERT_EQ(symlink("p.apx", sym.c_str()), 0);
  std::string data = DataCopy("outs_data"), ck = dir + "/ck";
  std::string before = Slurp(plan), x_before = Slurp(data + "/x.npy");
  const std::string common = plan + " --data " + data + " --steps 2 --quiet ";
  struct Case {
    std::string args, path, want;
  } cases[] = {
      {"--log " + plan, "--log " + plan, "refusing to overwrite the plan " + plan},
      {"--export-onnx " + hard, "--export-onnx " + hard, "refusing to overwrite the plan " + plan},
      {"--log " + sym, "--log " + sym, "refusing to overwrite the plan"},
      {"--log " + data + "/x.npy", "--log " + data + "/x.npy", "refusing to overwrite the --data file"},
      {"--log " + dir + "/./sub/../same.out --export-onnx " + dir + "/same.out", "--log " + dir + "/./sub/../same.out",
       "and --export-onnx " + dir + "/same.out are the same file: one output would replace the other"},
      {"--checkpoint-dir " + ck + " --log " + ck + "/ckpt-000000000002.apxckpt", "--log " + ck,
       "refusing to write over a checkpoint file of --checkpoint-dir " + ck},
  };
  for (auto &c : cases) ExpectRefused(Apexrun(common + c.args), c.path, c.want, c.args);
  // the checkpoint being resumed
  Result r = Apexrun(common + "--checkpoint-dir " + ck);
  ASSERT_EQ(r.code, 0) << r.out;
  ExpectRefused(Apexrun(plan + " --data " + data + " --steps 4 --quiet --resume --checkpoint-dir " + ck + " --log " +
                        Ckpt(ck, 2)),
                "--log " + Ckpt(ck, 2), "refusing to overwrite the checkpoint being resumed", "resumed");
  // a plan that sits where a checkpoint would be written
  std::string ck2 = dir + "/ck2";
  mkdir(ck2.c_str(), 0755);
  CopyFile(plan, Ckpt(ck2, 2));
  ExpectRefused(Apexrun(Ckpt(ck2, 2) + " --data " + data + " --steps 2 --quiet --checkpoint-dir " + ck2), Ckpt(ck2, 2),
                "the plan is named like a checkpoint of --checkpoint-dir", "plan in ckpt dir");
  EXPECT_TRUE(Slurp(plan) == before) << "the plan changed";
  EXPECT_TRUE(Slurp(data + "/x.npy") == x_before) << "x.npy changed";
  // infer: an output file that is an input file (the same inode through a symlink)
  std::string io = dir + "/io";
  MlpInferInputs(io);
  std::string out = dir + "/io_out";
  mkdir(out.c_str(), 0755);
  unlink((out + "/output_0.pb").c_str());
  ASSERT_EQ(symlink((io + "/input_1.pb").c_str(), (out + "/output_0.pb").c_str()), 0);
  std::string in1 = Slurp(io + "/input_1.pb");
  ExpectRefused(Apexrun("infer examples/mlp/model.onnx --input-dir " + io + " --output-dir " + out),
                out + "/output_0.pb", "refusing to overwrite the input " + io + "/input_1.pb", "infer");
  EXPECT_TRUE(Slurp(io + "/input_1.pb") == in1);
  // and apexc: two of its outputs on one path (compiler/cli_test.cc has the table)
  ExpectRefused(Apexc("examples/mlp/model.onnx -q -o " + dir + "/m.x --emit-onnx " + dir + "/./m.x"), "apexc: -o ",
                "are the same file: one output would replace the other", "apexc");
}

// Failed writes are runtime failures (exit 1) naming the file and the errno: the --log
// writer on /dev/full and past a file-size limit (the log then ends with a whole line: the
// partial one is cut off), stdout on /dev/full, an infer output on /dev/full.
TEST(Robust, FailedWritesExit1NamingTheFile) {
  const std::string common = Plan() + " --data " + kData + " --steps 3 --quiet ";
  Result r = Apexrun(common + "--log /dev/full");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out, "/dev/full: cannot write the log: No space left on device\n");
  r = Sh("sh -c './runtime/apexrun " + common + " > /dev/full'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out, "apexrun: cannot write to stdout: No space left on device\n");
  // a file size limit of 4 KiB (SIGXFSZ ignored: writes fail with EFBIG) mid-log
  std::string log = Tmp() + "/limited.jsonl";
  unlink(log.c_str());
  r = Sh("sh -c 'trap \"\" XFSZ; ulimit -f 8; exec ./runtime/apexrun " + Plan() + " --data " + kData +
         " --steps 200 --quiet --log " + log + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out, log + ": cannot write the log: File too large\n");
  std::string text = Slurp(log);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the log ends mid-line";
  EXPECT_LE(text.size(), 4096u);
  EXPECT_EQ(text.rfind("{\"step\": ", text.size() - 2), text.rfind('\n', text.size() - 2) + 1) << text;
  // infer: an output that lands on /dev/full
  std::string io = Tmp() + "/full_io", out = Tmp() + "/full_out";
  MlpInferInputs(io);
  mkdir(out.c_str(), 0755);
  unlink((out + "/output_0.pb").c_str());
  ASSERT_EQ(symlink("/dev/full", (out + "/output_0.pb").c_str()), 0);
  r = Apexrun("infer examples/mlp/model.onnx --input-dir " + io + " --output-dir " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out, out + "/output_0.pb: cannot write: No space left on device\n");
}

// ---- graceful stop -----------------------------------------------------------------------

namespace {

// Starts apexrun with args in the background (stdout and stderr into out_file).
pid_t Start(const std::string &args, const std::string &out_file) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl("/bin/sh", "sh", "-c", ("exec ./runtime/apexrun " + args).c_str(), (char *)nullptr);
    _exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void WaitForLines(const std::string &log, int n) {
  for (int i = 0; i < 600 && Lines(Slurp(log)) < n; i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

std::vector<std::string> Temps(const std::string &dir) {
  std::vector<std::string> v;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (strstr(e->d_name, ".tmp")) v.push_back(e->d_name);
    closedir(d);
  }
  return v;
}

}  // namespace

// SIGINT: the step in progress finishes, the checkpoint of that step is written, the line says
// how to resume, exit 130; resuming continues exactly as an uninterrupted run (same checkpoint
// bytes). SIGTERM without --checkpoint-dir: exit 143, saying nothing was saved.
TEST(Robust, FirstSignalFinishesTheStepAndCheckpoints) {
  std::string dir = Tmp() + "/sig_ck", log = Tmp() + "/sig.jsonl", out = Tmp() + "/sig.out";
  pid_t p = Start(Plan() + " --data " + kData + " --steps 100000000 --quiet --checkpoint-dir " + dir + " --log " + log,
                  out);
  WaitForLines(log, 30);
  kill(p, SIGINT);
  EXPECT_EQ(Wait(p), 130) << Slurp(out);
  std::string o = Slurp(out);
  size_t at = o.find("apexrun: stopped by SIGINT after step ");
  ASSERT_NE(at, std::string::npos) << o;
  long s = strtol(o.c_str() + at + strlen("apexrun: stopped by SIGINT after step "), nullptr, 10);
  ASSERT_GE(s, 30) << o;
  EXPECT_NE(o.find("of 100000000: checkpoint " + Ckpt(dir, s) + " written; to continue, run the same command with "
                   "--resume\n"),
            std::string::npos)
      << o;
  EXPECT_TRUE(Exists(Ckpt(dir, s))) << o;
  EXPECT_EQ(Lines(Slurp(log)), s) << "every finished step is logged";
  EXPECT_TRUE(Temps(dir).empty());
  // resume to s + 20 == a straight run to s + 20
  std::string straight = Tmp() + "/sig_straight";
  Result r = Apexrun(Plan() + " --data " + kData + " --steps " + std::to_string(s + 20) + " --quiet --checkpoint-dir " +
                     straight);
  ASSERT_EQ(r.code, 0) << r.out;
  r = Apexrun(Plan() + " --data " + kData + " --steps " + std::to_string(s + 20) + " --quiet --resume --checkpoint-dir " +
              dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Slurp(Ckpt(dir, s + 20)) == Slurp(Ckpt(straight, s + 20))) << "resumed after a stop differs";
  // SIGTERM, nothing to save to
  std::string log2 = Tmp() + "/sig2.jsonl";
  p = Start(Plan() + " --data " + kData + " --steps 100000000 --quiet --log " + log2, out);
  WaitForLines(log2, 10);
  kill(p, SIGTERM);
  EXPECT_EQ(Wait(p), 143);
  o = Slurp(out);
  EXPECT_NE(o.find("apexrun: stopped by SIGTERM after step "), std::string::npos) << o;
  EXPECT_NE(o.find(": nothing saved (no --checkpoint-dir)\n"), std::string::npos) << o;
}

// A second signal ends the run at once (exit 128 + signal), even in the middle of a
// checkpoint write, and removes that write's temporary file. Deterministic: the writer's test
// hook sends SIGINT and SIGTERM to itself 1000 bytes into step 5's checkpoint; then from
// outside, SIGINT and SIGTERM (two signals: the same one twice may merge while pending) at
// a random moment of a run that writes a checkpoint every step.
TEST(Robust, SecondSignalExitsAtOnceWithoutTemporaryFiles) {
  std::string dir = Tmp() + "/sig2_hook";
  Result r = Sh("env APX_TEST_CHECKPOINT_SIGNALS_AT=5:1000 ./runtime/apexrun " + Plan() + " --data " + kData +
                " --steps 10 --quiet --checkpoint-every 1 --checkpoint-dir " + dir);
  EXPECT_EQ(r.code, 143) << r.out;
  EXPECT_EQ(r.out.rfind("apexrun: second SIGTERM: stopping now, without finishing the step (removed the unfinished " +
                            dir + "/.ckpt-000000000005.apxckpt.tmp.",
                        0),
            0u)
      << r.out;
  EXPECT_TRUE(Temps(dir).empty());
  EXPECT_TRUE(Exists(Ckpt(dir, 4)));
  EXPECT_FALSE(Exists(Ckpt(dir, 5)));
  int removed = 0;
  for (int round = 0; round < 6; round++) {
    std::string d = Tmp() + "/sig2_ck" + std::to_string(round), log = d + ".jsonl", out = d + ".out";
    pid_t p = Start(Plan() + " --data " + kData + " --steps 100000000 --quiet --checkpoint-every 1 --checkpoint-dir " +
                        d + " --log " + log,
                    out);
    WaitForLines(log, 20 + 7 * round);
    kill(p, SIGINT);
    kill(p, SIGTERM);
    int code = Wait(p);
    std::string o = Slurp(out);
    // handled in the order the threads took them: the second one names itself and its code
    EXPECT_TRUE((code == 143 && o.find("apexrun: second SIGTERM: stopping now") != std::string::npos) ||
                (code == 130 && o.find("apexrun: second SIGINT: stopping now") != std::string::npos))
        << code << ": " << o;
    removed += o.find("(removed the unfinished ") != std::string::npos;
    EXPECT_TRUE(Temps(d).empty()) << "temporary file left: " << Temps(d)[0];
  }
  printf("second signal during a checkpoint write (temporary file removed) in %d of 6 rounds\n", removed);
}

// ---- loss scale, infer ---------------------------------------------------------------------

// A plan whose initial loss scale is above its --max-loss-scale (apexc clamps it; a plan
// written otherwise is clamped at run time): training starts at the maximum, with a warning.
TEST(Robust, InitialLossScaleIsClampedAtRunTime) {
  std::string plan = Tmp() + "/maxscale.apx";
  ApxOptions o;
  apx_options_init(&o);
  std::string src = "examples/mlp/model.onnx";
  o.model_path = src.c_str();
  o.opt_level = APX_O2;
  o.quiet = 1;
  o.max_loss_scale = 4;
  std::string err;
  ASSERT_TRUE(apx_testing::CompileToPlanFile(o, plan, &err)) << err;
  std::string log = Tmp() + "/maxscale.jsonl";
  Result r = Apexrun(plan + " --data " + kData + " --steps 2 --quiet --log " + log);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("apexrun: warning: the plan's initial loss scale 65536 is outside its range [0, 4]: training "
                       "starts at 4 (the initial scale is clamped, as in Apex)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(Slurp(log).find("\"step\": 1, \"loss\": "), std::string::npos);
  EXPECT_NE(Slurp(log).find("\"loss_scale\": 4,"), std::string::npos) << Slurp(log);
}

// infer checks class labels against the plan like training does: bad input (exit 2) naming
// the file and sample, not a kernel failure (exit 1).
TEST(Robust, InferLabelsOutOfRangeAreBadInput) {
  std::string io = Tmp() + "/labels_io";
  MlpInferInputs(io, 17, 77);
  Result r = Apexrun("infer examples/mlp/model.onnx --input-dir " + io + " --output-dir " + io + "/out");
  ExpectRefused(r, io + "/input_1.pb", "sample 17: class label 77 is out of range", "infer labels");
  EXPECT_NE(r.out.find("takes [0, 10)"), std::string::npos) << r.out;
}
