"""Parse kernel names into a short name, a family and the facts encoded in them.

Names are *parsed*, never looked up: the rules below read the structure every CUDA library
encodes in its kernel names, so a kernel never seen before still gets a sensible short name and
family. Four shapes are recognised:

* demangled C++ (``void cudnn::nchwToNhwcKernel<float, float, float, 0, 1, 0>(…)``): the short
  name is the qualified function name without return type, template arguments and parameters
  (``cudnn::nchwToNhwcKernel``); a functor found in the template arguments is kept
  (``at::elementwise_kernel<CUDAFunctor_add>``); library build tags such as ``__5x_cudnn`` are
  dropped; a wrapper whose only template argument is itself a kernel name
  (``cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_…>``) is parsed as that inner name;
* cuDNN/XMMA generated kernels (``sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_…
  _tilesize128x128x32_…``): arch ``sm90``, family ``xmma_fprop_implicit_gemm``, tile
  ``128x128x32``, precision ``tf32`` (the MMA input type: the second type group);
* CUTLASS generated kernels (``cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4``): arch
  ``sm80``, family ``cutlass_tensorop_gemm``, tile ``256x64x16`` (M x N x K), precision ``tf32``
  (``s`` + a tensor-op instruction shape is TF32 math on fp32 data);
* plain identifiers (tile-machine kernels such as ``gemm_f16_init_large_rows_…_k80_c112``): the
  short name is the name itself; the family is the leading words before the first data-type or
  parameter token (``gemm``); the precision lists the data-type tokens (``f16``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from functools import lru_cache


@dataclass(frozen=True)
class KernelName:
    short: str
    family: str
    arch: str | None = None  # e.g. sm90
    tile: str | None = None  # e.g. 128x128x32 (M x N x K)
    precision: str | None = None  # e.g. tf32, f16, f32
    variant: str | None = None  # e.g. segment_k_off, or the functor of an elementwise kernel

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)


FIELDS = ("short", "family", "arch", "tile", "precision", "variant")

# C++ scalar type names -> short precision names
_CPP_TYPES = {
    "float": "f32", "double": "f64", "half": "f16", "__half": "f16", "c10::Half": "f16",
    "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "c10::BFloat16": "bf16", "bfloat16": "bf16",
    "int8_t": "i8", "uint8_t": "u8", "int32_t": "i32", "int64_t": "i64",
    "__nv_fp8_e4m3": "fp8e4m3", "__nv_fp8_e5m2": "fp8e5m2",
}  # index-like types (int, char *, bool) are deliberately not precisions
_CPP_TYPE_RE = re.compile(
    r"(?<![\w:])(" + "|".join(re.escape(t) for t in sorted(_CPP_TYPES, key=len, reverse=True))
    + r")(?![\w:])")
# one data type inside a generated name: f32, tf32, bf16, f16, fp8e4m3, i8, u64, s8 …
_DTYPE = r"(?:tf32|bf16|fp8e4m3|fp8e5m2|e4m3|e5m2|fp\d+|f\d+|i\d+|u\d+|s\d+|b\d+)"
_DTYPE_GROUP = re.compile(rf"^(?:{_DTYPE})+$")
_DTYPE_ONE = re.compile(_DTYPE)
_PLAIN_DTYPE = re.compile(r"^(?:tf32|bf16|fp8|f\d+|i\d+|u\d+|s\d+)$")
# a parameter token of a generated tile-kernel name: letters then digits (k80, c112, b64x16, sm4)
_PARAM = re.compile(r"^[a-z]{1,3}\d+(?:x\d+)*$")
_BUILD_TAG = re.compile(r"__\d\w*$")  # cask_plugin__5x_cudnn -> cask_plugin
_FUNCTOR = re.compile(r"\b(\w*Functor\w*|\w+_kernel_cuda|\w+_functor)\b")
_CUTLASS_OP = re.compile(r"^([a-z]*?)(\d{3,})?(gemm|conv\d?d?\w*|fprop|dgrad|wgrad)$")
_CUTLASS_LETTER = {"s": "f32", "h": "f16", "d": "f64", "i": "i8", "c": "c32", "z": "c64",
                   "bf": "bf16", "e": "fp8"}


def _split_top(text: str, open_: str, close: str) -> tuple[str, str | None, str]:
    """``head<args>tail`` at the first top-level ``open_`` -> (head, args, tail)."""
    i = text.find(open_)
    if i < 0:
        return text, None, ""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return text[:i], text[i + 1:j], text[j + 1:]
    return text[:i], text[i + 1:], ""  # unbalanced: everything after is the argument list


def _top_level_args(args: str) -> list[str]:
    out, depth, cur = [], 0, []
    for c in args:
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _clean_qualified(name: str) -> str:
    parts = [_BUILD_TAG.sub("", p) for p in name.split("::")]
    return "::".join(p for p in parts if p)


def _parse_cpp(name: str) -> KernelName:
    text = name.strip()
    # head: everything before the first top-level '<' or '(' (return type + qualified name)
    lt, lp = text.find("<"), text.find("(")
    if lt >= 0 and (lp < 0 or lt < lp):
        head, targs, _ = _split_top(text, "<", ">")
    else:
        head, targs = text[:lp] if lp >= 0 else text, None
    qual = head.split()[-1] if head.split() else head
    qual = _clean_qualified(qual)
    args = _top_level_args(targs) if targs else []
    # a wrapper whose only template argument is a kernel name: parse the inner name
    if len(args) == 1 and re.fullmatch(r"[A-Za-z_]\w*", args[0]) and (
            args[0].startswith(("cutlass_", "sm")) or "_xmma_" in args[0]):
        inner = parse(args[0])
        return inner
    precision = None
    if targs:
        m = _CPP_TYPE_RE.search(targs)  # the first scalar type mentioned in the template args
        if m:
            precision = _CPP_TYPES[m.group(1)]
    variant = None
    if targs:
        found = _FUNCTOR.findall(targs)  # the innermost (last) functor: MulFunctor in
        if found:                        # BinaryFunctor<…, MulFunctor<float>>
            variant = _BUILD_TAG.sub("", found[-1])
    short = f"{qual}<{variant}>" if variant else qual
    return KernelName(short=short, family=qual, precision=precision, variant=variant)


def _parse_xmma(name: str) -> KernelName:
    m = re.match(r"^(sm\d+)_(xmma_.*)$", _BUILD_TAG.sub("", name))
    assert m is not None
    arch, rest = m.group(1), m.group(2)
    tokens = rest.split("_")
    family, groups, tile, variant = [], [], None, []
    i = 0
    while i < len(tokens) and not _DTYPE_GROUP.match(tokens[i]):
        family.append(tokens[i])
        i += 1
    while i < len(tokens) and _DTYPE_GROUP.match(tokens[i]):
        groups.append(tokens[i])
        i += 1
    executing = False
    for t in tokens[i:]:
        if t.startswith("tilesize"):
            tile = t[len("tilesize"):]
        elif t == "execute":
            executing = True
        elif t == "kernel":
            executing = False
        elif executing and t:
            variant.append(t)
    precision = None
    if groups:
        g = groups[1] if len(groups) > 1 else groups[0]
        precision = _DTYPE_ONE.findall(g)[0]
    fam = "_".join(family)
    var = "_".join(variant) or None
    short = "_".join(x for x in (arch, fam, precision, tile, var) if x)
    return KernelName(short=short, family=fam, arch=arch, tile=tile, precision=precision,
                      variant=var)


def _parse_cutlass(name: str) -> KernelName:
    tokens = name.split("_")[1:]
    arch = opclass = op = letters = instr = None
    dtypes, dims, layout = [], [], None
    for t in tokens:
        if arch is None and opclass is None and t.isdigit():
            arch = f"sm{t}"
        elif t in ("tensorop", "simt", "wmma"):
            opclass = t
        elif op is None and _CUTLASS_OP.match(t):
            letters, instr, op = _CUTLASS_OP.match(t).groups()
        elif re.fullmatch(r"\d+x\d+", t):
            dims.append(t)
        elif t in ("nn", "nt", "tn", "tt"):
            layout = t
        elif _PLAIN_DTYPE.match(t) and op is None:
            dtypes.append(t)
    tile = None
    if dims:
        mn = dims[0]
        k = dims[1].split("x")[0] if len(dims) > 1 else None
        tile = f"{mn}x{k}" if k else mn
    precision = dtypes[0] if dtypes else None
    if precision is None and letters:
        precision = _CUTLASS_LETTER.get(letters, letters)
        if letters == "s" and opclass == "tensorop" and instr:
            precision = "tf32"  # fp32 operands on tensor cores: TF32 math
    family = "_".join(x for x in ("cutlass", opclass, op) if x)
    return KernelName(short=name, family=family, arch=arch, tile=tile, precision=precision,
                      variant=layout)


def _parse_plain(name: str) -> KernelName:
    tokens = name.split("_")
    family: list[str] = []
    for t in tokens:
        if _PLAIN_DTYPE.match(t) or _PARAM.match(t) or t.isdigit():
            break
        family.append(t)
    dtypes = [t for t in tokens if _PLAIN_DTYPE.match(t)]
    seen: list[str] = []
    for d in dtypes:
        if d not in seen:
            seen.append(d)
    return KernelName(short=name, family="_".join(family) or name,
                      precision="_".join(seen) or None)


@lru_cache(maxsize=65536)
def parse(name: str) -> KernelName:
    """Parse one kernel name (demangled C++, XMMA, CUTLASS or a plain identifier).

    A name the grammar cannot take apart (``<script>alert(1)</script>``, stray punctuation) keeps
    itself as short name and family: two different kernels never merge into an empty name.
    """
    n = (name or "").strip()
    if not n:
        return KernelName(short="", family="")
    if re.match(r"^sm\d+_xmma_", n):
        k = _parse_xmma(n)
    elif re.match(r"^cutlass_", n) and re.fullmatch(r"\w+", n):
        k = _parse_cutlass(n)
    elif re.search(r"[<>():\s]", n):
        k = _parse_cpp(n)
    else:
        k = _parse_plain(n)
    if not k.short or not k.family:
        k = replace(k, short=k.short or n, family=k.family or k.short or n)
    return k


# AMD code-object suffixes: ``foo.kd`` (rocprof v1/v2) and ``foo(int) [clone .kd]``.
_KD_SUFFIX = re.compile(r"(?:\s*\[clone \.kd\]|\.kd)\s*$")


@lru_cache(maxsize=65536)
def normalise(name: str) -> str:
    """The tool-independent family of a profiler's kernel name: AMD ``.kd`` / ``[clone .kd]``
    suffixes stripped, and for a demangled C++ name the qualified function name alone (return
    type, template arguments and parameter list stripped: ``void at::native::vectorized_
    elementwise_kernel<4, …>(int, …)`` -> ``at::native::vectorized_elementwise_kernel``).
    Plain identifiers (``triton_poi_fused_add_0``, ``Cijk_Ailk_Bljk_…``) are kept whole.
    """
    n = (name or "").strip()
    prev = None
    while prev != n:
        prev, n = n, _KD_SUFFIX.sub("", n).strip()
    if not re.search(r"[<>()\s]", n):
        return n
    n = n.replace("(anonymous namespace)", "{anonymous}")
    lt, lp = n.find("<"), n.find("(")
    targs = None
    if lt >= 0 and (lp < 0 or lt < lp):
        head, targs, _ = _split_top(n, "<", ">")
    else:
        head = n[:lp] if lp >= 0 else n
    words = head.split()
    qual = words[-1] if words else head
    args = _top_level_args(targs) if targs else []
    if len(args) == 1 and re.fullmatch(r"[A-Za-z_]\w*", args[0]) and not args[0].isdigit() \
            and args[0].startswith(("cutlass_", "sm", "cutlass3x_")):
        return args[0]  # a wrapper around a generated kernel: cutlass::Kernel<cutlass_80_…>
    return (qual or n).replace("{anonymous}", "(anonymous namespace)")
