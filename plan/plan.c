/* plan.c - plan file: build helpers, validation, atomic write, checked read (plan.h). */
#include "plan/plan.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/name_hash.h"
#include "plan/plan_validate.h"
#include "plan/plan_write.h"

#include "plan/plan.pb-c.h"

static const char k_magic[8] = {'A', 'P', 'X', 'P', 'L', 'A', 'N', 0};

/* ---- little-endian header ------------------------------------------------------------- */

typedef struct Header {
  uint32_t version, flags;
  uint64_t meta_offset, meta_len, data_offset, data_len;
  uint32_t checksum;
} Header;

static void header_encode(const Header *h, uint8_t b[APX_PLAN_HEADER_BYTES]) {
  memset(b, 0, APX_PLAN_HEADER_BYTES);
  memcpy(b, k_magic, 8);
  apx_le_put_u32(b + 8, h->version);
  apx_le_put_u32(b + 12, h->flags);
  apx_le_put_u64(b + 16, h->meta_offset);
  apx_le_put_u64(b + 24, h->meta_len);
  apx_le_put_u64(b + 32, h->data_offset);
  apx_le_put_u64(b + 40, h->data_len);
  apx_le_put_u32(b + 48, h->checksum);
}

static uint64_t align_up(uint64_t x) { return (x + APX_PLAN_ALIGN - 1) & ~(uint64_t)(APX_PLAN_ALIGN - 1); }

/* ---- init / free / builders ------------------------------------------------------------ */

void apx_plan_init(ApxPlan *p) {
  memset(p, 0, sizeof *p);
  apx_arena_init(&p->arena);
  p->format_version = APX_PLAN_FORMAT_VERSION;
  p->attrs_abi = APX_ATTRS_ABI;
  p->producer = APX_PLAN_PRODUCER;
  p->model_name = "";
  p->loss = -1;
  p->path = "<plan>";
  for (int s = 0; s < 3; s++) p->sec_begin[s] = p->sec_end[s] = 0;
}

void apx_plan_free(ApxPlan *p) {
  if (p->map) munmap(p->map, p->map_len);
  apx_arena_free(&p->arena);
  memset(p, 0, sizeof *p);
  p->loss = -1;
}

ApxPlanBuffer *apx_plan_alloc_buffers(ApxPlan *p, int32_t n) {
  ApxPlanBuffer *b = apx_arena_alloc(&p->arena, (size_t)(n > 0 ? n : 1) * sizeof *b);
  if (!b) return NULL;
  for (int32_t i = 0; i < n; i++) {
    b[i].name = "";
    b[i].alias_of = b[i].origin = b[i].init_from = -1;
  }
  p->bufs = b;
  p->n_bufs = n;
  return b;
}

ApxPlanBuffer *apx_plan_alloc_buffers_unset(ApxPlan *p, int32_t n) {
  ApxPlanBuffer *b = apx_arena_alloc_raw(&p->arena, (size_t)(n > 0 ? n : 1) * sizeof *b);
  if (!b) return NULL;
  p->bufs = b;
  p->n_bufs = n;
  return b;
}

ApxPlanKernel *apx_plan_alloc_kernels(ApxPlan *p, int32_t n) {
  ApxPlanKernel *k = apx_arena_alloc(&p->arena, (size_t)(n > 0 ? n : 1) * sizeof *k);
  if (!k) return NULL;
  for (int32_t i = 0; i < n; i++) k[i].node = "";
  p->kernels = k;
  p->n_kernels = n;
  return k;
}

int apx_plan_set_kernel(ApxPlan *p, int32_t k, ApxOp op, const char *node, ApxSection sec,
                        const void *attrs, int32_t n_in, const int32_t *in, int32_t n_out,
                        const int32_t *out) {
  ApxPlanKernel *kn = &p->kernels[k];
  size_t asz = apx_op_info(op)->attrs_size;
  void *a = apx_arena_alloc(&p->arena, asz ? asz : 1);
  kn->in = apx_arena_alloc(&p->arena, (size_t)(n_in > 0 ? n_in : 1) * sizeof(int32_t));
  kn->out = apx_arena_alloc(&p->arena, (size_t)(n_out > 0 ? n_out : 1) * sizeof(int32_t));
  kn->node = apx_arena_strdup(&p->arena, node ? node : "");
  if (!a || !kn->in || !kn->out || !kn->node) return -1;
  if (attrs && asz) memcpy(a, attrs, asz);
  if (n_in) memcpy(kn->in, in, (size_t)n_in * sizeof(int32_t));
  if (n_out) memcpy(kn->out, out, (size_t)n_out * sizeof(int32_t));
  kn->op = op;
  kn->section = sec;
  kn->attrs = a;
  kn->n_in = n_in;
  kn->n_out = n_out;
  return 0;
}

void apx_plan_layout_data(ApxPlan *p) {
  uint64_t off = 0;
  for (int32_t i = 0; i < p->n_bufs; i++) {
    ApxPlanBuffer *b = &p->bufs[i];
    if (!b->data || b->bytes <= 0) {
      b->data_offset = b->data_len = 0;
      continue;
    }
    off = align_up(off);
    b->data_offset = off;
    b->data_len = (uint64_t)b->bytes;
    off += b->data_len;
  }
  for (int32_t i = 0; i < p->n_blobs; i++) {
    ApxPlanBlob *bl = &p->blobs[i];
    off = align_up(off);
    bl->data_offset = off;
    off += bl->data_len;
  }
  p->data_bytes = align_up(off);
}

int apx_plan_add_blob(ApxPlan *p, const char *name, const void *data, uint64_t len) {
  ApxPlanBlob *nb = apx_arena_alloc(&p->arena, ((size_t)p->n_blobs + 1) * sizeof *nb);
  const char *nm = apx_arena_strdup(&p->arena, name ? name : "");
  if (!nb || !nm) return -1;
  if (p->n_blobs) memcpy(nb, p->blobs, (size_t)p->n_blobs * sizeof *nb);
  nb[p->n_blobs] = (ApxPlanBlob){nm, 0, len, data};
  p->blobs = nb;
  p->n_blobs++;
  return 0;
}

const ApxPlanBlob *apx_plan_find_blob(const ApxPlan *p, const char *name) {
  for (int32_t i = 0; i < p->n_blobs; i++)
    if (strcmp(p->blobs[i].name, name) == 0) return &p->blobs[i];
  return NULL;
}

/* ---- lookup index ---------------------------------------------------------------------- */

static uint32_t name_hash(const char *s) { return apx_name_hash(s); }

static int index_valid(const ApxPlan *p) {
  return p->name_slots && p->index_bufs == p->bufs && p->index_n == p->n_bufs;
}

