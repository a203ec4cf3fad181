package dev.gatun.dsl;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The trainable parameters of a graph, for an {@link Optimizer} step: each is a state ({@link GraphBuilder#state}) that
 * holds the master weights from call to call, and the tensor {@link #parameter} returns is what the step's forward pass
 * reads: a copy of the master made by {@code snapshot} at the start of the call, cast to the compute dtype for mixed
 * precision (bf16 compute over f32 master weights: the low-precision copy is made from the master each step).
 *
 * <p>Why a copy: the optimizer writes the new value over the state in place ({@code update_slice}), and a state a write
 * overwrites may be read by nothing else (its old contents are gone once the write has run). Every read of the old value
 * goes through the snapshot's copy, so the write may run as soon as its value is ready and no order can read a
 * half-updated parameter. Bind a parameter's initial value with {@code Session.bind(name, array)}; it starts at zeros.
 *
 * <pre>{@code
 * var params = Parameters.of(g);
 * Tensor w = params.parameter("w", DType.F32, 4, 3);              // f32 master, f32 compute
 * Tensor e = params.parameter("emb", DType.F32, DType.BF16, 16, 4); // f32 master, bf16 compute
 * Tensor o = params.shardedOver("tp").parameter("o", DType.F32, 2, 4); // each rank holds its own part of o
 * }</pre>
 */
public final class Parameters {
    /**
     * One parameter: its state's name, the version of the state the optimizer writes over ({@code snapshot}'s output 0),
     * the master's copy read this step ({@code snapshot}'s output 1), what the forward pass reads (the copy, cast for mixed
     * precision), and the group its value is sharded over (null: every rank holds all of it, or its own replica).
     */
    public record Parameter(String name, Tensor version, Tensor master, Tensor compute, String shardGroup) {}

    private final GraphBuilder g;
    private final List<Parameter> list;
    private final String shardGroup;

    private Parameters(GraphBuilder g, List<Parameter> list, String shardGroup) {
        this.g = g;
        this.list = list;
        this.shardGroup = shardGroup;
    }

    /** An empty set of parameters of graph {@code g}. */
    public static Parameters of(GraphBuilder g) {
        if (g == null) throw new GraphException("Parameters.of: the graph builder is null");
        return new Parameters(g, new ArrayList<>(), null);
    }

    /**
     * The same set, where the parameters made through the result are sharded over {@code group}: each rank of the group
     * holds a different part, so gradient clipping sums their squares over the group ({@code all_reduce(sum)}).
     */
    public Parameters shardedOver(String group) {
        if (group == null || group.isBlank()) throw new GraphException("Parameters.shardedOver: give the name of the group the parameters are sharded over");
        return new Parameters(g, list, group);
    }

    /** A parameter computed in its master dtype {@code dtype}. */
    public Tensor parameter(String name, DType dtype, Object... dims) { return parameter(name, dtype, dtype, dims); }

    /**
     * A parameter whose master weights are a state {@code name} of dtype {@code master} (f32, f64) and which the forward
     * pass reads cast to {@code compute} (bf16 for mixed precision). The shape must be static and of at least one
     * dimension (write a scalar as shape {@code [1]}).
     */
    public Tensor parameter(String name, DType master, DType compute, Object... dims) {
        if (compute == null) throw new GraphException("parameter '" + name + "': the compute dtype is null");
        for (Parameter p : list)
            if (p.name().equals(name)) throw new GraphException("parameter '" + name + "' is declared twice; give each parameter its own name");
        Tensor state = g.state(name, master, dims);
        if (master == null || !master.isFloating())
            throw new GraphException("parameter '" + name + "': the master dtype " + master + " is not floating; parameters are f32 or f64 (bf16, f16 compute via the compute dtype)");
        if (!compute.isFloating())
            throw new GraphException("parameter '" + name + "': the compute dtype " + compute + " is not floating");
        if (state.rank() == 0) throw new GraphException("parameter '" + name + "' is a scalar; declare it of shape [1]");
        List<Tensor> snap = g.apply("snapshot", java.util.Map.of(), state);
        Tensor master0 = snap.get(1);
        Tensor read = compute == master ? master0 : master0.cast(compute);
        list.add(new Parameter(name, snap.get(0), master0, read, shardGroup));
        return read;
    }

    /** The parameters in the order they were declared. */
    public List<Parameter> list() { return Collections.unmodifiableList(list); }

    GraphBuilder graph() { return g; }
}
