#!/usr/bin/env python3
"""Which pages of its own executable a running process keeps resident, and whose code they are.

    python3 tests/scale-bench/exec-pages.py PID [--binary PATH] [--top 25]

Prints, for process PID (a `wasm-operator` replica, or any process):
  - VmRSS, RssAnon, RssFile (/proc/PID/status);
  - the executable's mappings (/proc/PID/smaps: Rss, Anonymous) and the pages present in each
    (/proc/PID/pagemap bit 63), text (r-xp) against its size and the ELF .text size;
  - the 64 KiB windows (virtually aligned: the default fault_around_bytes) holding present text
    pages, and how many are full (many full = pages mapped by fault-around, not because they ran);
  - resident text MiB against code MiB in the binary per crate (top N): each present page's bytes
    are split over the symbols it covers (`nm -S --defined-only -C`); crate = leading path segment
    of the demangled symbol (`<T as Trait>::f` counts as T's crate, as the trait's when T has no
    path: `<&T as core::fmt::Debug>::fmt` is core's); symbols that are not Rust paths are "C";
    then the compiler-only crates (cranelift*, regalloc2, wasmtime_internal_cranelift) summed.
--binary: ELF to read symbols and headers from (default /proc/PID/exe; an unstripped copy of the
same link if the running one is stripped). Needs nm (binutils) and /proc/PID of a process of the
same user, no root (pagemap's present bit needs no CAP_SYS_ADMIN; only the PFNs do).

A host at N = 0 (the CRD installed, no Jinghzhu objects), against the repo's local control plane
(tests/control-plane; examples/lib/local-control-plane.sh is how the demos start it):

    cargo build --profile dist -p wasm-operator     # fat LTO; and the plugin as in README.md
    cargo run -p local-control-plane -- up --no-controller-manager --no-nodes >/tmp/cp.out &
    # wait for a line "ready" in /tmp/cp.out, then run the two `export` lines it prints (KUBECONFIG, PATH)
    target/dist/wasm-operator crd | kubectl apply -f -
    cp target/wasm32-wasip2/release/replicaset_plugin.wasm /tmp/plugin.wasm
    target/dist/wasm-operator run --plugin /tmp/plugin.wasm --metrics-addr 127.0.0.1:28111 &
    until curl -fs 127.0.0.1:28111/readyz; do sleep 0.2; done; sleep 20
    python3 tests/scale-bench/exec-pages.py $!
    kill %2 %1

Cold page cache (as in a fresh pod), before starting the host: python3 -c 'import os,sys;
os.posix_fadvise(os.open(sys.argv[1], os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)' BIN
Which pages fault-around brings in depends on where ASLR puts the text in its 64 KiB windows, so
per-crate figures vary a little between runs (compiler-only crates 0.51-0.66 MiB over seven runs).
"""
import argparse, bisect, collections, os, re, struct, subprocess, sys

PAGE, WINDOW, MiB = 4096, 64 * 1024, 1024 * 1024
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PREFIXES = ("&mut ", "&", "*const ", "*mut ", "dyn ", "[", "(", "unsafe ", 'extern "C" ', "fn(")
COMPILER_ONLY = re.compile(r"^(cranelift\w*|regalloc2|wasmtime_internal_cranelift|wasmtime_cranelift)$")


def mib(b):
    return f"{b / MiB:.2f}"


def lead_crate(s):
    """Crate of a demangled Rust symbol, or None when it is no Rust path (C, assembly, a generic T)."""
    s = s.lstrip()
    if s.startswith("_<"):  # legacy-mangled `<T as Tr>::f` demangled by binutils
        s = s[1:]
    while (p := next((p for p in PREFIXES if s.startswith(p)), None)):
        s = s[len(p):].lstrip()
    if s.startswith("<"):  # qualified path <Self as Trait>::...: Self's crate, else Trait's
        depth, as_at, close = 0, None, len(s)
        for i in range(1, len(s)):
            c = s[i]
            if c == "<":
                depth += 1
            elif c == ">" and s[i - 1] != "-":
                if depth == 0:
                    close = i; break
                depth -= 1
            elif depth == 0 and as_at is None and s.startswith(" as ", i):
                as_at = i
        crate = lead_crate(s[1:as_at if as_at else close])
        return crate or (lead_crate(s[as_at + 4:close]) if as_at else None)
    m = IDENT.match(s)
    return m[0] if m and s.startswith("::", m.end()) else None