/* Slot k is name_slots[2k] (buffer id, -1 empty) and name_slots[2k + 1] (its name's hash,
 * compared before the name: a probe reads one cache line, not the buffer and its name). */
int apx_plan_index(ApxPlan *p) {
  p->index_bufs = NULL;
  p->index_n = 0;
  uint32_t cap = 16, n = (uint32_t)(p->n_bufs > 0 ? p->n_bufs : 0);
  while (cap < n + n / 2 && cap < (1u << 30)) cap <<= 1; /* load at most 2/3 */
  int32_t *slots = apx_arena_alloc_raw(&p->arena, (size_t)cap * 2 * sizeof *slots);
  int32_t *master = apx_arena_alloc_raw(&p->arena, ((size_t)p->n_bufs + 1) * sizeof *master);
  if (!slots || !master) return -1;
  for (uint32_t s = 0; s < cap; s++) slots[2 * s] = -1;
  memset(master, 0xff, ((size_t)p->n_bufs + 1) * sizeof *master); /* -1 */
  /* the slot loads miss the cache (a table of megabytes): buffer i's hash is taken and its
   * slot prefetched AHEAD buffers before i is inserted (in order: the first of a name wins) */
  enum { AHEAD = 16 };
  uint32_t ring[AHEAD];
  for (int32_t j = 0; j < p->n_bufs + AHEAD; j++) {
    int32_t i = j - AHEAD;
    uint32_t h = i >= 0 ? ring[i % AHEAD] : 0; /* read before j's hash takes its place */
    if (j < p->n_bufs) {
      uint32_t hj = name_hash(p->bufs[j].name ? p->bufs[j].name : "");
      ring[j % AHEAD] = hj;
      __builtin_prefetch(&slots[2 * (hj & (cap - 1))], 1);
    }
    if (i < 0) continue;
    const char *nm = p->bufs[i].name ? p->bufs[i].name : "";
    uint32_t s = h & (cap - 1);
    int dup = 0;
    for (; slots[2 * s] >= 0; s = (s + 1) & (cap - 1)) {
      const char *other = p->bufs[slots[2 * s]].name;
      if ((uint32_t)slots[2 * s + 1] == h && !strcmp(other ? other : "", nm)) {
        dup = 1; /* the first buffer of a name wins, as a scan finds it */
        break;
      }
    }
    if (!dup) slots[2 * s] = i, slots[2 * s + 1] = (int32_t)h;
    int32_t o = p->bufs[i].origin;
    if ((p->bufs[i].flags & APX_VALF_MASTER) && o >= 0 && o < p->n_bufs && master[o] < 0) master[o] = i;
  }
  p->name_slots = slots;
  p->name_cap = cap;
  p->master_of = master;
  p->index_bufs = p->bufs;
  p->index_n = p->n_bufs;
  return 0;
}

int32_t apx_plan_find_buffer(const ApxPlan *p, const char *name) {
  if (index_valid(p)) {
    uint32_t h = name_hash(name), m = p->name_cap - 1;
    for (uint32_t s = h & m; p->name_slots[2 * s] >= 0; s = (s + 1) & m)
      if ((uint32_t)p->name_slots[2 * s + 1] == h && !strcmp(p->bufs[p->name_slots[2 * s]].name, name))
        return p->name_slots[2 * s];
    return -1;
  }
  for (int32_t i = 0; i < p->n_bufs; i++)
    if (strcmp(p->bufs[i].name, name) == 0) return i;
  return -1;
}

int32_t apx_plan_master_of(const ApxPlan *p, int32_t id) {
  if (id < 0 || id >= p->n_bufs) return -1;
  if (index_valid(p)) return p->master_of[id];
  for (int32_t i = 0; i < p->n_bufs; i++)
    if ((p->bufs[i].flags & APX_VALF_MASTER) && p->bufs[i].origin == id) return i;
  return -1;
}

const char *apx_plan_region_name(ApxMemRegion r) {
  switch (r) {
    case APX_MEM_NONE: return "none";
    case APX_MEM_ARENA: return "arena";
    case APX_MEM_PERSISTENT: return "persistent";
  }
  return "?";
}

const char *apx_plan_kind_name(ApxValueKind k) {
  switch (k) {
    case APX_VAL_ACTIVATION: return "activation";
    case APX_VAL_INPUT: return "input";
    case APX_VAL_PARAM: return "param";
    case APX_VAL_CONST: return "const";
    case APX_VAL_STATE: return "state";
  }
  return "?";
}

const char *apx_plan_section_name(ApxSection s) {
  switch (s) {
    case APX_SEC_FORWARD: return "forward";
    case APX_SEC_BACKWARD: return "backward";
    case APX_SEC_OPTIMIZER: return "optimizer";
  }
  return "?";
}

/* ---- validation ----------------------------------------------------------------------- */

/* A kernel's argument count fits an int32 with room to spare; OptimizerStep alone takes several
 * slots per parameter (a 20k-parameter model needs more than 65536). */
#define MAX_KERNEL_ARGS (INT32_MAX / 4)

