package dev.gatun.runtime.cuda;

/** Diagnostics for the multi-rank test programs (MultiGpuCheck, GpuSuite): with GATUN_WATCHDOG=S set, prints every thread's stack every S seconds. */
final class Watchdog {
    private Watchdog() {}

    static void startFromEnvironment(String who) {
        String s = System.getenv("GATUN_WATCHDOG");
        if (s == null || s.isBlank()) return;
        long period = (long) (Double.parseDouble(s.trim()) * 1000);
        Thread t = Thread.ofPlatform().daemon(true).name("gatun-watchdog").start(() -> {
            while (true) {
                try {
                    Thread.sleep(period);
                } catch (InterruptedException e) {
                    return;
                }
                var sb = new StringBuilder("watchdog " + who + ":\n");
                Thread.getAllStackTraces().forEach((th, st) -> {
                    if (th.getName().startsWith("gatun-watchdog") || st.length == 0) return;
                    sb.append("  thread ").append(th.getName()).append(" ").append(th.getState()).append('\n');
                    for (int i = 0; i < Math.min(st.length, 14); i++) sb.append("    at ").append(st[i]).append('\n');
                });
                System.out.print(sb);
                System.out.flush();
            }
        });
    }
}
