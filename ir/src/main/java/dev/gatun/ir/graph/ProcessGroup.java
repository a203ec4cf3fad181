package dev.gatun.ir.graph;

import dev.gatun.ir.GraphException;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.IntStream;

/**
 * The ranks a collective runs among. Three kinds:
 * <ul>
 *   <li>the group "world" (no explicit ranks): every rank;</li>
 *   <li>an explicit group ({@code ranks}): those ranks; ranks outside it pass shape-preserving collectives'
 *       inputs through, and shape-changing ones (reduce-scatter, all-gather) are refused unless it holds every rank;</li>
 *   <li>a mesh axis ({@code slices}, from {@link #meshAxes}): a partition of the world into equal slices, as PyTorch's
 *       {@code DeviceMesh} and JAX's {@code Mesh} have; a collective along the axis runs in every slice at once, each
 *       rank among the ranks of its own slice.</li>
 * </ul>
 *
 * @param ranks  an explicit group's ranks (empty otherwise)
 * @param slices a mesh axis' slices, each in ascending rank order, ordered by their first rank (empty otherwise)
 */
public record ProcessGroup(String name, List<Integer> ranks, List<List<Integer>> slices) {
    public static final String WORLD_NAME = "world";
    public static final ProcessGroup WORLD = new ProcessGroup(WORLD_NAME, List.of());

    public ProcessGroup {
        if (name == null || !name.matches("[A-Za-z_][A-Za-z0-9_.-]*"))
            throw new GraphException("a group needs an identifier name, got '" + name + "'");
        ranks = List.copyOf(ranks);
        slices = slices.stream().map(List::copyOf).toList();
        if (!ranks.isEmpty() && !slices.isEmpty()) throw new GraphException("group '" + name + "' has both ranks and mesh slices");
        if (ranks.stream().distinct().count() != ranks.size())
            throw new GraphException("group '" + name + "' lists a rank twice: " + ranks);
        if (ranks.stream().anyMatch(r -> r < 0)) throw new GraphException("group '" + name + "' has a negative rank: " + ranks);
        if (!slices.isEmpty()) {
            int size = slices.getFirst().size(), world = size * slices.size();
            var seen = new boolean[world];
            for (List<Integer> s : slices) {
                if (s.size() != size) throw new GraphException("mesh axis '" + name + "' has slices of different sizes: " + slices);
                for (int r : s) {
                    if (r < 0 || r >= world || seen[r])
                        throw new GraphException("mesh axis '" + name + "': slices " + slices + " do not partition a world of " + world);
                    seen[r] = true;
                }
            }
        }
    }

    /** An explicit group, or "world" when {@code ranks} is empty. */
    public ProcessGroup(String name, List<Integer> ranks) { this(name, ranks, List.of()); }

    public static ProcessGroup of(String name, Integer... ranks) { return new ProcessGroup(name, List.of(ranks)); }

    /**
     * One group per axis of a device mesh of the given axis sizes, ranks laid out row-major (the last axis varies
     * fastest, as {@code arange(world).reshape(sizes)}): for {@code dp=2, tp=4}, "tp" has slices {0,1,2,3} and
     * {4,5,6,7}, "dp" has {0,4}, {1,5}, {2,6}, {3,7}.
     */
    public static List<ProcessGroup> meshAxes(List<String> names, List<Integer> sizes) {
        if (names.size() != sizes.size() || names.isEmpty()) throw new GraphException("a mesh needs one size per axis name, got " + names + " and " + sizes);
        int world = 1;
        for (int i = 0; i < sizes.size(); i++) {
            if (sizes.get(i) < 1) throw new GraphException("mesh axis '" + names.get(i) + "' must have at least 1 rank, not " + sizes.get(i));
            world = Math.multiplyExact(world, sizes.get(i));
        }
        if (names.stream().distinct().count() != names.size()) throw new GraphException("a mesh names an axis twice: " + names);
        var out = new ArrayList<ProcessGroup>();
        for (int axis = 0; axis < names.size(); axis++) {
            int stride = 1;
            for (int j = axis + 1; j < sizes.size(); j++) stride *= sizes.get(j);
            int n = sizes.get(axis), s = stride;
            var slices = new ArrayList<List<Integer>>();
            for (int first = 0; first < world; first++) {
                if ((first / s) % n != 0) continue; // the slice's first rank has coordinate 0 on this axis
                int f = first;
                slices.add(IntStream.range(0, n).map(k -> f + k * s).boxed().toList());
            }
            out.add(new ProcessGroup(names.get(axis), List.of(), slices));
        }
        return out;
    }

    public boolean isWorld() { return ranks.isEmpty() && slices.isEmpty(); }

    /** Whether this group is an axis of a device mesh. */
    public boolean isMeshAxis() { return !slices.isEmpty(); }

    /** The world size a mesh axis implies; null for the other kinds. */
    public Integer meshWorldSize() { return slices.isEmpty() ? null : slices.size() * slices.getFirst().size(); }

    /** The ranks a collective of this group runs among (in one slice); null for "world" while the world size is unknown. */
    public Integer size(Integer worldSize) {
        if (!slices.isEmpty()) return slices.getFirst().size();
        return ranks.isEmpty() ? worldSize : Integer.valueOf(ranks.size());
    }

    /** Whether every rank of a world of this size belongs to the group (to one slice of a mesh axis). */
    public boolean coversEveryRank(int worldSize) {
        if (ranks.isEmpty()) return true;
        return ranks.size() == worldSize && ranks.stream().allMatch(r -> r < worldSize);
    }

    /** The disjoint sets of ranks that run this group's collectives together: the world, the explicit ranks, or the axis' slices. */
    public List<List<Integer>> slices(int worldSize) {
        if (!slices.isEmpty()) return slices;
        return List.of(ranks.isEmpty() ? IntStream.range(0, worldSize).boxed().toList() : ranks);
    }

    /** The ranks {@code rank} runs this group's collectives with, in ascending order; empty when it is not a member. */
    public List<Integer> members(int worldSize, int rank) {
        for (List<Integer> s : slices(worldSize)) if (s.contains(rank)) return s;
        return List.of();
    }

    @Override public String toString() {
        if (!slices.isEmpty()) return "\"" + name + "\"" + slices;
        return ranks.isEmpty() ? "\"" + name + "\"" : "\"" + name + "\"" + ranks;
    }
}