static int bad(ApxDiag *d, const ApxPlan *p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(ApxDiag *d, const ApxPlan *p, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: invalid plan: %s", p->path, msg);
}

static int dtype_ok(int32_t t) { return apx_dtype_is_supported(t) && apx_dtype_size((ApxDType)t) > 0; }

/* The parts of a plan's check (validate_parts): everything an arena offset does not change,
 * and the arena placement (offsets, aliases' ranges, the arena's size). */
enum { PART_UNPLACED = 1, PART_PLACED = 2 };

/* Buffer i's bytes inside its region and, for an alias, inside the buffer it aliases (its
 * region and alias_of are checked already). */
static int check_buffer_place(const ApxPlan *p, int32_t i, ApxDiag *d) {
  const ApxPlanBuffer *b = &p->bufs[i];
  int64_t cap = b->region == APX_MEM_ARENA ? p->mem.arena_bytes : p->mem.persistent_bytes;
  if (b->offset < 0 || b->offset > cap || b->bytes > cap - b->offset)
    return bad(d, p, "buffer %d ('%s'): bytes [%" PRId64 ", +%" PRId64 ") outside the %s (%" PRId64
               " bytes)", i, b->name, b->offset, b->bytes, apx_plan_region_name(b->region), cap);
  if (b->offset % (int64_t)apx_dtype_size(b->dtype))
    return bad(d, p, "buffer %d ('%s'): offset %" PRId64 " misaligned", i, b->name, b->offset);
  if (b->alias_of != -1) {
    const ApxPlanBuffer *t = &p->bufs[b->alias_of];
    int64_t b_end, t_end; /* overflow-checked: t may come later and is not validated yet */
    if (t->region != b->region || b->offset < t->offset ||
        __builtin_add_overflow(b->offset, b->bytes, &b_end) ||
        __builtin_add_overflow(t->offset, t->bytes, &t_end) || b_end > t_end)
      return bad(d, p, "buffer %d ('%s'): not inside the buffer it aliases ('%s')", i, b->name,
                 t->name);
  }
  return 0;
}

/* Everything of buffer i but, without PART_PLACED, an arena buffer's placement. */
static int check_buffer(const ApxPlan *p, int32_t i, int parts, ApxDiag *d) {
  const ApxPlanBuffer *b = &p->bufs[i];
  if (!b->name || !b->name[0]) return bad(d, p, "buffer %d has no name", i);
  if ((int)b->kind < APX_VAL_ACTIVATION || (int)b->kind > APX_VAL_STATE)
    return bad(d, p, "buffer %d ('%s'): unknown kind %d", i, b->name, (int)b->kind);
  if (b->flags & ~(uint32_t)APX_PLAN_BUF_FLAGS)
    return bad(d, p, "buffer %d ('%s'): unknown flags 0x%x", i, b->name, b->flags);
  if (!dtype_ok(b->dtype))
    return bad(d, p, "buffer %d ('%s'): unsupported dtype %d", i, b->name, (int)b->dtype);
  if (b->rank < 0 || b->rank > APX_MAX_RANK)
    return bad(d, p, "buffer %d ('%s'): rank %d out of range", i, b->name, b->rank);
  int64_t numel = 1;
  for (int k = 0; k < b->rank; k++) {
    if (b->dims[k] < 0) return bad(d, p, "buffer %d ('%s'): negative dim", i, b->name);
    if (b->dims[k] && numel > INT64_MAX / 16 / b->dims[k])
      return bad(d, p, "buffer %d ('%s'): size overflows", i, b->name);
    numel *= b->dims[k];
  }
  if (b->bytes != numel * (int64_t)apx_dtype_size(b->dtype))
    return bad(d, p, "buffer %d ('%s'): %" PRId64 " bytes, shape and dtype give %" PRId64, i,
               b->name, b->bytes, numel * (int64_t)apx_dtype_size(b->dtype));
  if (b->region != APX_MEM_ARENA && b->region != APX_MEM_PERSISTENT)
    return bad(d, p, "buffer %d ('%s'): no memory region", i, b->name);
  if (b->alias_of != -1 && (b->alias_of < 0 || b->alias_of >= p->n_bufs || b->alias_of == i))
    return bad(d, p, "buffer %d ('%s'): alias_of %d out of range", i, b->name, b->alias_of);
  /* the placement of a persistent buffer is known with the rest; an arena one's once the
   * packing settled (checked in the second part) */
  if (((parts & PART_PLACED) || b->region == APX_MEM_PERSISTENT) && check_buffer_place(p, i, d))
    return -1;
  if (b->origin < -1 || b->origin >= p->n_bufs)
    return bad(d, p, "buffer %d ('%s'): origin %d out of range", i, b->name, b->origin);
  if (b->init_from != -1) { /* format 2: initial bytes converted from another buffer's */
    if (b->init_from < 0 || b->init_from >= p->n_bufs || b->init_from == i)
      return bad(d, p, "buffer %d ('%s'): derived from buffer %d (out of range)", i, b->name,
                 b->init_from);
    const ApxPlanBuffer *s = &p->bufs[b->init_from];
    if (b->region != APX_MEM_PERSISTENT || b->data_len || b->alias_of != -1)
      return bad(d, p, "buffer %d ('%s'): derived but not an unaliased persistent buffer "
                 "without data", i, b->name);
    if (s->init_from != -1 || !s->data_len || s->data_len != (uint64_t)s->bytes ||
        !apx_plan_derivable(s->dtype, b->dtype) ||
        s->bytes / (int64_t)apx_dtype_size(s->dtype) != b->bytes / (int64_t)apx_dtype_size(b->dtype))
      return bad(d, p, "buffer %d ('%s'): cannot be derived from buffer %d ('%s': needs its own "
                 "data, a float type converting to %s and the same element count)", i, b->name,
                 b->init_from, s->name, apx_dtype_short(b->dtype));
  }
  if (b->data_len) {
    if (b->region != APX_MEM_PERSISTENT)
      return bad(d, p, "buffer %d ('%s'): initial data outside the persistent region", i, b->name);
    if (b->data_len != (uint64_t)b->bytes || b->data_offset % APX_PLAN_ALIGN ||
        b->data_offset > p->data_bytes || b->data_len > p->data_bytes - b->data_offset)
      return bad(d, p, "buffer %d ('%s'): data range [%" PRIu64 ", +%" PRIu64
                 ") outside the data section (%" PRIu64 " bytes)",
                 i, b->name, b->data_offset, b->data_len, p->data_bytes);
  }
  return 0;
}

static int check_kernel(ApxPlan *p, int32_t k, int *last_sec, ApxDiag *d) {
  const ApxPlanKernel *kn = &p->kernels[k];
  const ApxOpInfo *info = apx_op_info(kn->op);
  const char *node = kn->node ? kn->node : "";
  if (kn->op <= APX_OP_INVALID || kn->op >= APX_OP_COUNT)
    return bad(d, p, "kernel %d ('%s'): unknown op", k, node);
  if (info->flags & (APX_OPF_FOLD | APX_OPF_TIER2 | APX_OPF_LISTED))
    return bad(d, p, "kernel %d ('%s' %s): op cannot run (compile-time only or unsupported)",
               k, node, info->name);
  if (!kn->attrs) return bad(d, p, "kernel %d ('%s' %s): no attributes", k, node, info->name);
  if ((int)kn->section < APX_SEC_FORWARD || (int)kn->section > APX_SEC_OPTIMIZER)
    return bad(d, p, "kernel %d ('%s' %s): unknown section %d", k, node, info->name,
               (int)kn->section);
  if ((int)kn->section < *last_sec)
    return bad(d, p, "kernel %d ('%s' %s): %s kernel after a %s kernel", k, node, info->name,
               apx_plan_section_name(kn->section), apx_plan_section_name((ApxSection)*last_sec));
  *last_sec = (int)kn->section;
  if (kn->compute != APX_DT_UNDEFINED && !dtype_ok(kn->compute))
    return bad(d, p, "kernel %d ('%s' %s): bad compute dtype %d", k, node, info->name,
               (int)kn->compute);
  if (kn->n_in < 0 || kn->n_out < 0 || kn->n_in > MAX_KERNEL_ARGS || kn->n_out > MAX_KERNEL_ARGS)
    return bad(d, p, "kernel %d ('%s' %s): bad argument count", k, node, info->name);
  for (int i = 0; i < kn->n_in + kn->n_out; i++) {
    int32_t id = i < kn->n_in ? kn->in[i] : kn->out[i - kn->n_in];
    if (id < -1 || id >= p->n_bufs)
      return bad(d, p, "kernel %d ('%s' %s): %s %d refers to buffer %d of %d", k, node,
                 info->name, i < kn->n_in ? "input" : "output",
                 i < kn->n_in ? i : i - kn->n_in, id, p->n_bufs);
  }
  return 0;
}

int apx_plan_derivable(ApxDType from, ApxDType to) {
  return from == APX_DT_F32 && (to == APX_DT_F16 || to == APX_DT_BF16);
}

static int validate_parts(ApxPlan *p, int parts, ApxDiag *d) {
  if (!(parts & PART_UNPLACED)) { /* the arena placement of a plan the first part accepted */
    if (p->mem.arena_bytes < 0) return bad(d, p, "negative memory summary");
    for (int32_t i = 0; i < p->n_bufs; i++)
      if (p->bufs[i].region == APX_MEM_ARENA && check_buffer_place(p, i, d)) return -1;
    return 0;
  }
  if (p->format_version < APX_PLAN_FORMAT_VERSION_MIN || p->format_version > APX_PLAN_FORMAT_VERSION)
    return bad(d, p, "format version %u, expected %u..%u", p->format_version,
               APX_PLAN_FORMAT_VERSION_MIN, APX_PLAN_FORMAT_VERSION);
  if (p->attrs_abi != APX_ATTRS_ABI)
    return bad(d, p, "attribute ABI %u, this apexrun has %u (recompile the model)", p->attrs_abi,
               (unsigned)APX_ATTRS_ABI);
  if (p->n_bufs < 0 || p->n_kernels < 0 || p->n_inputs < 0 || p->n_outputs < 0 ||
      p->n_decisions < 0 || p->n_buckets < 0)
    return bad(d, p, "negative counts");
  if (((parts & PART_PLACED) && p->mem.arena_bytes < 0) || p->mem.persistent_bytes < 0 ||
      p->mem.peak_live_bytes < 0 || p->mem.no_reuse_bytes < 0)
    return bad(d, p, "negative memory summary");
  if (p->data_bytes % APX_PLAN_ALIGN) return bad(d, p, "data section size not aligned");
  if (p->n_blobs < 0) return bad(d, p, "negative counts");
  for (int32_t i = 0; i < p->n_blobs; i++) {
    const ApxPlanBlob *bl = &p->blobs[i];
    if (!bl->name || bl->data_offset % APX_PLAN_ALIGN || bl->data_offset > p->data_bytes ||
        bl->data_len > p->data_bytes - bl->data_offset)
      return bad(d, p, "blob %d ('%s'): data range [%" PRIu64 ", +%" PRIu64 ") outside the data "
                 "section (%" PRIu64 " bytes)", i, bl->name ? bl->name : "", bl->data_offset,
                 bl->data_len, p->data_bytes);
  }
  for (int32_t i = 0; i < p->n_bufs; i++)
    if (check_buffer(p, i, parts, d)) return -1;
  int last = 0;
  for (int s = 0; s < 3; s++) p->sec_begin[s] = p->sec_end[s] = 0;
  for (int32_t k = 0; k < p->n_kernels; k++) {
    if (check_kernel(p, k, &last, d)) return -1;
    int s = (int)p->kernels[k].section;
    if (p->sec_end[s] == 0 && p->sec_begin[s] == 0) p->sec_begin[s] = k;
    p->sec_end[s] = k + 1;
  }
  /* empty sections: an empty range placed where the section would start */
  for (int s = 0; s < 3; s++)
    if (p->sec_end[s] == 0) {
      int32_t at = 0;
      for (int r = 0; r < s; r++)
        if (p->sec_end[r] > at) at = p->sec_end[r];
      p->sec_begin[s] = p->sec_end[s] = s == 0 ? 0 : at;
    }
  for (int32_t i = 0; i < p->n_inputs; i++) {
    int32_t id = p->inputs[i];
    if (id < 0 || id >= p->n_bufs) return bad(d, p, "data input %d refers to buffer %d", i, id);
    if (p->bufs[id].kind != APX_VAL_INPUT)
      return bad(d, p, "data input %d ('%s') is not an input buffer", i, p->bufs[id].name);
  }
  for (int32_t i = 0; i < p->n_outputs; i++)
    if (p->outputs[i] < 0 || p->outputs[i] >= p->n_bufs)
      return bad(d, p, "output %d refers to buffer %d", i, p->outputs[i]);
  if (p->loss < -1 || p->loss >= p->n_bufs) return bad(d, p, "loss refers to buffer %d", p->loss);
  for (int32_t i = 0; i < p->n_decisions; i++) {
    const ApxPlanDecision *dc = &p->decisions[i];
    if (!dc->node || !dc->op || !dc->rule || !dc->detail)
      return bad(d, p, "decision %d incomplete", i);
    if (dc->decision != APX_DT_UNDEFINED && !dtype_ok(dc->decision))
      return bad(d, p, "decision %d ('%s'): bad dtype %d", i, dc->node, (int)dc->decision);
  }
  for (int32_t i = 0; i < p->n_buckets; i++) {
    const ApxPlanBucket *bk = &p->buckets[i];
    if (bk->n_members < 0) return bad(d, p, "bucket %d: negative member count", i);
    for (int32_t m = 0; m < bk->n_members; m++)
      if (bk->members[m] < 0 || bk->members[m] >= p->n_bufs)
        return bad(d, p, "bucket %d: member %d refers to buffer %d", i, m, bk->members[m]);
    if (bk->ready_at < 0 || bk->ready_at >= p->n_kernels)
      return bad(d, p, "bucket %d: ready_at %d out of range", i, bk->ready_at);
    if (bk->dtype != APX_DT_UNDEFINED && !dtype_ok(bk->dtype))
      return bad(d, p, "bucket %d: bad dtype %d", i, (int)bk->dtype);
  }
  return 0;
}

int apx_plan_validate(ApxPlan *p, ApxDiag *d) { return validate_parts(p, PART_UNPLACED | PART_PLACED, d); }

int apx_plan_validate_unplaced(ApxPlan *p, ApxDiag *d) { return validate_parts(p, PART_UNPLACED, d); }

int apx_plan_validate_placed(ApxPlan *p, ApxDiag *d) { return validate_parts(p, PART_PLACED, d); }

/* ---- plan <-> protobuf ---------------------------------------------------------------- */

static const char *dup_str(ApxPlan *p, const char *s) { return apx_arena_strdup(&p->arena, s ? s : ""); }

static int32_t *dup_ids(ApxPlan *p, const int32_t *src, size_t n) {
  int32_t *a = apx_arena_alloc(&p->arena, (n + 1) * sizeof(int32_t));
  if (a && n) memcpy(a, src, n * sizeof(int32_t));
  return a;
}

#define MAX_COUNT ((size_t)INT32_MAX / 2)

/* Fills p from the unpacked message; checks counts and sizes that the C structs cannot
 * hold. References are checked afterwards by apx_plan_validate. */
static int from_message(ApxPlan *p, const Apexc__Plan *m, ApxDiag *d) {
  if (m->n_buffers > MAX_COUNT || m->n_kernels > MAX_COUNT || m->n_decisions > MAX_COUNT ||
      m->n_buckets > MAX_COUNT || m->n_inputs > MAX_COUNT || m->n_outputs > MAX_COUNT)
    return bad(d, p, "too many entries");
  p->format_version = m->format_version;
  p->attrs_abi = m->attrs_abi;
  p->producer = dup_str(p, m->producer);
  p->model_name = dup_str(p, m->model_name);
  p->model_crc32c = m->model_crc32c;
  p->model_bytes = m->model_bytes;
  if (m->options) {
    const Apexc__PlanOptions *o = m->options;
    ApxPlanOptions *po = &p->opts;
#define COPY(f) po->f = o->f;
    APX_PLAN_OPTIONS(COPY, COPY)
#undef COPY
  }
  if (m->memory) {
    p->mem.arena_bytes = m->memory->arena_bytes;
    p->mem.peak_live_bytes = m->memory->peak_live_bytes;
    p->mem.no_reuse_bytes = m->memory->no_reuse_bytes;
    p->mem.persistent_bytes = m->memory->persistent_bytes;
  }
  p->data_bytes = m->data_bytes;
  p->loss = m->loss;

  if (!apx_plan_alloc_buffers(p, (int32_t)m->n_buffers)) goto oom;
  for (size_t i = 0; i < m->n_buffers; i++) {
    const Apexc__Buffer *x = m->buffers[i];
    ApxPlanBuffer *b = &p->bufs[i];
    if (x->id != (int32_t)i) return bad(d, p, "buffer %zu has id %d", i, x->id);
    if (x->n_dims > APX_MAX_RANK)
      return bad(d, p, "buffer %zu ('%s'): rank %zu out of range", i, x->name, x->n_dims);
    b->name = dup_str(p, x->name);
    b->kind = (ApxValueKind)x->kind;
    b->flags = x->flags;
    b->dtype = (ApxDType)x->dtype;
    b->rank = (int32_t)x->n_dims;
    for (size_t k = 0; k < x->n_dims; k++) b->dims[k] = x->dims[k];
    b->region = (ApxMemRegion)x->region;
    b->offset = x->offset;
    b->bytes = x->bytes;
    b->data_offset = x->data_offset;
    b->data_len = x->data_len;
    b->alias_of = x->alias_of;
    b->origin = x->origin;
  }
  if (!apx_plan_alloc_kernels(p, (int32_t)m->n_kernels)) goto oom;
  for (size_t k = 0; k < m->n_kernels; k++) {
    const Apexc__Kernel *x = m->kernels[k];
    ApxOp op = apx_op_from_name(x->op);
    if (op == APX_OP_INVALID) return bad(d, p, "kernel %zu ('%s'): unknown op '%s'", k, x->node, x->op);
    size_t asz = apx_op_info(op)->attrs_size;
    if (x->attrs.len != asz)
      return bad(d, p, "kernel %zu ('%s' %s): attributes are %zu bytes, %s is %zu", k, x->node,
                 x->op, x->attrs.len, apx_op_info(op)->attrs_type, asz);
    if (x->n_inputs > MAX_KERNEL_ARGS || x->n_outputs > MAX_KERNEL_ARGS)
      return bad(d, p, "kernel %zu ('%s'): too many arguments", k, x->node);
    if (apx_plan_set_kernel(p, (int32_t)k, op, x->node, (ApxSection)x->section, x->attrs.data,
                            (int32_t)x->n_inputs, x->inputs, (int32_t)x->n_outputs, x->outputs))
      goto oom;
    p->kernels[k].compute = (ApxDType)x->compute;
  }
  p->n_decisions = (int32_t)m->n_decisions;
  p->decisions = apx_arena_alloc(&p->arena, (m->n_decisions + 1) * sizeof(ApxPlanDecision));
  if (!p->decisions) goto oom;
  for (size_t i = 0; i < m->n_decisions; i++) {
    const Apexc__Decision *x = m->decisions[i];
    ApxPlanDecision *dc = &p->decisions[i];
    dc->node = dup_str(p, x->node);
    dc->op = dup_str(p, x->op);
    dc->decision = (ApxDType)x->decision;
    dc->rule_code = x->rule_code;
    dc->rule = dup_str(p, x->rule);
    dc->detail = dup_str(p, x->detail);
    dc->casts_added = x->casts_added;
  }
  p->n_buckets = (int32_t)m->n_buckets;
  p->buckets = apx_arena_alloc(&p->arena, (m->n_buckets + 1) * sizeof(ApxPlanBucket));
  if (!p->buckets) goto oom;
  for (size_t i = 0; i < m->n_buckets; i++) {
    const Apexc__Bucket *x = m->buckets[i];
    ApxPlanBucket *bk = &p->buckets[i];
    if (x->n_members > MAX_COUNT) return bad(d, p, "bucket %zu: too many members", i);
    bk->id = x->id;
    bk->dtype = (ApxDType)x->dtype;
    bk->n_members = (int32_t)x->n_members;
    bk->members = dup_ids(p, x->members, x->n_members);
    bk->bytes = x->bytes;
    bk->ready_at = x->ready_at;
    if (!bk->members) goto oom;
  }
  if (m->n_blobs > MAX_COUNT) return bad(d, p, "too many entries");
  p->n_blobs = (int32_t)m->n_blobs;
  p->blobs = apx_arena_alloc(&p->arena, (m->n_blobs + 1) * sizeof(ApxPlanBlob));
  if (!p->blobs) goto oom;
  for (size_t i = 0; i < m->n_blobs; i++) {
    p->blobs[i].name = dup_str(p, m->blobs[i]->name);
    p->blobs[i].data_offset = m->blobs[i]->data_offset;
    p->blobs[i].data_len = m->blobs[i]->data_len;
    p->blobs[i].data = NULL;
    if (!p->blobs[i].name) goto oom;
  }
  if (m->n_derived && m->format_version < 2) return bad(d, p, "derived buffers in a format 1 plan");
  for (size_t i = 0; i < m->n_derived; i++) {
    const Apexc__Derived *x = m->derived[i];
    if (x->buffer < 0 || x->buffer >= p->n_bufs || x->from < 0 || x->from >= p->n_bufs)
      return bad(d, p, "derived entry %zu refers to buffers %d and %d of %d", i, x->buffer,
                 x->from, p->n_bufs);
    if (p->bufs[x->buffer].init_from != -1)
      return bad(d, p, "buffer %d ('%s') is derived twice", x->buffer, p->bufs[x->buffer].name);
    p->bufs[x->buffer].init_from = x->from;
  }
  p->n_inputs = (int32_t)m->n_inputs;
  p->inputs = dup_ids(p, m->inputs, m->n_inputs);
  p->n_outputs = (int32_t)m->n_outputs;
  p->outputs = dup_ids(p, m->outputs, m->n_outputs);
  if (!p->inputs || !p->outputs) goto oom;
  return 0;
oom:
  return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory reading the plan", p->path);
}

/* ---- write (plan_write.c) ----------------------------------------------------------- */

void apx_plan_header_encode(uint8_t b[APX_PLAN_HEADER_BYTES], uint32_t version, uint64_t meta_len,
                            uint64_t data_len, uint32_t checksum) {
  Header h = {0};
  h.version = version;
  h.meta_offset = APX_PLAN_HEADER_BYTES;
  h.meta_len = meta_len;
  h.data_offset = align_up(APX_PLAN_HEADER_BYTES + meta_len);
  h.data_len = data_len;
  h.checksum = checksum;
  header_encode(&h, b);
}

/* The kernel checks (apx_plan_check_kernels) of a plan being written, on a thread of their
 * own: they only read the plan, the writer only reads it too, and on the 100k-node chain each
 * takes about as long as the other (0.1-0.2 s). */
typedef struct KernelCheck {
  const ApxPlan *p;
  ApxPlanCheckScratch *scratch;
  ApxDiag d; /* the thread's own; copied to the caller's when it failed */
  int rc;
  int started, joined;
  pthread_t thread;
} KernelCheck;

static void *kernel_check_main(void *arg) {
  KernelCheck *c = arg;
  c->rc = apx_plan_check_kernels_in(c->p, c->scratch, &c->d);
  return NULL;
}

/* Waits for the checks; their error, if any, goes to d, in place of an I/O error recorded
 * meanwhile (an invalid plan says more). 0 or -1. */
static int kernel_check_join(void *ctx, ApxDiag *d) {
  KernelCheck *c = ctx;
  if (c->started && !c->joined) pthread_join(c->thread, NULL);
  c->joined = 1;
  if (c->rc == 0) return 0;
  d->code = c->d.code;
  memcpy(d->msg, c->d.msg, sizeof d->msg);
  return -1;
}

static int write_checked(ApxPlan *p, const ApxPlanAhead *ahead, const char *path, int validate,
                         ApxDiag *d) {
  const char *saved_path = p->path;
  p->path = path; /* messages name the file being written */
  int rc = -1;
  KernelCheck c = {.p = p};
  apx_diag_init(&c.d);
  c.d.quiet = 1;
  if (validate && apx_plan_validate(p, d)) goto out;
  c.scratch = apx_plan_check_scratch_new(p); /* this thread's memory (plan_validate.h) */
  c.started = pthread_create(&c.thread, NULL, kernel_check_main, &c) == 0;
  if (!c.started) c.rc = apx_plan_check_kernels_in(p, c.scratch, &c.d); /* no thread: here */
  /* the rename would replace a device or FIFO (as root, even /dev/null) */
  if (apx_exists_not_regular(path)) {
    if (kernel_check_join(&c, d) == 0)
      apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not a regular file (refusing to replace it)", path);
    goto out;
  }
  rc = apx_plan_write_file_ahead(p, ahead, path, kernel_check_join, &c, d);
  /* a write that failed before the gate (rc -1): the checks still read the plan */
  if (!c.joined) kernel_check_join(&c, d);
out:
  apx_plan_check_scratch_free(c.scratch);
  p->path = saved_path;
  return rc;
}

int apx_plan_write(ApxPlan *p, const char *path, ApxDiag *d) { return write_checked(p, NULL, path, 1, d); }

int apx_plan_write_validated(ApxPlan *p, const char *path, ApxDiag *d) {
  return write_checked(p, NULL, path, 0, d);
}

int apx_plan_write_validated_ahead(ApxPlan *p, const ApxPlanAhead *ahead, const char *path, ApxDiag *d) {
  return write_checked(p, ahead, path, 0, d);
}

/* ---- read ----------------------------------------------------------------------------- */

/* CRC32C of the file with the checksum field as zero. Read with pread in large chunks:
 * faulting a multi-GiB mapping in page by page is several times slower. */
static int file_crc(int fd, uint64_t size, const uint8_t *head, uint32_t *out) {
  uint8_t hz[APX_PLAN_HEADER_BYTES];
  memcpy(hz, head, sizeof hz);
  memset(hz + 48, 0, 4);
  uint32_t crc = apx_crc32c(0, hz, sizeof hz);
  size_t cap = (size_t)4 << 20;
  uint8_t *buf = malloc(cap);
  if (!buf) return -1;
  uint64_t pos = APX_PLAN_HEADER_BYTES;
  while (pos < size) {
    size_t want = size - pos < cap ? (size_t)(size - pos) : cap;
    ssize_t k = pread(fd, buf, want, (off_t)pos);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      free(buf);
      if (k == 0) errno = EIO;
      return -1;
    }
    crc = apx_crc32c(crc, buf, (size_t)k);
    pos += (uint64_t)k;
  }
  free(buf);
  *out = crc;
  return 0;
}

