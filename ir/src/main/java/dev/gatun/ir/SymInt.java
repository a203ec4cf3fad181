package dev.gatun.ir;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * An integer polynomial over shape symbols (sum of coefficient x product of symbols). Strides, offsets and
 * element counts of symbolic shapes are such polynomials; a backend evaluates them once per call.
 *
 * <p>Nearly every SymInt a compiler makes is a constant (the strides and sizes of static shapes), so a constant is held
 * as a plain {@code long}, without a term map: the planner and lowering multiply, add and compare millions of them on
 * a large graph. A polynomial with a symbol keeps its terms; one that is constant is always held as a constant, so
 * equality needs no case of its own.
 */
public final class SymInt implements Comparable<SymInt> {
    // key: sorted list of symbol names (the monomial), value: coefficient; never holds a zero coefficient; null for a
    // constant, whose value is then `value`
    private final TreeMap<List<String>, Long> terms;
    private final long value;

    private SymInt(TreeMap<List<String>, Long> terms) { this.terms = terms; this.value = 0; }
    private SymInt(long value) { this.terms = null; this.value = value; }

    /** The constants -16..1024, made once: strides and sizes of static shapes are mostly small. */
    private static final SymInt[] SMALL = new SymInt[1041];
    static { for (int i = 0; i < SMALL.length; i++) SMALL[i] = new SymInt(i - 16); }

    public static final SymInt ZERO = of(0), ONE = of(1);

    public static SymInt of(long c) { return c >= -16 && c <= 1024 ? SMALL[(int) c + 16] : new SymInt(c); }

    public static SymInt symbol(String name) {
        var t = newTerms();
        t.put(List.of(name), 1L);
        return new SymInt(t);
    }

    private static TreeMap<List<String>, Long> newTerms() { return new TreeMap<>(SymInt::compareKeys); }

    /** The terms, a constant's too (a fresh map then): for the arithmetic of polynomials. */
    private TreeMap<List<String>, Long> terms() {
        if (terms != null) return terms;
        var t = newTerms();
        if (value != 0) t.put(List.of(), value);
        return t;
    }

    /** A polynomial from its terms, held as a constant where it is one. */
    private static SymInt ofTerms(TreeMap<List<String>, Long> t) {
        if (t.isEmpty()) return ZERO;
        if (t.size() == 1 && t.firstKey().isEmpty()) return new SymInt(t.firstEntry().getValue());
        return new SymInt(t);
    }

    private static int compareKeys(List<String> a, List<String> b) {
        if (a.size() != b.size()) return Integer.compare(a.size(), b.size());
        for (int i = 0; i < a.size(); i++) {
            int c = a.get(i).compareTo(b.get(i));
            if (c != 0) return c;
        }
        return 0;
    }

    public boolean isConstant() { return terms == null; }

    public long constant() {
        if (!isConstant()) throw new IllegalStateException("not a constant: " + this);
        return value;
    }

    public SymInt plus(SymInt o) {
        if (terms == null && o.terms == null) return of(value + o.value);
        if (o.terms == null && o.value == 0) return this;
        if (terms == null && value == 0) return o;
        var t = new TreeMap<>(terms());
        o.terms().forEach((k, v) -> t.merge(k, v, (x, y) -> x + y == 0 ? null : x + y));
        return ofTerms(t);
    }

    public SymInt times(SymInt o) {
        if (terms == null && o.terms == null) return of(value * o.value);
        if ((terms == null && value == 0) || (o.terms == null && o.value == 0)) return ZERO;
        if (o.terms == null && o.value == 1) return this;
        if (terms == null && value == 1) return o;
        var t = newTerms();
        for (var a : terms().entrySet()) {
            for (var b : o.terms().entrySet()) {
                var k = new ArrayList<>(a.getKey());
                k.addAll(b.getKey());
                Collections.sort(k);
                t.merge(List.copyOf(k), a.getValue() * b.getValue(), (x, y) -> x + y == 0 ? null : x + y);
            }
        }
        return ofTerms(t);
    }

    public SymInt times(long c) { return times(of(c)); }

    /** The product of {@code xs} (1 for none): the element count of an iteration space or a shape. */
    public static SymInt product(List<SymInt> xs) {
        SymInt p = ONE;
        for (SymInt x : xs) p = p.times(x);
        return p;
    }
    public SymInt plus(long c) { return plus(of(c)); }

    /** Evaluates with the given symbol values; a missing symbol is an error naming it. */
    public long eval(Map<String, Long> env) {
        if (terms == null) return value;
        long sum = 0;
        for (var e : terms.entrySet()) {
            long p = e.getValue();
            for (String s : e.getKey()) {
                Long v = env.get(s);
                if (v == null) throw new IllegalStateException("symbol '" + s + "' has no value");
                p = Math.multiplyExact(p, v);
            }
            sum = Math.addExact(sum, p);
        }
        return sum;
    }

    public List<String> symbols() {
        var out = new ArrayList<String>();
        if (terms == null) return out;
        for (var k : terms.keySet()) for (var s : k) if (!out.contains(s)) out.add(s);
        Collections.sort(out);
        return out;
    }

    @Override public boolean equals(Object o) {
        return o instanceof SymInt s && (terms == null ? s.terms == null && value == s.value : terms.equals(s.terms));
    }

    /** The term map's hash, a constant's too (its one term is the empty monomial). */
    @Override public int hashCode() {
        if (terms != null) return terms.hashCode();
        return value == 0 ? 0 : List.of().hashCode() ^ Long.hashCode(value);
    }
    @Override public int compareTo(SymInt o) { return toString().compareTo(o.toString()); }

    @Override public String toString() {
        if (terms == null) return value < 0 ? "-" + Math.abs(value) : Long.toString(value);
        var sb = new StringBuilder();
        for (var e : terms.entrySet()) {
            long c = e.getValue();
            if (!sb.isEmpty()) sb.append(c < 0 ? " - " : " + ");
            else if (c < 0) sb.append('-');
            long a = Math.abs(c);
            if (e.getKey().isEmpty()) sb.append(a);
            else {
                if (a != 1) sb.append(a).append('*');
                sb.append(String.join("*", e.getKey()));
            }
        }
        return sb.toString();
    }
}
