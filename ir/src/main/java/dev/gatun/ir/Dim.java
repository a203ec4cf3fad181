package dev.gatun.ir;

/** One dimension of a shape: a static size, or a named symbol bound when the graph is called. */
public sealed interface Dim {

    static Dim of(long size) { return new Static(size); }

    static Dim sym(String name) { return new Sym(name); }

    boolean isStatic();

    /** The static size; throws for a symbol. */
    long size();

    SymInt asSymInt();

    record Static(long value) implements Dim {
        public Static {
            if (value < 0) throw new GraphException("a dimension cannot be negative: " + value);
        }
        @Override public boolean isStatic() { return true; }
        @Override public long size() { return value; }
        @Override public SymInt asSymInt() { return SymInt.of(value); }
        @Override public String toString() { return Long.toString(value); }
    }

    record Sym(String name) implements Dim {
        public Sym {
            if (name == null || !name.matches("[A-Za-z_][A-Za-z0-9_]*"))
                throw new GraphException("a symbolic dimension needs an identifier name, got '" + name + "'");
        }
        @Override public boolean isStatic() { return false; }
        @Override public long size() { throw new IllegalStateException("dimension '" + name + "' is symbolic"); }
        @Override public SymInt asSymInt() { return SymInt.symbol(name); }
        @Override public String toString() { return name; }
    }
}