int apx_plan_read(ApxPlan *p, const char *path, ApxDiag *d) {
  p->path = apx_arena_strdup(&p->arena, path);
  if (!p->path) return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: out of memory", path);
  /* a regular file (a FIFO or /dev/zero is refused at open), its header checked against its
   * size before anything else is read; then exactly that many bytes are mapped */
  ApxInFile f;
  if (apx_infile_open(&f, path, "plan", d)) return -1;
  uint64_t size = f.size;
  uint8_t b[APX_PLAN_HEADER_BYTES];
  if (size < APX_PLAN_HEADER_BYTES) {
    apx_infile_close(&f);
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: not an apexc plan (%" PRIu64 " bytes, shorter than its header)",
                          path, size);
  }
  if (apx_infile_pread(&f, b, sizeof b, 0, d)) {
    apx_infile_close(&f);
    return -1;
  }
  int hrc = 0;
  Header h;
  h.version = apx_le_get_u32(b + 8);
  h.flags = apx_le_get_u32(b + 12);
  h.meta_offset = apx_le_get_u64(b + 16);
  h.meta_len = apx_le_get_u64(b + 24);
  h.data_offset = apx_le_get_u64(b + 32);
  h.data_len = apx_le_get_u64(b + 40);
  h.checksum = apx_le_get_u32(b + 48);
  for (int i = 52; i < 64; i++)
    if (b[i]) h.flags |= 0x80000000u;
  if (memcmp(b, k_magic, 8))
    hrc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: not an apexc plan (bad magic)", path);
  else if (h.version < APX_PLAN_FORMAT_VERSION_MIN || h.version > APX_PLAN_FORMAT_VERSION)
    hrc = apx_diag_error(d, APX_EXIT_BAD_INPUT,
                         "%s: plan format version %u, this apexrun reads versions %u to %u "
                         "(recompile the model with this apexc)",
                         path, h.version, APX_PLAN_FORMAT_VERSION_MIN, APX_PLAN_FORMAT_VERSION);
  else if (h.flags)
    hrc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: corrupt plan header (unknown flags)", path);
  else if (h.meta_offset != APX_PLAN_HEADER_BYTES || h.meta_len > size ||
           h.data_offset != align_up(APX_PLAN_HEADER_BYTES + h.meta_len) || h.data_offset > size)
    hrc = apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: corrupt plan header (section offsets)", path);
  else if (h.data_len != size - h.data_offset)
    hrc = apx_diag_error(d, APX_EXIT_BAD_INPUT,
                         "%s: truncated or padded plan: %" PRIu64 " bytes, header says %" PRIu64,
                         path, size, h.data_offset + h.data_len);
  if (hrc) {
    apx_infile_close(&f);
    return -1;
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (map == MAP_FAILED) {
    apx_infile_close(&f);
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot map the plan: %s", path, strerror(errno));
  }
  p->map = map;
  p->map_len = (size_t)size;
  uint32_t crc;
  int crc_rc = file_crc(f.fd, size, b, &crc);
  apx_infile_close(&f);
  if (crc_rc)
    return apx_diag_error(d, APX_EXIT_RUNTIME, "%s: cannot read the plan: %s", path, strerror(errno));
  if (crc != h.checksum)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT,
                          "%s: plan checksum mismatch (file corrupt): stored %08x, computed %08x",
                          path, h.checksum, crc);
  const uint8_t *mb = map;
  Apexc__Plan *m = apexc__plan__unpack(NULL, (size_t)h.meta_len, mb + h.meta_offset);
  if (!m)
    return apx_diag_error(d, APX_EXIT_BAD_INPUT, "%s: corrupt plan metadata (protobuf)", path);
  int rc = from_message(p, m, d);
  apexc__plan__free_unpacked(m, NULL);
  if (rc) return -1;
  if (p->format_version != h.version)
    return bad(d, p, "metadata version %u differs from header version %u", p->format_version,
               h.version);
  if (p->data_bytes != h.data_len)
    return bad(d, p, "metadata data size %" PRIu64 " differs from header %" PRIu64, p->data_bytes,
               h.data_len);
  if (apx_plan_validate(p, d) || apx_plan_check_kernels(p, d)) return -1;
  apx_plan_index(p); /* for the runtime's lookups (out of memory: they scan instead) */
  for (int32_t i = 0; i < p->n_bufs; i++)
    if (p->bufs[i].data_len) p->bufs[i].data = mb + h.data_offset + p->bufs[i].data_offset;
  for (int32_t i = 0; i < p->n_blobs; i++) p->blobs[i].data = mb + h.data_offset + p->blobs[i].data_offset;
  return 0;
}

