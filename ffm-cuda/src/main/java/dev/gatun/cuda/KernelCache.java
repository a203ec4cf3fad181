package dev.gatun.cuda;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

/**
 * An on-disk cache of compiled cubins keyed by the SHA-256 of source, headers, options, architecture and the
 * compiler version. The folder is, in order: system property {@code gatun.kernel.cache}, environment variable
 * {@code GATUN_KERNEL_CACHE}, {@code $XDG_CACHE_HOME/gatun/kernels}, {@code ~/.cache/gatun/kernels}. Writes are
 * atomic (temporary file, then rename), so concurrent processes may share one folder. I/O errors never fail a
 * compile: the cache is skipped.
 */
public final class KernelCache {
    private final Path directory;

    private KernelCache(Path directory) {
        this.directory = directory;
    }

    public static KernelCache at(Path directory) {
        return new KernelCache(directory);
    }

    /** The default cache folder (see class comment). */
    public static KernelCache defaultCache() {
        return new KernelCache(defaultDirectory(System::getProperty, System::getenv));
    }

    static Path defaultDirectory(java.util.function.Function<String, String> props,
                                 java.util.function.Function<String, String> env) {
        String p = props.apply("gatun.kernel.cache");
        if (p != null && !p.isBlank()) {
            return Path.of(p);
        }
        p = env.apply("GATUN_KERNEL_CACHE");
        if (p != null && !p.isBlank()) {
            return Path.of(p);
        }
        p = env.apply("XDG_CACHE_HOME");
        if (p != null && !p.isBlank()) {
            return Path.of(p, "gatun", "kernels");
        }
        return Path.of(props.apply("user.home"), ".cache", "gatun", "kernels");
    }

    public Path directory() { return directory; }

    /** The cache key: hex SHA-256 over every input that changes the binary. */
    public static String key(String source, Map<String, String> headers, List<String> args, String arch,
                             String compilerVersion) {
        try {
            MessageDigest md = MessageDigest.getInstance("SHA-256");
            update(md, "gatun-kernel-cache-v1");
            update(md, source);
            for (var e : new TreeMap<>(headers).entrySet()) {
                update(md, e.getKey());
                update(md, e.getValue());
            }
            for (String a : args) {
                update(md, a);
            }
            update(md, arch);
            update(md, compilerVersion);
            return HexFormat.of().formatHex(md.digest());
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void update(MessageDigest md, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        md.update(Integer.toString(b.length).getBytes(StandardCharsets.US_ASCII));
        md.update((byte) ':');
        md.update(b);
    }

    public Path pathOf(String key) {
        return directory.resolve(key + ".cubin");
    }

    public Optional<byte[]> get(String key) {
        Path p = pathOf(key);
        try {
            return Files.isRegularFile(p) ? Optional.of(Files.readAllBytes(p)) : Optional.empty();
        } catch (IOException e) {
            return Optional.empty();
        }
    }

    /** Stores {@code cubin}; returns false where the folder is not writable. */
    public boolean put(String key, byte[] cubin) {
        try {
            Files.createDirectories(directory);
            Path tmp = Files.createTempFile(directory, key, ".tmp");
            Files.write(tmp, cubin);
            try {
                Files.move(tmp, pathOf(key), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, pathOf(key), StandardCopyOption.REPLACE_EXISTING);
            }
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}
