package dev.gatun.ir;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.StringJoiner;

/** The dimensions of a tensor; each is a static size or a symbol. Rank 0 is a scalar. */
public record Shape(List<Dim> dims) {

    public Shape {
        dims = List.copyOf(dims);
    }

    public static Shape of(long... sizes) {
        var d = new ArrayList<Dim>(sizes.length);
        for (long s : sizes) d.add(Dim.of(s));
        return new Shape(d);
    }

    public static Shape of(Dim... dims) { return new Shape(Arrays.asList(dims)); }

    /** Accepts whole numbers (Integer, Long, Short, Byte) for static sizes and String for symbols, as jshell users write them; 2.5 is an error, not 2. */
    public static Shape parse(Object... dims) {
        var d = new ArrayList<Dim>(dims.length);
        for (Object o : dims) {
            switch (o) {
                case null -> throw new GraphException("a dimension is null; give a number or a symbol name");
                case Integer n -> d.add(Dim.of(n));
                case Long n -> d.add(Dim.of(n));
                case Short n -> d.add(Dim.of(n));
                case Byte n -> d.add(Dim.of(n));
                case Number n -> throw new GraphException("a dimension is a whole number or a symbol name, got " + n + " (" + n.getClass().getSimpleName() + ")");
                case String s -> d.add(Dim.sym(s));
                case Dim x -> d.add(x);
                default -> throw new GraphException("a dimension is a number or a symbol name, got " + o);
            }
        }
        return new Shape(d);
    }

    public static final Shape SCALAR = new Shape(List.of());

    public int rank() { return dims.size(); }

    public Dim dim(int i) { return dims.get(i); }

    // indexed loops, not for-each: these run for every buffer many times over, and an iterator is an allocation each
    public boolean isStatic() {
        for (int i = 0; i < dims.size(); i++) if (!dims.get(i).isStatic()) return false;
        return true;
    }

    /** Static sizes; throws if any dimension is symbolic. */
    public long[] sizes() {
        long[] s = new long[dims.size()];
        for (int i = 0; i < s.length; i++) s[i] = dims.get(i).size();
        return s;
    }

    public long[] sizes(Map<String, Long> env) {
        long[] s = new long[dims.size()];
        for (int i = 0; i < s.length; i++) s[i] = dims.get(i).asSymInt().eval(env);
        return s;
    }

    /** Element count of a static shape; a {@link GraphException} where it passes 2^63 (no tensor can be that large). */
    public long numel() {
        long n = 1;
        try {
            for (int i = 0; i < dims.size(); i++) n = Math.multiplyExact(n, dims.get(i).size());
        } catch (ArithmeticException e) {
            throw new GraphException("shape " + this + " has more than 2^63 elements; no tensor can be this large");
        }
        return n;
    }

    public SymInt symNumel() {
        SymInt n = SymInt.ONE;
        for (int i = 0; i < dims.size(); i++) n = n.times(dims.get(i).asSymInt());
        return n;
    }

    /** Row-major contiguous strides, in elements. */
    public List<SymInt> contiguousStrides() {
        var s = new SymInt[dims.size()];
        SymInt acc = SymInt.ONE;
        for (int i = dims.size() - 1; i >= 0; i--) {
            s[i] = acc;
            acc = acc.times(dims.get(i).asSymInt());
        }
        return List.of(s);
    }

    /** Normalizes a possibly negative dimension index; null when out of range. */
    public Integer normalizeDim(int d) {
        int r = rank();
        int n = d < 0 ? d + r : d;
        return (n < 0 || n >= Math.max(r, 1) || (r == 0)) ? null : n;
    }

    /**
     * NumPy broadcasting: shapes align on the right; a dimension of 1 stretches; equal symbols match.
     * Returns null when the shapes cannot broadcast.
     */
    public static Shape broadcast(Shape a, Shape b) {
        int r = Math.max(a.rank(), b.rank());
        var out = new Dim[r];
        for (int i = 0; i < r; i++) {
            int ia = a.rank() - r + i, ib = b.rank() - r + i;
            Dim da = ia >= 0 ? a.dim(ia) : Dim.of(1);
            Dim db = ib >= 0 ? b.dim(ib) : Dim.of(1);
            if (da.equals(db)) out[i] = da;
            else if (da.isStatic() && da.size() == 1) out[i] = db;
            else if (db.isStatic() && db.size() == 1) out[i] = da;
            else return null;
        }
        return Shape.of(out);
    }

    @Override public String toString() {
        var j = new StringJoiner(",", "[", "]");
        for (Dim d : dims) j.add(d.toString());
        return j.toString();
    }
}