/* ---- dump ----------------------------------------------------------------------------- */

static void fmt_bytes(char *buf, size_t cap, int64_t n) {
  if (n < 0)
    snprintf(buf, cap, "?");
  else if (n < 10 * 1024)
    snprintf(buf, cap, "%" PRId64 " B", n);
  else if (n < 10ll * 1024 * 1024)
    snprintf(buf, cap, "%.1f KiB", (double)n / 1024.0);
  else if (n < 10ll * 1024 * 1024 * 1024)
    snprintf(buf, cap, "%.1f MiB", (double)n / (1024.0 * 1024.0));
  else
    snprintf(buf, cap, "%.2f GiB", (double)n / (1024.0 * 1024.0 * 1024.0));
}

static void dump_i64s(FILE *f, const int64_t *v, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? "," : "", v[i]);
  fputc(']', f);
}

/* Names instead of numbers in the dump (the same spellings as apexc's flags). */
static const char *on_off(int32_t b) { return b ? "on" : "off"; }
static const char *optimizer_name(int32_t k) {
  return k == APX_OPTIM_SGD ? "sgd" : k == APX_OPTIM_ADAMW ? "adamw" : k == APX_OPTIM_LAMB ? "lamb" : "unknown";
}
static const char *schedule_name(int32_t s) { /* runtime/lr_schedule.h ApxLrSchedule */
  return s == 0 ? "constant" : s == 1 ? "cosine" : s == 2 ? "linear" : "unknown";
}

