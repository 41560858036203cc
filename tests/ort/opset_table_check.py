#!/usr/bin/env python3
"""opset_table_check.py - compiler/onnx_opset.c's facts about ai.onnx's schemas agree with
onnx.defs (the onnx package of scripts/requirements.txt), for every op --emit-onnx writes:

  1. bf16 since, per float input and output slot: the first opset <= max_opset whose schema
     admits tensor(bfloat16) in that slot's type constraint (0 when none does): the op's
     value, or the table's inputK=OPSET exception for that input;
  2. form changes: every schema version between 13 and max_opset that removes or renames an
     input or attribute, makes one required, or changes the outputs is in the table (changes
     that only add optional attributes/inputs or widen types keep a written node valid and
     must not be listed); every listed change is a real schema version.

    opset_table_check.py TOOL          (TOOL: tests/ort/opset_table_tool)
Last line: "N passed, M failed".
"""
import subprocess
import sys

import onnx.defs as D


def schema(op, v):
    try:
        return D.get_schema(op, v)
    except Exception:  # noqa: BLE001 - no schema at that opset
        return None


def slot_types(s, kind, i):
    """Allowed types of input/output i of schema s (the last formal for variadic ones)."""
    params = s.inputs if kind == "in" else s.outputs
    if not params:
        return set()
    p = params[min(i, len(params) - 1)]
    for tc in s.type_constraints:
        if tc.type_param_str == p.type_str:
            return set(tc.allowed_type_strs)
    return {p.type_str}


def slot_since(op, kind, i, max_opset):
    """First opset <= max_opset at which that slot admits tensor(bfloat16); 0: never."""
    for v in range(1, max_opset + 1):
        s = schema(op, v)
        if s and s.since_version == v and "tensor(bfloat16)" in slot_types(s, kind, i):
            return v
    return 0


def expected_slots(op, max_opset):
    """{("in", i) or ("out", i): since} for every float slot of the op at max_opset."""
    s = schema(op, max_opset)
    out = {}
    for kind, params in (("in", s.inputs), ("out", s.outputs)):
        for i in range(len(params)):
            if "tensor(float)" in slot_types(s, kind, i):
                out[(kind, i)] = slot_since(op, kind, i, max_opset)
    return out


def breaking_versions(op, max_opset):
    """Versions in (13, max_opset] at which a node in the previous form stops being valid."""
    out = []
    prev = schema(op, 13)
    for v in range(14, max_opset + 1):
        s = schema(op, v)
        if not s or not prev or s.since_version != v:
            continue
        pi = [(i.name, str(i.option)) for i in prev.inputs]
        si = [(i.name, str(i.option)) for i in s.inputs]
        pa = {k: a.required for k, a in prev.attributes.items()}
        sa = {k: a.required for k, a in s.attributes.items()}
        inputs_ok = si[:len(pi)] == pi and all("Optional" in o for _, o in si[len(pi):])
        attrs_ok = set(pa) <= set(sa) and all(not sa[k] for k in set(sa) - set(pa)) and \
            all(sa[k] == pa[k] for k in pa)
        outs_ok = [o.name for o in prev.outputs] == [o.name for o in s.outputs]
        if not (inputs_ok and attrs_ok and outs_ok):
            out.append(v)
        prev = s
    return out


def main():
    lines = subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True).stdout.splitlines()
    max_opset = int(lines[0].split()[1])
    passed = failed = 0
    for line in lines[1:]:
        parts = line.split()
        op, since = parts[0], int(parts[1])
        slots = {int(x.split("=")[0][5:]): int(x.split("=")[1]) for x in parts[2:] if x.startswith("input")}
        changes = [x for x in parts[2:] if ":" in x]
        problems = []
        for (kind, i), want in sorted(expected_slots(op, max_opset).items()):
            got = slots.get(i, since) if kind == "in" else since
            if got != want:
                problems.append(f"{kind}put {i}: bf16 since {got} in the table, onnx.defs says {want}")
        listed = sorted({int(c.split(":")[0]) for c in changes})
        real = breaking_versions(op, max_opset)
        # a conditional change (Split without its split input, ReduceMean with axes) is
        # listed at the version whose schema changed; BatchNormalization's change at 14
        # concerns models older than 14, found by the same schema diff
        for v in real:
            if v not in listed:
                problems.append(f"opset {v} changes its form (onnx.defs) but the table does not list it")
        for v in listed:
            s = schema(op, v)
            if not s or s.since_version != v:
                problems.append(f"the table lists a form change at opset {v}, which is no schema version")
        if problems:
            failed += 1
            print(f"FAIL {op}: " + "; ".join(problems))
        else:
            passed += 1
            print(f"ok   {op}: bf16 since {since or 'never'} {' '.join(parts[2:])}".rstrip())
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
