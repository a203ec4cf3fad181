package dev.gatun.cuda;

import dev.gatun.cuda.ffi.nvrtc.nvrtc;
import dev.gatun.cuda.internal.Errors;
import dev.gatun.cuda.internal.NativeLibraries.Lib;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * CUDA C++ source compiled at run time with NVRTC for a device's architecture. Immutable. {@link #load(Device)}
 * compiles (or takes the cubin from the {@link KernelCache}) and loads a {@link Module}. A failed compile throws
 * {@link CompileException} carrying the compiler's log.
 */
public final class Program {
    private final String name;
    private final String source;
    private final Map<String, String> headers;
    private final ProgramOptions options;

    private Program(String name, String source, Map<String, String> headers, ProgramOptions options) {
        this.name = name;
        this.source = source;
        this.headers = java.util.Collections.unmodifiableMap(new LinkedHashMap<>(headers));
        this.options = options;
    }

    /** A program named {@code name} (used in diagnostics, for example {@code kernels.cu}). */
    public static Program of(String name, String source) {
        return new Program(name, source, Map.of(), ProgramOptions.defaults());
    }

    /** Adds a header that the source can {@code #include "includeName"}. */
    public Program withHeader(String includeName, String content) {
        Map<String, String> h = new LinkedHashMap<>(headers);
        h.put(includeName, content);
        return new Program(name, source, h, options);
    }

    public Program withOptions(ProgramOptions o) {
        return new Program(name, source, headers, o);
    }

    public String name() { return name; }

    public String source() { return source; }

    public Map<String, String> headers() { return headers; }

    public ProgramOptions options() { return options; }

    /** NVRTC's version, for example {@code 13.0}. */
    public static String nvrtcVersion() {
        Cuda.require(Lib.NVRTC);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment major = arena.allocate(ValueLayout.JAVA_INT);
            MemorySegment minor = arena.allocate(ValueLayout.JAVA_INT);
            Errors.nvrtc(nvrtc.nvrtcVersion(major, minor), "nvrtcVersion");
            return major.get(ValueLayout.JAVA_INT, 0) + "." + minor.get(ValueLayout.JAVA_INT, 0);
        }
    }

    /** The cache key for compiling this program for {@code arch}. */
    public String cacheKey(String arch) {
        return KernelCache.key(source, headers, options.toArgs(arch), arch, nvrtcVersion());
    }

    /** Compiles to a cubin for {@code arch} (for example {@code sm_90}). */
    public byte[] compile(String arch) {
        return compileTo(arch, false);
    }

    /** Compiles to PTX text for {@code arch} (ignores the cache). */
    public String compileToPtx(String arch) {
        byte[] ptx = compileTo(arch, true);
        int len = ptx.length;
        while (len > 0 && ptx[len - 1] == 0) {
            len--;
        }
        return new String(ptx, 0, len, java.nio.charset.StandardCharsets.UTF_8);
    }

    /** Compiles for {@code device} (using the default cache) and loads the module into its context. */
    public Module load(Device device) {
        return load(device, KernelCache.defaultCache());
    }

    /** As {@link #load(Device)}, with {@code cache} (null: no cache). */
    public Module load(Device device, KernelCache cache) {
        String arch = options.arch().orElse(device.arch());
        byte[] cubin = null;
        String key = null;
        if (cache != null) {
            key = cacheKey(arch);
            cubin = cache.get(key).orElse(null);
        }
        boolean hit = cubin != null;
        if (cubin == null) {
            cubin = compile(arch);
            if (cache != null) {
                cache.put(key, cubin);
            }
        }
        Module m = device.loadModule(cubin);
        m.fromCache = hit;
        return m;
    }

    private byte[] compileTo(String arch, boolean ptx) {
        Cuda.require(Lib.NVRTC);
        List<String> args = options.toArgs(arch);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment prog = arena.allocate(ValueLayout.ADDRESS);
            int n = headers.size();
            MemorySegment hdrs = arena.allocate(ValueLayout.ADDRESS, Math.max(1, n));
            MemorySegment names = arena.allocate(ValueLayout.ADDRESS, Math.max(1, n));
            int i = 0;
            for (var e : headers.entrySet()) {
                hdrs.setAtIndex(ValueLayout.ADDRESS, i, arena.allocateFrom(e.getValue()));
                names.setAtIndex(ValueLayout.ADDRESS, i, arena.allocateFrom(e.getKey()));
                i++;
            }
            Errors.nvrtc(nvrtc.nvrtcCreateProgram(prog, arena.allocateFrom(source), arena.allocateFrom(name), n,
                    n == 0 ? MemorySegment.NULL : hdrs, n == 0 ? MemorySegment.NULL : names), "nvrtcCreateProgram");
            MemorySegment p = prog.get(ValueLayout.ADDRESS, 0);
            try {
                MemorySegment opts = arena.allocate(ValueLayout.ADDRESS, Math.max(1, args.size()));
                for (int k = 0; k < args.size(); k++) {
                    opts.setAtIndex(ValueLayout.ADDRESS, k, arena.allocateFrom(args.get(k)));
                }
                int rc = nvrtc.nvrtcCompileProgram(p, args.size(), opts);
                if (rc != 0) {
                    throw new CompileException(name + " (" + String.join(" ", args) + ")", rc,
                            Errors.cString(nvrtc.nvrtcGetErrorString(rc)), log(arena, p));
                }
                MemorySegment size = arena.allocate(ValueLayout.JAVA_LONG);
                if (ptx) {
                    Errors.nvrtc(nvrtc.nvrtcGetPTXSize(p, size), "nvrtcGetPTXSize");
                } else {
                    Errors.nvrtc(nvrtc.nvrtcGetCUBINSize(p, size), "nvrtcGetCUBINSize");
                }
                MemorySegment out = arena.allocate(size.get(ValueLayout.JAVA_LONG, 0));
                if (ptx) {
                    Errors.nvrtc(nvrtc.nvrtcGetPTX(p, out), "nvrtcGetPTX");
                } else {
                    Errors.nvrtc(nvrtc.nvrtcGetCUBIN(p, out), "nvrtcGetCUBIN");
                }
                return out.toArray(ValueLayout.JAVA_BYTE);
            } finally {
                nvrtc.nvrtcDestroyProgram(prog);
            }
        }
    }

    private static String log(Arena arena, MemorySegment p) {
        MemorySegment size = arena.allocate(ValueLayout.JAVA_LONG);
        if (nvrtc.nvrtcGetProgramLogSize(p, size) != 0) {
            return "";
        }
        MemorySegment log = arena.allocate(Math.max(1, size.get(ValueLayout.JAVA_LONG, 0)));
        if (nvrtc.nvrtcGetProgramLog(p, log) != 0) {
            return "";
        }
        return log.getString(0);
    }

    /** The names passed to NVRTC as options for {@code arch}, for diagnostics. */
    public List<String> arguments(String arch) {
        return new ArrayList<>(options.toArgs(arch));
    }

    @Override
    public String toString() {
        return "Program[" + name + ", " + options + "]";
    }
}
