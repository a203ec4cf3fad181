package dev.gatun.planner;

import java.util.List;

/** PlanChecks for tests outside this package. */
public final class PlanChecksAccess {
    private PlanChecksAccess() {}

    public static List<String> all(Plan p) { return PlanChecks.all(p); }
}
