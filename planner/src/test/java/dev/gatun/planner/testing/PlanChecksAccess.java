package dev.gatun.planner.testing;

import dev.gatun.planner.Plan;

import java.util.List;

/**
 * The planner's independent plan checks ({@code dev.gatun.planner.PlanChecks}) for other modules' tests, published in
 * planner's test-jar. It lives in a package of its own: a test-jar class in {@code dev.gatun.planner} would split that
 * package with the planner module, and a modular test compile (models, module {@code dev.gatun.models}) would not see it.
 */
public final class PlanChecksAccess {
    private PlanChecksAccess() {}

    /** Every violation the checks find in {@code p}; empty when the plan is fine. */
    public static List<String> all(Plan p) { return dev.gatun.planner.PlanChecks.all(p); }
}
