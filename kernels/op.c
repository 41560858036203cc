/* op.c - the op table expanded: names, traits, attribute sizes. */
#include "kernels/op.h"

#include <string.h>

static const ApxOpInfo op_table[APX_OP_COUNT] = {
    [APX_OP_INVALID] = {"?", APX_PREC_PASS, 0, 0, 0, "ApxAttrNone"},
#define APX_OP(ID, NAME, PREC, FLAGS, STATIC, ATTRS)                                       \
  [APX_OP_##ID] = {NAME, APX_PREC_##PREC, (FLAGS), (STATIC), sizeof(ATTRS), #ATTRS},
#define V1 APX_OPF_V1
#define FOLD APX_OPF_FOLD
#define TIER2 APX_OPF_TIER2
#define LISTED APX_OPF_LISTED
#define INTERNAL APX_OPF_INTERNAL
#define ELEMWISE APX_OPF_ELEMWISE
#define INPLACE APX_OPF_INPLACE
#define SHAPEONLY APX_OPF_SHAPEONLY
#define MULTITENSOR APX_OPF_MULTITENSOR
#include "kernels/ops.def"
#undef APX_OP
#undef V1
#undef FOLD
#undef TIER2
#undef LISTED
#undef INTERNAL
#undef ELEMWISE
#undef INPLACE
#undef SHAPEONLY
#undef MULTITENSOR
};

const ApxOpInfo *apx_op_info(ApxOp op) {
  if ((int)op <= 0 || op >= APX_OP_COUNT) return &op_table[APX_OP_INVALID];
  return &op_table[op];
}

ApxOp apx_op_from_name(const char *name) {
  if (!name) return APX_OP_INVALID;
  for (int i = 1; i < APX_OP_COUNT; i++)
    if (strcmp(op_table[i].name, name) == 0) return (ApxOp)i;
  return APX_OP_INVALID;
}

const char *apx_prec_class_name(ApxPrecClass c) {
  switch (c) {
    case APX_PREC_HALF: return "half";
    case APX_PREC_FP32: return "fp32";
    case APX_PREC_PROMOTE: return "promote";
    case APX_PREC_PASS: return "pass";
    case APX_PREC_INHERIT: return "inherit";
    case APX_PREC_FIXED: return "fixed";
  }
  return "?";
}
