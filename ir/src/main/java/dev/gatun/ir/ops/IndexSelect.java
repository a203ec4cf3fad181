package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.ArrayList;
import java.util.List;

/**
 * {@code index_select}: rows of a table picked by index, along dimension 0 (an embedding lookup). Input 0 is the table
 * {@code [rows, ...]} (any dtype, its first dimension static), input 1 the indices (i32 or i64, any shape); the result
 * is {@code [indices..., table dims after the first]}, row {@code indices[k]} at k, copied exactly.
 *
 * <p>An index outside {@code [0, rows)} is an error at run time, never a read elsewhere: the op {@link #checksValues},
 * so the host backend and the reference interpreter ask {@link #refusal} before a call, and the CUDA backend's kernel
 * checks each index on the device and traps with the same reason. The JSON form is {@code "op": "index_select"} with no
 * field of its own, as before the op was registered.
 */
public final class IndexSelect implements OpSpec {
    public static final IndexSelect SPEC = new IndexSelect();

    private IndexSelect() {}

    @Override public String name() { return "index_select"; }

    @Override public List<Attribute> attributes() { return List.of(); }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        if (inputs.size() != 2) throw new GraphException("index_select takes a table and indices, got " + inputs.size() + " tensors");
        Operand table = inputs.get(0), ids = inputs.get(1);
        String call = "index_select(" + table.describe() + ", " + ids.describe() + ")";
        if (table.type().rank() < 1) throw new GraphException(call + ": the table " + table.label() + " is a scalar; it needs rows");
        DType t = ids.type().dtype();
        if (t != DType.INT32 && t != DType.INT64)
            throw new GraphException(call + ": the indices " + ids.label() + " are " + t + "; they must be i32 or i64");
        if (!table.type().shape().dim(0).isStatic())
            throw new GraphException(call + ": the table's first dimension must be static, not " + table.type().shape().dim(0));
        var out = new ArrayList<Dim>(ids.type().shape().dims());
        out.addAll(table.type().shape().dims().subList(1, table.type().rank()));
        return List.of(new TensorType(table.type().dtype(), new Shape(out)));
    }

    @Override public boolean checksValues() { return true; }

    /** The first index outside the table's rows, with its position among the indices, as the CUDA kernel's record says it. */
    @Override public String refusal(List<HostTensor> inputs, OpAttrs attrs) {
        HostTensor table = inputs.get(0), ids = inputs.get(1);
        long rows = table.shape()[0];
        for (long k = 0; k < ids.numel(); k++) {
            long id = ids.getLong(k);
            if (id < 0 || id >= rows)
                return "index " + id + " at position " + k + " of the indices is outside the " + rows + " rows of the table"
                        + (rows == 0 ? " (it has none)" : " (valid: 0 to " + (rows - 1) + ")");
        }
        return null;
    }

    /** Row {@code indices[k]} of the table copied to row k of the result (the indices checked by {@link #refusal}). */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor table = inputs.get(0), ids = inputs.get(1), out = outputs.getFirst();
        long rows = table.shape()[0], row = rows == 0 ? 0 : table.numel() / rows;
        for (long k = 0; k < ids.numel(); k++) table.copyTo(ids.getLong(k) * row, out, k * row, row);
    }
}
