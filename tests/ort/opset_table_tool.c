/* opset_table_tool.c - prints compiler/onnx_opset.c's schema facts for the table check
 * (opset_table_check.py compares them with onnx.defs): one line per op --emit-onnx writes,
 *   OP BF16_SINCE [OPSET:WHEN ...]        (BF16_SINCE 0: no opset admits bfloat16) */
#include <stdio.h>

#include "compiler/onnx_opset.h"

int main(void) {
  int n = apx_onnx_opset_table(NULL, NULL, NULL, 0);
  ApxOp ops[APX_OP_COUNT];
  int64_t since[APX_OP_COUNT];
  const char *changes[APX_OP_COUNT];
  n = apx_onnx_opset_table(ops, since, changes, n < APX_OP_COUNT ? n : APX_OP_COUNT);
  printf("max_opset %d\n", APX_ONNX_MAX_OPSET);
  for (int i = 0; i < n; i++)
    printf("%s %lld%s%s\n", apx_op_name(ops[i]), (long long)since[i], changes[i][0] ? " " : "", changes[i]);
  return 0;
}
