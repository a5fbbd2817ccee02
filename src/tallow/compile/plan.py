"""A trace turned into one generated Python function that replays it.

The replay calls the recorded backend functions directly, in order, on the storages
of the new arguments: no Tensor objects, no argument checks, no autograd records,
no attribute look-ups (each function and constant is bound by name in the
generated code's namespace). Before that the plan

* drops calls whose results nothing uses (dead code, often part of a gradient
  no one asked for);
* replaces each run of fusable element-wise calls by one fused kernel call
  (``fusion_cpu``), whose intermediate values need no buffer at all and whose
  other buffers are planned once;
* deletes each intermediate storage after its last use, so memory is given back
  as early as in eager mode;
* notes in-place writes to Vars and arguments (``Var.set``) in their version
  counters, as eager writes do, so graphs recorded before stay protected.
"""

from __future__ import annotations

import math

from ..errors import CaptureError
from ..versions import bump
from .. import dtype as dt
from . import cpu_direct, cpu_lower, fusion_cpu, fusion_gpu
from .recorder import Ref


def _gone(slot):
    raise CaptureError(
        f"compile: a tensor the compiled function captured from outside (storage slot {slot}) "
        "no longer exists (a model moved with .to() or reloaded?); call .reset() on the "
        "compiled function to record it again")


