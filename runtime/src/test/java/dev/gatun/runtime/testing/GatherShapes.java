package dev.gatun.runtime.testing;

/** Shapes of index_select cases, for the host's and the GPU's gather-fusion tests alike. */
public final class GatherShapes {
    private GatherShapes() {}

    /** The shape of {@code table.indexSelect(0, ids)}: the indices' shape, then the table's rows' shape. */
    public static long[] picked(long[] ids, long[] table) {
        long[] out = new long[ids.length + table.length - 1];
        System.arraycopy(ids, 0, out, 0, ids.length);
        System.arraycopy(table, 1, out, ids.length, table.length - 1);
        return out;
    }

    /** A static shape as the DSL's {@code input} takes its dimensions. */
    public static Object[] dims(long[] shape) {
        var out = new Object[shape.length];
        for (int i = 0; i < shape.length; i++) out[i] = shape[i];
        return out;
    }
}
