/* tensor.c - names of kernel statuses (tensor.h). */
#include "kernels/tensor.h"

const char *apx_status_name(ApxStatus s) {
  switch (s) {
    case APX_STATUS_OK: return "ok";
    case APX_STATUS_BAD_INPUT: return "bad input";
    case APX_STATUS_UNSUPPORTED: return "not supported yet";
    case APX_STATUS_OOM: return "out of memory";
    case APX_STATUS_RUNTIME: return "runtime failure";
  }
  return "unknown status";
}