class Plan:
    """The replay of one trace: ``plan.run(input_storages)`` returns the output storages."""

    def __init__(self, trace, fuse=True):
        calls, slots = trace.calls, trace.slots
        returned = {s for s, _lay in trace.outputs}
        live = _live_calls(calls, returned)
        last_use = {}
        for i, call in enumerate(calls):
            if live[i]:
                for s in call.refs():
                    last_use[s] = i
        groups = {}
        if fuse:
            for members, shape, dtype in fusion_cpu.find_groups(calls, slots, live):
                groups[members[0]] = (members, shape, dtype, "cpu")
            if any(s.cls_name == fusion_gpu.BACKEND for s in slots):
                for members, shape, dtype in fusion_gpu.find_groups(calls, slots, live):
                    groups[members[0]] = (members, shape, dtype, "gpu")
        ns = {"_gone": _gone, "_bump": bump}
        self._consts = 0
        lines = ["def replay(inputs):"]
        self._locals, self._deleted = set(), set()
        self._slots, self._returned, self._last_use = slots, returned, last_use
        self._written = trace.written
        self._lower = cpu_lower.Lowering(slots, returned) if fuse else None
        for slot in slots:
            n = slot.slot_no
            if slot.kind == "input":
                lines.append(f"    s{n} = inputs[{slot.index}]")
            elif slot.kind == "external":
                ns[f"w{n}"] = slot.ref
                lines.append(f"    s{n} = w{n}()")
                lines.append(f"    if s{n} is None: _gone({n})")
        self.n_calls = 0
        self.n_fused_ops = 0
        self.n_groups = 0
        self.n_lowered = 0
        skip = set()  # copies done by a fused group's stores
        into_call = self._into_call = {}
        i = 0
        while i < len(calls):
            if i in groups:
                members, shape, dtype, where = groups[i]
                last = members[-1]
                made = {calls[j].out for j in members}
                after = {s for s in made if last_use.get(s, -1) > last or s in returned}
                g = None
                if after and where == "cpu" and fusion_cpu.stores_a_mask(slots, after):
                    del groups[i]  # a mask is needed later: run the calls one by one
                    continue
                if after and where == "cpu":
                    into = self._store_into(calls, slots, live, last, after, returned, last_use, shape, dtype)
                    g = fusion_cpu.FusedGroup(calls, slots, members, shape, dtype, after, returned, into)
                    for t in g.stored_into:
                        skip.add(into_call[t])
                elif after:
                    g = fusion_gpu.GpuFusedGroup(calls, slots, members, shape, dtype, after)
                    if not g.ok:  # more buffers than one dispatch binds: run the calls
                        g = None
                        del groups[i]
                        continue
                if g is not None:
                    name = f"G{self.n_groups}"
                    ns[name] = g
                    outs = "".join(f"s{s}, " for s in g.outputs)
                    ins = ", ".join(f"s{s}" for s in g.inputs)
                    lines.append(f"    {outs} = {name}({ins})" if outs else f"    {name}({ins})")
                    self._locals.update(g.outputs)
                    self.n_groups += 1
                    self.n_fused_ops += g.n_ops
                    lines.extend(self._frees(members, calls, i, last))
                i = last + 1
                continue
            call = calls[i]
            if live[i] and i not in skip:
                lines.append("    " + self._call_line(i, call, ns))
                lines.extend(self._frees([i], calls, i, i))
                self.n_calls += 1
            i += 1
        for n in sorted(trace.written):
            lines.append(f"    _bump(s{n})")
        lines.append("    return (" + "".join(f"s{s}, " for s, _lay in trace.outputs) + ")")
        self.source = "\n".join(lines)
        exec(compile(self.source, "<tallow.compile replay>", "exec"), ns)
        self.run = ns["replay"]

    def _store_into(self, calls, slots, live, last, after, returned, last_use, shape, dtype):
        """{value slot: (target slot, layout)} for the group's values whose only later
        use is the next live call, ``target.copy_into_inplace(layout, value, whole)``
        over the group's shape and dtype (``Var.set`` after an update)."""
        nxt = next((j for j in range(last + 1, len(calls)) if live[j]), None)
        if nxt is None:
            return {}
        call = calls[nxt]
        if call.name != "copy_into_inplace" or call.owner != "storage" or len(call.args) != 3:
            return {}
        dst_lay, src, src_lay = call.args
        if not isinstance(src, Ref) or src.slot not in after or src.slot in returned:
            return {}
        if last_use.get(src.slot) != nxt or src.slot == call.recv.slot:
            return {}
        target = slots[call.recv.slot]
        if target.dtype is not dtype or target.cls_name != "CpuStorage":
            return {}
        whole = src_lay.contiguous and src_lay.start_offset == 0 and src_lay.shape == shape
        if not (whole and dst_lay.contiguous and dst_lay.shape == shape):
            return {}
        self._into_call[call.recv.slot] = nxt
        return {src.slot: (call.recv.slot, dst_lay)}

    def _kernel(self, call):
        """The function a replay calls for ``call``: the recorded one, or a direct
        kernel where the replay knows better (see ``cpu_lower`` and ``cpu_direct``)."""
        if self._lower is not None:
            k = self._lower.kernel(call)
            if k is not None:
                self.n_lowered += 1
                return k
        if call.name == "matmul" and call.owner == "storage" and isinstance(call.args[1], Ref):
            lhs = self._slots[call.recv.slot]
            if (lhs.cls_name == "CpuStorage" and lhs.dtype in (dt.f32, dt.f64)
                    and call.args[1].slot in self._written):
                return cpu_direct.matmul_uncached
        return call.func

    def _const(self, value, ns):
        name = f"C{self._consts}"
        self._consts += 1
        ns[name] = value
        return name

    def _lit(self, v, ns):
        if isinstance(v, Ref):
            return f"s{v.slot}"
        t = type(v)
        if v is None or t in (bool, int, str) or (t is float and math.isfinite(v)):
            return repr(v)
        if t in (tuple, list) and any(isinstance(x, (Ref, tuple, list)) for x in v):
            body = "".join(self._lit(x, ns) + ", " for x in v)
            return f"({body})" if t is tuple else f"[{body}]"
        return self._const(v, ns)

    def _call_line(self, i, call, ns):
        fname = f"F{i}"
        ns[fname] = self._kernel(call)
        if call.owner == "storage":
            recv = self._lit(call.recv, ns)
        else:
            recv = self._const(call.recv, ns)
        args = [self._lit(a, ns) for a in call.args]
        if call.name == "adopt_numpy":
            args[0] = args[0] + ".copy()"  # the device takes the array over
        args += [f"{k}={self._lit(v, ns)}" for k, v in call.kwargs.items()]
        text = f"{fname}({', '.join([recv] + args)})"
        out = call.out
        if isinstance(out, int):
            self._locals.add(out)
            return f"s{out} = {text}"
        if isinstance(out, tuple):
            self._locals.update(o for o in out if o is not None)
            names = "".join(("_" if o is None else f"s{o}") + ", " for o in out)
            return f"{names} = {text}"
        return text

    def _frees(self, indices, calls, lo, hi):
        """``del`` lines for the values this replay made whose last read is in calls
        ``lo..hi``: memory goes back as early as in eager mode."""
        done = []
        for j in indices:
            for s in calls[j].refs():
                if (s in self._locals and s not in self._deleted and s not in self._returned
                        and self._slots[s].kind == "produced" and lo <= self._last_use.get(s, -1) <= hi):
                    self._deleted.add(s)
                    done.append(s)
        return [f"    del s{s}" for s in done]


def _live_calls(calls, returned):
    """Which calls a replay must run: in-place writes, and calls whose results are
    used by a live call or returned."""
    needed = set(returned)
    live = [False] * len(calls)
    for i in range(len(calls) - 1, -1, -1):
        call = calls[i]
        outs = call.out if isinstance(call.out, tuple) else (call.out,)
        if call.name.endswith("_inplace") or any(o is not None and o in needed for o in outs) \
                or call.out is None:
            live[i] = True
            needed.update(call.refs())
    return live
