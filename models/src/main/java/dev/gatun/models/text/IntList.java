package dev.gatun.models.text;

import java.util.Arrays;

/** A growable list of {@code int}s, so that token ids are collected without boxing. */
final class IntList {
    private int[] items;
    private int size;

    IntList() { this(16); }

    IntList(int capacity) { items = new int[Math.max(capacity, 4)]; }

    void add(int v) {
        if (size == items.length) items = Arrays.copyOf(items, size * 2);
        items[size++] = v;
    }

    void addAll(int[] vs) {
        if (size + vs.length > items.length) items = Arrays.copyOf(items, Math.max(size * 2, size + vs.length));
        System.arraycopy(vs, 0, items, size, vs.length);
        size += vs.length;
    }

    int get(int i) { return items[i]; }

    void set(int i, int v) { items[i] = v; }

    int size() { return size; }

    int[] toArray() { return Arrays.copyOf(items, size); }
}
