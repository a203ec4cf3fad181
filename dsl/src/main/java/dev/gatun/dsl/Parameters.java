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
 * Tensor f = params.fullyShardedOver("dp").parameter("f", DType.F32, 8, 4); // FSDP: each rank stores [8 / |dp|, 4]
 * Tensor n = params.tiedOver("tp").parameter("n", DType.F32, 4);  // one weight copied on the tp ranks (a norm under TP)
 * }</pre>
 *
 * <p>Fully sharded data parallelism ({@link #fullyShardedOver}, ZeRO-3 / PyTorch's FSDP2): the state holds only this
 * rank's block of dimension 0 ({@code dims[0] / |group|} rows, the block of the rank's index in the group), so the
 * master weights and the optimizer's moments (states of the master's shape) take 1/|group| of the memory. The forward
 * pass reads the whole parameter: the shard's copy, cast to the compute dtype, then {@code all_gather}-ed over the group
 * (bf16 gathered for mixed precision, as FSDP2's {@code param_dtype}). The optimizer takes the gradient of the gathered
 * tensor and {@code reduce_scatter}s it back to the shard ({@link Optimizer} step).
 */
public final class Parameters {
    /**
     * One parameter: its state's name, the version of the state the optimizer writes over ({@code snapshot}'s output 0),
     * the master's copy read this step ({@code snapshot}'s output 1), what the forward pass reads (the copy, cast for mixed
     * precision), the group its value is sharded over by the model itself (tensor parallelism; null: none), and the
     * group it is fully sharded over (FSDP; null: none): then {@code master} is this rank's block of dimension 0 and
     * {@code compute} the whole parameter, gathered over that group; and the group whose ranks hold copies of one
     * parameter that feed different parts of the computation (null: none), whose gradients are summed over it.
     */
    public record Parameter(String name, Tensor version, Tensor master, Tensor compute, String shardGroup, String fsdpGroup, String tiedGroup) {
        /** The groups over which the ranks hold different parts of this parameter (to sum its squares over, for clipping). */
        public List<String> partGroups() {
            var out = new ArrayList<String>(2);
            if (shardGroup != null) out.add(shardGroup);
            if (fsdpGroup != null) out.add(fsdpGroup);
            return List.copyOf(out);
        }
    }

    private final GraphBuilder g;
    private final List<Parameter> list;
    private final String shardGroup;
    private final String fsdpGroup;
    private final String tiedGroup;

    private Parameters(GraphBuilder g, List<Parameter> list, String shardGroup, String fsdpGroup, String tiedGroup) {
        this.g = g;
        this.list = list;
        this.shardGroup = shardGroup;
        this.fsdpGroup = fsdpGroup;
        this.tiedGroup = tiedGroup;
    }

    /** An empty set of parameters of graph {@code g}. */
    public static Parameters of(GraphBuilder g) {
        if (g == null) throw new GraphException("Parameters.of: the graph builder is null");
        return new Parameters(g, new ArrayList<>(), null, null, null);
    }

    /**
     * The same set, where the parameters made through the result are sharded over {@code group}: each rank of the group
     * holds a different part, so gradient clipping sums their squares over the group ({@code all_reduce(sum)}).
     */
    public Parameters shardedOver(String group) {
        if (group == null || group.isBlank()) throw new GraphException("Parameters.shardedOver: give the name of the group the parameters are sharded over");
        if (group.equals(tiedGroup)) throw new GraphException("Parameters.shardedOver: the parameters are tied over '" + group + "' (tiedOver); a parameter is either sharded or copied over a group");
        return new Parameters(g, list, group, fsdpGroup, tiedGroup);
    }

    /**
     * The same set, where each parameter made through the result is one weight the ranks of {@code group} each hold a
     * copy of, and whose copies feed different parts of the computation: tensor parallelism's replicated weights (the
     * norms and embeddings beside heads sharded over "tp"). Its gradient is the sum of the copies' gradients
     * ({@code all_reduce(sum)} over the group), the gradient of the one tied weight, so the copies stay equal. Under
     * the graph's gradient (of the sum of every rank's loss), differentiate each tp group's loss once: pass
     * {@code loss / |group|} to the step where every rank of the group computes the same loss.
     */
    public Parameters tiedOver(String group) {
        if (group == null || group.isBlank()) throw new GraphException("Parameters.tiedOver: give the name of the group whose ranks hold copies of the parameters");
        if (group.equals(shardGroup) || group.equals(fsdpGroup))
            throw new GraphException("Parameters.tiedOver: the parameters are already sharded over '" + group + "'; a parameter is either sharded or copied over a group");
        return new Parameters(g, list, null, fsdpGroup, group);
    }

    /**
     * The same set, where the parameters made through the result are fully sharded over {@code group} (FSDP): each rank
     * stores its block of dimension 0 and all-gathers the whole parameter over the group for the forward pass. Dimension
     * 0 must divide by the group's size (it is refused by name otherwise), so the graph must know the world size (declare
     * {@code world(n)} or a mesh first). Composes with {@link #shardedOver}: {@code shardedOver("tp").fullyShardedOver("dp")}
     * declares the rank's tensor-parallel part, stored sharded over dp.
     */
    public Parameters fullyShardedOver(String group) {
        if (group == null || group.isBlank()) throw new GraphException("Parameters.fullyShardedOver: give the name of the data-parallel group to shard the parameters over");
        if (group.equals(shardGroup)) throw new GraphException("Parameters.fullyShardedOver: '" + group + "' is already the group the parameters are sharded over (shardedOver); FSDP shards over the data-parallel group");
        if (group.equals(tiedGroup)) throw new GraphException("Parameters.fullyShardedOver: the parameters are tied over '" + group + "' (tiedOver); FSDP shards over the data-parallel group");
        groupSize("Parameters.fullyShardedOver", group);
        return new Parameters(g, list, shardGroup, group, tiedGroup);
    }

    private int groupSize(String call, String group) {
        Integer world = g.worldSize();
        if (world == null)
            throw new GraphException(call + ": the world size is not declared; declare world(n) or a mesh before sharding parameters over '" + group + "'");
        Integer size = g.group(group).size(world);
        if (size == null) throw new GraphException(call + ": the size of group '" + group + "' is unknown in a world of " + world);
        return size;
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
        Tensor state = g.state(name, master, fsdpGroup == null ? dims : shardDims(name, dims));
        if (master == null || !master.isFloating())
            throw new GraphException("parameter '" + name + "': the master dtype " + master + " is not floating; parameters are f32 or f64 (bf16, f16 compute via the compute dtype)");
        if (!compute.isFloating())
            throw new GraphException("parameter '" + name + "': the compute dtype " + compute + " is not floating");
        if (state.rank() == 0) throw new GraphException("parameter '" + name + "' is a scalar; declare it of shape [1]");
        List<Tensor> snap = g.apply("snapshot", java.util.Map.of(), state);
        Tensor master0 = snap.get(1);
        Tensor read = compute == master ? master0 : master0.cast(compute);
        if (fsdpGroup != null) read = read.allGather(fsdpGroup);
        list.add(new Parameter(name, snap.get(0), master0, read, shardGroup, fsdpGroup, tiedGroup));
        return read;
    }

    /** The shape of an FSDP parameter's state: this rank's block of dimension 0 of {@code dims}. */
    private Object[] shardDims(String name, Object[] dims) {
        var whole = Tensor.shape("parameter '" + name + "'", dims);
        if (whole.rank() == 0) return dims;   // refused as a scalar by the caller
        if (!whole.dim(0).isStatic())
            throw new GraphException("parameter '" + name + "': dimension 0 of " + whole + " is symbolic; FSDP shards a static dimension 0");
        int n = groupSize("parameter '" + name + "'", fsdpGroup);
        long rows = whole.dim(0).size();
        if (rows % n != 0)
            throw new GraphException("parameter '" + name + "': dimension 0 of " + whole + " (" + rows + ") does not divide by the " + n
                    + " ranks of group '" + fsdpGroup + "', so FSDP cannot shard it evenly; pick a size that divides, or declare it through Parameters without fullyShardedOver (replicated)");
        Object[] out = dims.clone();
        out[0] = rows / n;
        return out;
    }

    /** The parameters in the order they were declared. */
    public List<Parameter> list() { return Collections.unmodifiableList(list); }

    GraphBuilder graph() { return g; }
}