/* Every field by name (attrs.def), " {alpha=1.5 beta=1 ...}"; nothing for ops without. */
static void dump_attrs(FILE *f, ApxOp op, const void *a) {
  char buf[1024];
  apx_attrs_format(op, a, buf, sizeof buf);
  if (buf[0]) fprintf(f, " {%s}", buf);
}

static const char *buf_name(const ApxPlan *p, int32_t id) {
  return id >= 0 && id < p->n_bufs ? p->bufs[id].name : "-";
}

void apx_plan_dump(const ApxPlan *p, FILE *f) {
  char b1[32], b2[32], b3[32], b4[32], b5[32];
  fprintf(f, "plan %s: format %u, attrs ABI %u, producer %s\n", p->path, p->format_version,
          p->attrs_abi, p->producer);
  fprintf(f, "model: %s (%" PRIu64 " bytes, crc32c %08x)\n", p->model_name, p->model_bytes,
          p->model_crc32c);
  const ApxPlanOptions *o = &p->opts;
  fprintf(f, "options: O%d half=%s cast_model_type=%s keep_batchnorm_fp32=%s master_weights=%s "
          "training=%s\n", o->opt_level, apx_dtype_short(o->half), apx_dtype_short(o->cast_model_type),
          on_off(o->keep_batchnorm_fp32), on_off(o->master_weights), on_off(o->training));
  fprintf(f, "loss scale: %s %g (min %g, max %g, window %d, hysteresis %d)\n",
          o->loss_scale_mode ? "dynamic" : "static", o->loss_scale, o->min_loss_scale,
          o->max_loss_scale, o->scale_window, o->hysteresis);
  fprintf(f, "optimizer: %s lr=%g momentum=%g betas=%g,%g eps=%g weight_decay=%g "
          "nesterov=%s clip_grad_norm=%g accumulate=%d warmup_steps=%d lr_schedule=%s total_steps=%" PRId64
          " seed=%" PRIu64 "\n", optimizer_name(o->optimizer), o->lr, o->momentum, o->beta1, o->beta2, o->eps,
          o->weight_decay, on_off(o->nesterov), o->clip_grad_norm, o->accumulate, o->warmup_steps,
          schedule_name(o->schedule), o->total_steps, o->seed);
  fprintf(f, "buckets: %g MiB (first %g MiB), allreduce_fp32=%s, predivide=%g, sync_bn=%s\n",
          o->bucket_mb, o->first_bucket_mb, on_off(o->allreduce_fp32), o->grad_predivide, on_off(o->sync_bn));
  fmt_bytes(b1, sizeof b1, p->mem.arena_bytes);
  fmt_bytes(b2, sizeof b2, p->mem.peak_live_bytes);
  fmt_bytes(b3, sizeof b3, p->mem.no_reuse_bytes);
  fmt_bytes(b4, sizeof b4, p->mem.persistent_bytes);
  fmt_bytes(b5, sizeof b5, (int64_t)p->data_bytes);
  fprintf(f, "memory: arena %s, lower bound %s (arena/bound %.3f), no reuse %s (arena/no-reuse "
          "%.3f), persistent %s, data section %s\n", b1, b2,
          p->mem.peak_live_bytes > 0 ? (double)p->mem.arena_bytes / (double)p->mem.peak_live_bytes : 1.0,
          b3, p->mem.no_reuse_bytes > 0 ? (double)p->mem.arena_bytes / (double)p->mem.no_reuse_bytes : 1.0,
          b4, b5);
  fputs("inputs:", f);
  for (int32_t i = 0; i < p->n_inputs; i++) fprintf(f, " %s(#%d)", buf_name(p, p->inputs[i]), p->inputs[i]);
  fputs("\noutputs:", f);
  for (int32_t i = 0; i < p->n_outputs; i++)
    fprintf(f, " %s(#%d)", buf_name(p, p->outputs[i]), p->outputs[i]);
  fprintf(f, "\nloss: %s\n", p->loss >= 0 ? buf_name(p, p->loss) : "(none)");
  for (int32_t i = 0; i < p->n_blobs; i++) {
    fmt_bytes(b1, sizeof b1, (int64_t)p->blobs[i].data_len);
    fprintf(f, "blob %s: %s data@%" PRIu64 "\n", p->blobs[i].name, b1, p->blobs[i].data_offset);
  }
  fprintf(f, "buffers (%d):\n", p->n_bufs);
  for (int32_t i = 0; i < p->n_bufs; i++) {
    const ApxPlanBuffer *b = &p->bufs[i];
    fprintf(f, "  #%-4d %-24s %-10s %-5s ", i, b->name, apx_plan_kind_name(b->kind),
            apx_dtype_short(b->dtype));
    dump_i64s(f, b->dims, b->rank);
    fmt_bytes(b1, sizeof b1, b->bytes);
    fprintf(f, " %s@%" PRId64 " %s", apx_plan_region_name(b->region), b->offset, b1);
    if (b->alias_of >= 0) fprintf(f, " alias-of #%d", b->alias_of);
    if (b->origin >= 0) fprintf(f, " origin #%d", b->origin);
    if (b->init_from >= 0) fprintf(f, " derived-from #%d", b->init_from);
    if (b->data_len) fprintf(f, " data@%" PRIu64, b->data_offset);
    if (b->flags & APX_VALF_GRAPH_OUTPUT) fputs(" output", f);
    if (b->flags & APX_VALF_LOSS) fputs(" loss", f);
    if (b->flags & APX_VALF_GRAD) fputs(" grad", f);
    if (b->flags & APX_VALF_FROZEN) fputs(" frozen", f);
    if (b->flags & APX_VALF_MASTER) fputs(" master", f);
    fputc('\n', f);
  }
  fprintf(f, "kernels (%d):\n", p->n_kernels);
  for (int32_t k = 0; k < p->n_kernels; k++) {
    const ApxPlanKernel *kn = &p->kernels[k];
    fprintf(f, "  %-4d %-9s %-16s %-20s %-4s (", k, apx_plan_section_name(kn->section),
            apx_op_name(kn->op), kn->node,
            kn->compute ? apx_dtype_short(kn->compute) : "-");
    for (int i = 0; i < kn->n_in; i++) fprintf(f, "%s%s", i ? ", " : "", buf_name(p, kn->in[i]));
    fputs(") -> (", f);
    for (int i = 0; i < kn->n_out; i++) fprintf(f, "%s%s", i ? ", " : "", buf_name(p, kn->out[i]));
    fputc(')', f);
    dump_attrs(f, kn->op, kn->attrs);
    fputc('\n', f);
  }
  if (p->n_decisions) {
    fprintf(f, "precision decisions (%d):\n", p->n_decisions);
    for (int32_t i = 0; i < p->n_decisions; i++) {
      const ApxPlanDecision *dc = &p->decisions[i];
      fprintf(f, "  %-20s %-16s %-5s rule %s(%d) casts %d%s%s\n", dc->node, dc->op,
              apx_dtype_short(dc->decision), dc->rule[0] ? dc->rule : "-", dc->rule_code,
              dc->casts_added, dc->detail[0] ? ": " : "", dc->detail);
    }
  }
  if (p->n_buckets) {
    fprintf(f, "gradient buckets (%d):\n", p->n_buckets);
    for (int32_t i = 0; i < p->n_buckets; i++) {
      const ApxPlanBucket *bk = &p->buckets[i];
      fmt_bytes(b1, sizeof b1, bk->bytes);
      fprintf(f, "  bucket %d %s %s ready after kernel %d:", bk->id, apx_dtype_short(bk->dtype), b1,
              bk->ready_at);
      for (int32_t m = 0; m < bk->n_members; m++) fprintf(f, " %s", buf_name(p, bk->members[m]));
      fputc('\n', f);
    }
  }
}
