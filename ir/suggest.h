/* suggest.h - command-line spellings shared by apexc and apexrun (DESIGN.md 13): the
 * spellings users bring from Apex and PyTorch (underscores for dashes, --opt_level=O2,
 * =True/False) and "did you mean --X?" for an unknown option.
 *
 *   apx_flag_normalize   "--loss_scale=128" -> "--loss-scale=128": underscores become dashes
 *                        in the name (before '='), never in the value
 *   apx_flag_suggest     the known flag nearest to an unknown one by edit distance
 *                        (optimal string alignment: insert, delete, substitute, swap two
 *                        neighbours), when it is near enough to be a typo: at most
 *                        1 + len/5 edits (len: the longer name without its dashes), or the
 *                        unknown one is a unique prefix of a known one ("--check" is not)
 *   apx_bool_parse       true/false, 1/0, on/off, yes/no, any case ("True", "False": Python's) */
#ifndef APX_SUGGEST_H
#define APX_SUGGEST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes arg into buf (cap bytes) with '_' in its name part turned into '-' when arg starts
 * with "--"; returns 1 when something changed, 0 when buf holds arg unchanged, -1 when arg
 * does not fit (buf untouched: use arg as it is). */
int apx_flag_normalize(const char *arg, char *buf, size_t cap);

/* The name of `names` (NULL-terminated, each "--flag" or "-f") nearest to arg's name part
 * (before '='), or NULL when none is near enough (above). */
const char *apx_flag_suggest(const char *arg, const char *const *names);

/* Edit distance (optimal string alignment) between a[0..na) and b[0..nb); names are short:
 * distances over 64 characters are capped at 64. */
int apx_edit_distance(const char *a, size_t na, const char *b, size_t nb);

/* 1 true, 0 false, -1 not a boolean word. NULL (a bare flag) is true. */
int apx_bool_parse(const char *s);

#ifdef __cplusplus
}
#endif
#endif
