package dev.gatun.ir.graph;

import java.util.List;

/** A named set of ranks. The group "world" (no explicit ranks) holds every rank. */
public record ProcessGroup(String name, List<Integer> ranks) {
    public static final String WORLD_NAME = "world";
    public static final ProcessGroup WORLD = new ProcessGroup(WORLD_NAME, List.of());

    public ProcessGroup {
        if (name == null || !name.matches("[A-Za-z_][A-Za-z0-9_.-]*"))
            throw new IllegalArgumentException("a group needs an identifier name, got '" + name + "'");
        ranks = List.copyOf(ranks);
        if (ranks.stream().distinct().count() != ranks.size())
            throw new IllegalArgumentException("group '" + name + "' lists a rank twice: " + ranks);
        if (ranks.stream().anyMatch(r -> r < 0)) throw new IllegalArgumentException("group '" + name + "' has a negative rank: " + ranks);
    }

    public static ProcessGroup of(String name, Integer... ranks) { return new ProcessGroup(name, List.of(ranks)); }

    public boolean isWorld() { return ranks.isEmpty(); }

    /** The number of ranks; null for the world group when the world size is not known yet. */
    public Integer size(Integer worldSize) { return ranks.isEmpty() ? worldSize : Integer.valueOf(ranks.size()); }

    /** The ranks of this group in a world of the given size. */
    public List<Integer> members(int worldSize) {
        if (ranks.isEmpty()) return java.util.stream.IntStream.range(0, worldSize).boxed().toList();
        return ranks;
    }

    @Override public String toString() { return ranks.isEmpty() ? "\"" + name + "\"" : "\"" + name + "\"" + ranks; }
}