def crate_of(name):
    return lead_crate(name) or "C"


def elf_info(path):
    """(LOAD segments as (offset, vaddr, filesz), .text size) of a 64-bit little-endian ELF."""
    with open(path, "rb") as f:
        h = f.read(64)
        if h[:4] != b"\x7fELF" or h[4] != 2 or h[5] != 1:
            sys.exit(f"{path}: not a 64-bit little-endian ELF")
        phoff, shoff = struct.unpack_from("<QQ", h, 32)
        phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", h, 54)
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
        loads = [(o, v, fsz) for t, _f, o, v, _p, fsz in (struct.unpack_from("<IIQQQQ", ph, i * phentsize)
                                                          for i in range(phnum)) if t == 1]  # PT_LOAD
        text = 0
        if shoff and shnum:
            f.seek(shoff)
            sh = f.read(shentsize * shnum)
            _n, _t, _f, _a, stroff, strsz = struct.unpack_from("<IIQQQQ", sh, shstrndx * shentsize)
            f.seek(stroff)
            names = f.read(strsz)
            for i in range(shnum):
                name, _t, _f, _a, _o, size = struct.unpack_from("<IIQQQQ", sh, i * shentsize)
                if names[name:names.index(b"\0", name)] == b".text":
                    text = size
    return loads, text


