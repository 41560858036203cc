/* loss_list.h - the losses a training graph is seeded from: `--loss NAME` or `--loss A,B`
 * (DESIGN.md 9: several losses, each with its own dynamic loss scaler, as Apex's
 * amp.initialize(num_losses=N) / amp.scale_loss(loss_id=i)).
 *
 * apx_loss_list_resolve splits the comma-separated list and finds each name among g's
 * values. Errors (returned as -1 with one line in err, without the file name): an empty name
 * ("--loss 'a,,b': empty name"), an unknown one ("--loss 'a,x': no such value 'x'"), one
 * named twice, more than APX_MAX_LOSSES. */
#ifndef APX_LOSS_LIST_H
#define APX_LOSS_LIST_H

#include <stddef.h>

#include "ir/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define APX_MAX_LOSSES 8

/* Fills ids[0..n) (cap entries) with the value ids of list's names in order; returns n >= 1
 * or -1 with the reason in err. */
int apx_loss_list_resolve(const ApxGraph *g, const char *list, int *ids, int cap, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif
#endif
