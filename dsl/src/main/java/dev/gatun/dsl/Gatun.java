package dev.gatun.dsl;

/** Entry point of the DSL: {@code Gatun.graph("name")} starts a graph. */
public final class Gatun {
    private Gatun() {}

    public static GraphBuilder graph(String name) { return new GraphBuilder(name); }
}