def text_symbols(path):
    """Function symbols (addr, size, crate), sorted, aliases and overlaps dropped."""
    out = subprocess.run(["nm", "-S", "--defined-only", "-C", path], capture_output=True, text=True, check=True).stdout
    syms = []
    for m in re.finditer(r"^([0-9a-f]+) ([0-9a-f]+) [tTwW] (.*)$", out, re.M):
        if int(m[2], 16):
            syms.append((int(m[1], 16), -int(m[2], 16), m[3]))
    syms.sort()
    clean = []
    for a, s, n in syms:
        if not clean or a >= clean[-1][0] + clean[-1][1]:
            clean.append((a, -s, crate_of(n)))
    return clean


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("--binary", help="ELF to read symbols from (default /proc/PID/exe)")
    ap.add_argument("--top", type=int, default=25, help="crates listed (default 25)")
    a = ap.parse_args()
    proc = f"/proc/{a.pid}"
    binary = a.binary or f"{proc}/exe"
    exe = os.readlink(f"{proc}/exe")

    status = {k: int(v.split()[0]) for k, _, v in (l.partition(":") for l in open(f"{proc}/status"))
              if k in ("VmRSS", "RssAnon", "RssFile")}
    print(f"pid {a.pid}: {exe}" + (f"  (symbols from {binary})" if a.binary else ""))
    print("  ".join(f"{k} {status[k] / 1024:.1f} MiB ({status[k]} kB)" for k in ("VmRSS", "RssAnon", "RssFile")))

    maps, cur = [], None
    for line in open(f"{proc}/smaps"):
        f = line.split(None, 5)
        if "-" in f[0] and len(f) >= 5 and not f[0].endswith(":"):
            start, end = (int(x, 16) for x in f[0].split("-"))
            cur = dict(start=start, end=end, perms=f[1], offset=int(f[2], 16), path=f[5].strip() if len(f) > 5 else "")
            maps.append(cur)
        elif cur is not None and line.rstrip().endswith(" kB"):
            cur[f[0].rstrip(":")] = int(f[1])
    maps = [m for m in maps if m["path"] == exe]
    if not maps:
        sys.exit(f"no mapping of {exe} in {proc}/smaps")

    loads, text_size = elf_info(binary)
    syms = text_symbols(binary)
    if not syms:
        print(f"(no function symbols in {binary}: give --binary an unstripped copy of the same link)")
    addrs = [s[0] for s in syms]

    def vaddr(off):  # file offset of a mapped page -> link-time address
        for lo, va, fsz in loads:
            if lo - lo % PAGE <= off < lo + fsz:
                return va + off - lo
        return None

    pagemap = open(f"{proc}/pagemap", "rb", buffering=0)
    crate_res, crate_all = collections.Counter(), collections.Counter()
    for _a, s, c in syms:
        crate_all[c] += s
    windows = collections.Counter()
    text_pages = text_present = 0
    by_perms = collections.defaultdict(lambda: [0, 0, 0])
    print(f"\nmappings of the executable ({len(maps)}):")
    print(f"  {'perms':5} {'file offset':>11} {'size MiB':>9} {'Rss MiB':>8} {'Anon MiB':>8} {'present pages':>13}")
    for m in maps:
        n = (m["end"] - m["start"]) // PAGE
        pagemap.seek(m["start"] // PAGE * 8)
        ents = struct.unpack(f"<{n}Q", pagemap.read(n * 8))
        present = [i for i, e in enumerate(ents) if e >> 63]
        print(f"  {m['perms']:5} {m['offset']:#11x} {mib(m['end'] - m['start']):>9} {mib(m.get('Rss', 0) * 1024):>8} "
              f"{mib(m.get('Anonymous', 0) * 1024):>8} {len(present):>6} of {n}")
        t = by_perms[m["perms"]]
        t[0] += m.get("Rss", 0); t[1] += m.get("Anonymous", 0); t[2] += len(present)
        if "x" not in m["perms"]:
            continue
        text_pages += n
        text_present += len(present)
        for i in present:
            windows[(m["start"] + i * PAGE) // WINDOW] += 1
            lo = vaddr(m["offset"] + i * PAGE)
            if lo is None:
                crate_res["(no symbol)"] += PAGE
                continue
            covered = 0
            j = max(bisect.bisect_right(addrs, lo) - 1, 0)
            while j < len(syms) and syms[j][0] < lo + PAGE:
                s0, sz, c = syms[j]
                ov = min(s0 + sz, lo + PAGE) - max(s0, lo)
                if ov > 0:
                    crate_res[c] += ov
                    covered += ov
                j += 1
            crate_res["(no symbol)"] += PAGE - covered
    for perms, (rss, anon, pres) in sorted(by_perms.items()):
        kind = {"r-xp": "text", "r--p": "read-only (+ relro)", "rw-p": "data"}.get(perms, "")
        print(f"  total {perms} {kind:20} Rss {mib(rss * 1024)} MiB ({rss} kB), anon {anon} kB, present {pres} pages")

    per_page = WINDOW // PAGE
    spanned = sum((m["end"] - 1) // WINDOW - m["start"] // WINDOW + 1 for m in maps if "x" in m["perms"])
    full = sum(1 for c in windows.values() if c == per_page)
    print(f"\ntext present: {text_present} pages = {mib(text_present * PAGE)} MiB of {text_pages} pages "
          f"({mib(text_pages * PAGE)} MiB mapped r-x; ELF .text {mib(text_size)} MiB)")
    print(f"64 KiB windows: present text pages fall in {len(windows)} of the {spanned} windows spanned; "
          f"{full} full ({per_page}/{per_page}); {len(windows) * per_page} pages if all were full")
    hist = collections.Counter(windows.values())
    print("  pages present per touched window: " + ", ".join(f"{k}:{hist[k]}" for k in sorted(hist)))

    nosym = crate_res.pop("(no symbol)", 0)
    ranked = sorted(crate_res.items(), key=lambda kv: -kv[1])
    print(f"\nresident text by crate (top {a.top} of {len(ranked)}):")
    print(f"  {'crate':32} {'resident MiB':>12} {'code MiB':>9} {'resident/code':>13}")
    for c, b in ranked[:a.top]:
        t = crate_all.get(c, 0)
        print(f"  {c:32} {mib(b):>12} {mib(t):>9} {f'{100 * b / t:.0f}%' if t else '-':>13}")
    rest = ranked[a.top:]
    print(f"  {f'(other {len(rest)} crates)':32} {mib(sum(b for _, b in rest)):>12} {mib(sum(crate_all[c] for c, _ in rest)):>9}")
    print(f"  {'(no symbol: padding, unnamed)':32} {mib(nosym):>12}")
    print(f"  {'total':32} {mib(sum(crate_res.values()) + nosym):>12} {mib(sum(crate_all.values())):>9}")
    comp = sorted(c for c in crate_all if COMPILER_ONLY.match(c))
    print(f"\ncompiler-only crates (cranelift*, regalloc2, wasmtime_internal_cranelift): resident "
          f"{mib(sum(crate_res[c] for c in comp))} MiB of {mib(sum(crate_all[c] for c in comp))} MiB code in the binary")
    for c in comp:
        print(f"  {c:32} {mib(crate_res[c]):>12} {mib(crate_all[c]):>9}")


if __name__ == "__main__":
    main()
