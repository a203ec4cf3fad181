package dev.gatun.planner;

import java.util.ArrayList;
import java.util.List;

/**
 * Updates ({@link UpdateSliceCall}) at one run-time position, one right after the other (only placements between), become one
 * {@link Step.UpdateSlices}: one launch instead of one each. A decode layer writes its key and its value into their
 * caches at the step's position back to back; batched, a token costs a launch fewer per layer. Members write
 * different targets, and none reads another's result (its update or its target is no member's output), so one
 * launch writing them all computes what the steps would one by one. The placements between move before the batch.
 */
final class UpdateBatching {
    private UpdateBatching() {}

    /** At most this many updates a launch (the kernel's descriptors). */
    static final int MAX = 2;

    static List<Step> apply(List<Step> steps) {
        var out = new ArrayList<Step>(steps.size());
        for (int i = 0; i < steps.size(); i++) {
            UpdateSliceCall first = UpdateSliceCall.find(steps.get(i));
            if (first == null || first.output().isDynamic() || first.update().isDynamic()) {
                out.add(steps.get(i));
                continue;
            }
            var members = new ArrayList<UpdateSliceCall>(List.of(first));
            var places = new ArrayList<Step>();
            int end = i + 1;
            for (int j = i + 1; j < steps.size() && members.size() < MAX; j++) {
                Step s = steps.get(j);
                if (s instanceof Step.Place) {
                    places.add(s);
                    continue;
                }
                UpdateSliceCall u = UpdateSliceCall.find(s);
                if (u != null && joins(u, members)) {
                    members.add(u);
                    end = j + 1;
                }
                break;
            }
            if (members.size() == 1) {
                out.add(first.call());
                continue;
            }
            out.addAll(places);   // the placements that came between the members go before the batch
            out.add(new Step.UpdateSlices(members));
            i = end - 1;
        }
        return out;
    }

    /** Whether {@code u} may join the batch: the same position, static, another target, reading no member's result. */
    private static boolean joins(UpdateSliceCall u, List<UpdateSliceCall> members) {
        if (u.output().isDynamic() || u.update().isDynamic()) return false;
        for (UpdateSliceCall m : members) {
            if (m.start() != u.start()) return false;
            if (m.output().storage() == u.output().storage() || m.target().storage() == u.target().storage()) return false;
            if (u.update().storage() == m.output().storage() || u.target().storage() == m.output().storage()) return false;
            if (m.update().storage() == u.output().storage()) return false;
        }
        return true;
    }
}
