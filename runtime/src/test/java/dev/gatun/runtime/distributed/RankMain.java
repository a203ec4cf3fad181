package dev.gatun.runtime.distributed;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

/**
 * A rank program for the launcher tests: rendezvous, all-gather of names, fingerprint check, prints.
 * {@code --fail-rank R --code C}: rank R exits with code C after the all-gather, the others sleep (the launcher must
 * stop them). {@code --spawn-child}: first start {@code sleep 60} and print its pid; {@code --child-pid-file DIR}: first
 * start {@code sleep 300} and write its pid to {@code DIR/child-RANK.pid} (a grandchild of the launcher that only
 * ends if someone ends it).
 */
public final class RankMain {
    public static void main(String[] args) throws Exception {
        int failRank = -1, code = 0;
        boolean spawn = false;
        java.nio.file.Path childPidDir = null;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--fail-rank")) failRank = Integer.parseInt(args[++i]);
            else if (args[i].equals("--code")) code = Integer.parseInt(args[++i]);
            else if (args[i].equals("--spawn-child")) spawn = true;
            else if (args[i].equals("--child-pid-file")) childPidDir = java.nio.file.Path.of(args[++i]);
        }
        if (spawn) { // a child of this rank that outlives it unless someone stops it
            Process child = new ProcessBuilder("sleep", "60").start();
            System.out.println("child pid " + child.pid());
            System.out.flush();
            Thread.sleep(300); // long enough for the launcher to see it
        }
        if (childPidDir != null) {
            Process child = new ProcessBuilder("sleep", "300").start();
            var tmp = childPidDir.resolve("child-" + System.getenv("RANK") + ".tmp");
            java.nio.file.Files.writeString(tmp, Long.toString(child.pid()));
            java.nio.file.Files.move(tmp, childPidDir.resolve("child-" + System.getenv("RANK") + ".pid"),
                    java.nio.file.StandardCopyOption.ATOMIC_MOVE);
        }
        var timeout = Duration.ofSeconds(20);
        try (Rendezvous r = Rendezvous.fromEnvironment()) {
            System.out.println("hello from rank " + r.rank() + " of " + r.worldSize() + " (local rank " + r.localRank() + ")");
            System.out.println("pid " + ProcessHandle.current().pid());
            System.err.println("stderr line from rank " + r.rank());
            List<byte[]> all = r.allGather("names", ("rank-" + r.rank()).getBytes(StandardCharsets.UTF_8), timeout);
            System.out.println("gathered " + all.stream().map(b -> new String(b, StandardCharsets.UTF_8)).toList());
            System.out.println("env NCCL_NVLS_ENABLE=" + System.getenv("NCCL_NVLS_ENABLE")
                    + " TORCH_SYMM_MEM_DISABLE_MULTICAST=" + System.getenv("TORCH_SYMM_MEM_DISABLE_MULTICAST")
                    + " NVSHMEM_DISABLE_NVLS=" + System.getenv("NVSHMEM_DISABLE_NVLS")
                    + " server=" + System.getenv("GATUN_RENDEZVOUS_SERVER"));
            if (System.getenv("GATUN_RANKS_PER_GPU") != null) System.out.println("ranks per GPU " + System.getenv("GATUN_RANKS_PER_GPU"));
            if (failRank >= 0) {
                if (r.rank() == failRank) {
                    System.out.println("rank " + r.rank() + " exits with code " + code);
                    System.out.flush();
                    Runtime.getRuntime().halt(code);
                }
                Thread.sleep(60_000); // the launcher must stop us
                System.out.println("not stopped");
                return;
            }
            Fingerprints.check(r, "seeds", "9c41e0", timeout);
            long n = r.add("done", 1);
            r.barrier("end", timeout);
            System.out.println("done (counter " + n + ")");
        }
    }
}
