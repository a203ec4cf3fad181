package dev.gatun.ir;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * An integer polynomial over shape symbols (sum of coefficient x product of symbols). Strides, offsets and
 * element counts of symbolic shapes are such polynomials; a backend evaluates them once per call.
 */
public final class SymInt implements Comparable<SymInt> {
    // key: sorted list of symbol names (the monomial), value: coefficient; never holds a zero coefficient
    private final TreeMap<List<String>, Long> terms;

    private SymInt(TreeMap<List<String>, Long> terms) { this.terms = terms; }

    public static final SymInt ZERO = of(0), ONE = of(1);

    public static SymInt of(long c) {
        var t = new TreeMap<List<String>, Long>(SymInt::compareKeys);
        if (c != 0) t.put(List.of(), c);
        return new SymInt(t);
    }

    public static SymInt symbol(String name) {
        var t = new TreeMap<List<String>, Long>(SymInt::compareKeys);
        t.put(List.of(name), 1L);
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

    public boolean isConstant() { return terms.isEmpty() || (terms.size() == 1 && terms.firstKey().isEmpty()); }

    public long constant() {
        if (!isConstant()) throw new IllegalStateException("not a constant: " + this);
        return terms.isEmpty() ? 0 : terms.firstEntry().getValue();
    }

    public SymInt plus(SymInt o) {
        var t = new TreeMap<>(terms);
        o.terms.forEach((k, v) -> t.merge(k, v, (x, y) -> x + y == 0 ? null : x + y));
        return new SymInt(t);
    }

    public SymInt times(SymInt o) {
        var t = new TreeMap<List<String>, Long>(SymInt::compareKeys);
        for (var a : terms.entrySet()) {
            for (var b : o.terms.entrySet()) {
                var k = new ArrayList<>(a.getKey());
                k.addAll(b.getKey());
                Collections.sort(k);
                t.merge(List.copyOf(k), a.getValue() * b.getValue(), (x, y) -> x + y == 0 ? null : x + y);
            }
        }
        return new SymInt(t);
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
        for (var k : terms.keySet()) for (var s : k) if (!out.contains(s)) out.add(s);
        Collections.sort(out);
        return out;
    }

    @Override public boolean equals(Object o) { return o instanceof SymInt s && terms.equals(s.terms); }
    @Override public int hashCode() { return terms.hashCode(); }
    @Override public int compareTo(SymInt o) { return toString().compareTo(o.toString()); }

    @Override public String toString() {
        if (terms.isEmpty()) return "0";
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
