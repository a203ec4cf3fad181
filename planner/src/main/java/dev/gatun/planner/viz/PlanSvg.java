package dev.gatun.planner.viz;

import dev.gatun.planner.Plan;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * A picture of a {@link Plan}'s memory: for each pool, its buffers as rectangles over (time, offset). The x axis
 * counts the plan's operations (see {@link PlanTimeline}); a rectangle spans the operations during which its
 * buffer is live, and its offset range {@code [offset, offset + bytes)} in the pool. Communication pools (and
 * persistent symmetric input pools) get their own section; each panel is titled with the pool's declaration and
 * shows the max-live lower bound as a dashed line. Slots reused by a later buffer are hatched.
 *
 * <p>The SVG is self-contained (inline styles, no scripts, fonts or links) and deterministic: the same plan
 * always gives the same text. Each buffer is one {@code <rect class="buffer ...">} with a {@code <title>}
 * tooltip (name, dtype and shape, bytes, offset, live operations).
 */
public final class PlanSvg {
    private PlanSvg() {}

    static final int LEFT = 96, RIGHT = 150, PLOT_H = 170, LINE = 16;
    static final double CHAR_W = 7.3;

    /** The plan as a standalone SVG document. */
    public static String render(Plan plan) {
        return new Renderer(plan, PlanTimeline.of(plan)).svg();
    }

    /** An HTML page showing the SVG picture above the plan's text. */
    public static String html(Plan plan) {
        return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>plan " + esc(plan.name()) + "</title>\n"
                + "<style>body{font-family:system-ui,sans-serif;margin:16px;color:#222}"
                + "pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f6f6f6;padding:10px;overflow:auto}</style>\n"
                + "</head>\n<body>\n<h1>plan \"" + esc(plan.name()) + "\"</h1>\n"
                + render(plan).replaceFirst("^<\\?xml[^>]*>\\n", "")
                + "\n<h2>The plan, printed</h2>\n<pre class=\"plan\">" + esc(plan.toString()) + "</pre>\n</body>\n</html>\n";
    }

    private static final class Renderer {
        final Plan plan;
        final PlanTimeline timeline;
        final int cols, colW, plotW;
        final StringBuilder body = new StringBuilder();
        int y = 0;
        double maxTextW = 0;

        Renderer(Plan plan, PlanTimeline timeline) {
            this.plan = plan;
            this.timeline = timeline;
            this.cols = Math.max(1, timeline.operations().size());
            this.colW = cols <= 16 ? 64 : Math.max(14, 1024 / cols);
            this.plotW = cols * colW;
        }

        String svg() {
            text(12, y += 22, "title", "plan \"" + plan.name() + "\"  world=" + plan.worldSize() + "  fingerprint="
                    + plan.fingerprint().substring(0, 16) + "  (" + timeline.boxes().size() + " placed buffers, "
                    + timeline.operations().size() + " operations)");
            legend();
            var byPool = timeline.byPool(plan.pools());
            var comm = plan.pools().stream().filter(Pool::isSymmetric).toList();
            var local = plan.pools().stream().filter(p -> !p.isSymmetric()).toList();
            if (!comm.isEmpty()) {
                text(12, y += 30, "section", "communication pools: symmetric memory, same offsets on every rank, cross-rank lifetimes");
                for (Pool p : comm) panel(p, byPool.get(p));
            }
            if (!local.isEmpty()) {
                text(12, y += 30, "section", "per-rank pools");
                for (Pool p : local) panel(p, byPool.get(p));
            }
            if (plan.pools().isEmpty()) text(12, y += 30, "section", "no pools: the plan places no buffers");
            operationsKey();
            int width = (int) Math.ceil(Math.max(LEFT + plotW + RIGHT, maxTextW + 24));
            int height = y + 16;
            var sb = new StringBuilder();
            sb.append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
            sb.append("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"gatun-plan\" width=\"").append(width).append("\" height=\"").append(height)
                    .append("\" viewBox=\"0 0 ").append(width).append(' ').append(height).append("\" data-plan=\"").append(esc(plan.name()))
                    .append("\" data-fingerprint=\"").append(plan.fingerprint()).append("\">\n");
            sb.append("<title>").append(esc("plan \"" + plan.name() + "\": buffers over time and offset, per pool")).append("</title>\n");
            sb.append(STYLE);
            sb.append("<rect class=\"background\" x=\"0\" y=\"0\" width=\"").append(width).append("\" height=\"").append(height).append("\"/>\n");
            sb.append(body);
            sb.append("</svg>\n");
            return sb.toString();
        }

        void legend() {
            y += 12;
            int x = 12;
            String[][] items = {
                    {"comm", "communication slot"}, {"symm-input", "path-2 input (persistent)"}, {"regular", "intermediate"},
                    {"output", "graph output"}, {"constant", "constant"}};
            body.append("<g class=\"legend\">\n");
            for (String[] it : items) {
                body.append("<rect class=\"swatch ").append(it[0]).append("\" x=\"").append(x).append("\" y=\"").append(y)
                        .append("\" width=\"14\" height=\"12\"/>\n");
                text(x + 18, y + 10, null, it[1]);
                x += 18 + (int) (it[1].length() * CHAR_W) + 16;
            }
            body.append("<rect class=\"swatch regular\" x=\"").append(x).append("\" y=\"").append(y).append("\" width=\"14\" height=\"12\"/>\n");
            body.append("<rect class=\"reuse-mark\" fill=\"url(#gatun-hatch)\" x=\"").append(x).append("\" y=\"").append(y).append("\" width=\"14\" height=\"12\"/>\n");
            text(x + 18, y + 10, null, "reused slot");
            x += 18 + (int) (11 * CHAR_W) + 16;
            body.append("<line class=\"max-live\" x1=\"").append(x).append("\" y1=\"").append(y + 6).append("\" x2=\"").append(x + 22)
                    .append("\" y2=\"").append(y + 6).append("\"/>\n");
            text(x + 26, y + 10, null, "max-live bound");
            maxTextW = Math.max(maxTextW, x + 26 + 14 * CHAR_W);
            body.append("</g>\n");
            y += 12;
        }

        void panel(Pool pool, List<PlanTimeline.Box> boxes) {
            String kind = switch (pool.kind()) {
                case COMM -> "comm";
                case SYMM_INPUTS -> "comm symm-inputs";
                case ROTATING -> "comm rotating";
                case REGULAR -> "regular";
                case CONSTANT -> "constant";
                case STATE -> "state";
            };
            y += 28;
            body.append("<g class=\"panel ").append(kind).append("\" data-pool=\"").append(esc(pool.name())).append("\">\n");
            text(12, y, "panel-title", declaration(pool) + "   # max-live " + bytes(pool.maxLive()));
            y += 16;
            int top = y, bottom = y + PLOT_H;
            long extent = Math.max(1, Math.max(pool.bytes(), pool.maxLive()));
            body.append("<rect class=\"plot-bg\" x=\"").append(LEFT).append("\" y=\"").append(top).append("\" width=\"").append(plotW)
                    .append("\" height=\"").append(PLOT_H).append("\"/>\n");
            for (int c = 1; c < cols; c++) line("grid", LEFT + c * colW, top, LEFT + c * colW, bottom);
            // y axis: offsets, 0 at the bottom
            line("axis", LEFT, top, LEFT, bottom);
            for (int k = 0; k <= 4; k++) {
                long v = extent * k / 4;
                double yy = yOf(v, extent, bottom);
                line("axis", LEFT - 4, yy, LEFT, yy);
                if (k > 0 && k < 4) line("grid", LEFT, yy, LEFT + plotW, yy);
                textEnd(LEFT - 7, yy + 4, "tick", bytes(v));
            }
            body.append("<text class=\"axis-label\" transform=\"translate(").append(16).append(' ').append(fmt((top + bottom) / 2.0))
                    .append(") rotate(-90)\" text-anchor=\"middle\">offset (bytes)</text>\n");
            // x axis: operations
            line("axis", LEFT, bottom, LEFT + plotW, bottom);
            int every = Math.max(1, (int) Math.ceil(24.0 / colW));
            for (int c = 0; c < timeline.operations().size(); c++) {
                if (c % every != 0) continue;
                var op = timeline.operations().get(c);
                body.append("<text class=\"tick\" x=\"").append(fmt(LEFT + (c + 0.5) * colW)).append("\" y=\"").append(bottom + 14)
                        .append("\" text-anchor=\"middle\">").append(c).append("<title>").append(esc(c + ": " + op.step().format()))
                        .append("</title></text>\n");
            }
            body.append("<text class=\"axis-label\" x=\"").append(fmt(LEFT + plotW / 2.0)).append("\" y=\"").append(bottom + 30)
                    .append("\" text-anchor=\"middle\">time step (operation)</text>\n");
            // buffers
            for (PlanTimeline.Box b : boxes) rect(b, extent, bottom);
            for (PlanTimeline.Box b : boxes) label(b, extent, bottom);
            // the lower bound
            double ml = yOf(pool.maxLive(), extent, bottom);
            body.append("<line class=\"max-live\" x1=\"").append(LEFT).append("\" y1=\"").append(fmt(ml)).append("\" x2=\"").append(LEFT + plotW + 6)
                    .append("\" y2=\"").append(fmt(ml)).append("\"><title>").append(esc("max-live lower bound of " + pool.name() + ": "
                            + bytes(pool.maxLive()) + " (peak over time of the live slots' sizes)")).append("</title></line>\n");
            text(LEFT + plotW + 10, ml + 4, "max-live-label", "max-live " + bytes(pool.maxLive()));
            if (pool.bytes() != pool.maxLive()) {
                double ps = yOf(pool.bytes(), extent, bottom);
                textEnd(LEFT + plotW + RIGHT - 6, ps + (Math.abs(ps - ml) < 14 ? -10 : 4), "pool-size-label", "size " + bytes(pool.bytes()));
            }
            body.append("</g>\n");
            y = bottom + 34;
        }

        void rect(PlanTimeline.Box b, long extent, int bottom) {
            double x0 = LEFT + b.first() * (double) colW + 1, x1 = LEFT + (b.last() + 1) * (double) colW - 1;
            double yTop = yOf(b.offset() + b.bytes(), extent, bottom), yBot = yOf(b.offset(), extent, bottom);
            double h = Math.max(1, yBot - yTop);
            String cls = "buffer " + switch (b.role()) {
                case COMM -> "comm";
                case SYMM_INPUT -> "symm-input";
                case REGULAR -> "regular";
                case OUTPUT -> "output";
                case CONSTANT -> "constant";
            } + (b.isReuse() ? " reused" : "") + (b.inPlace() ? " in-place" : "");
            var ops = timeline.operations();
            String live = ops.isEmpty() ? "no operations"
                    : "live: operations " + b.first() + "-" + b.last() + " (" + ops.get(b.first()).label() + " .. " + ops.get(b.last()).label() + ")";
            String tip = b.buffer() + ": " + b.type() + ", " + bytes(b.bytes()) + " at offset " + b.offset() + " of " + b.pool().name()
                    + "\n" + live + "\nlifetime: " + b.lifetime()
                    + (b.isReuse() ? "\n" + (b.inPlace() ? "in place of " : "reuses the slot of ") + b.reuses() : "");
            body.append("<rect class=\"").append(cls).append("\" data-buffer=\"").append(esc(b.buffer())).append("\" x=\"").append(fmt(x0))
                    .append("\" y=\"").append(fmt(yTop)).append("\" width=\"").append(fmt(x1 - x0)).append("\" height=\"").append(fmt(h))
                    .append("\"><title>").append(esc(tip)).append("</title></rect>\n");
            if (b.isReuse())
                body.append("<rect class=\"reuse-mark\" fill=\"url(#gatun-hatch)\" x=\"").append(fmt(x0)).append("\" y=\"").append(fmt(yTop))
                        .append("\" width=\"").append(fmt(x1 - x0)).append("\" height=\"").append(fmt(h)).append("\"/>\n");
        }

        void label(PlanTimeline.Box b, long extent, int bottom) {
            double x0 = LEFT + b.first() * (double) colW + 1, x1 = LEFT + (b.last() + 1) * (double) colW - 1;
            double yTop = yOf(b.offset() + b.bytes(), extent, bottom), yBot = yOf(b.offset(), extent, bottom);
            double h = Math.max(1, yBot - yTop);
            if (h >= 13 && x1 - x0 >= b.buffer().length() * 6.2 + 4)
                body.append("<text class=\"buffer-label\" x=\"").append(fmt((x0 + x1) / 2)).append("\" y=\"").append(fmt(yTop + h / 2 + 4))
                        .append("\" text-anchor=\"middle\">").append(esc(b.buffer())).append("</text>\n");
        }

        void operationsKey() {
            y += 14;
            text(12, y += 16, "section", "time steps: the plan's operations");
            var ops = timeline.operations();
            for (var op : ops) text(24, y += LINE, "key", String.format(Locale.ROOT, "%3d  %s", op.index(), op.step().format()));
            if (ops.isEmpty()) text(24, y += LINE, "key", "(none)");
            if (!timeline.dynamic().isEmpty()) {
                text(12, y += 24, "section", "per-call dynamic buffers (symbolic sizes, in no pool)");
                for (Step.AllocDynamic d : timeline.dynamic()) text(24, y += LINE, "key", d.format());
            }
        }

        double yOf(long bytes, long extent, int bottom) { return bottom - (double) bytes / extent * PLOT_H; }

        void line(String cls, double x1, double y1, double x2, double y2) {
            body.append("<line class=\"").append(cls).append("\" x1=\"").append(fmt(x1)).append("\" y1=\"").append(fmt(y1)).append("\" x2=\"")
                    .append(fmt(x2)).append("\" y2=\"").append(fmt(y2)).append("\"/>\n");
        }

        void text(double x, double yy, String cls, String s) {
            body.append("<text");
            if (cls != null) body.append(" class=\"").append(cls).append('"');
            body.append(" x=\"").append(fmt(x)).append("\" y=\"").append(fmt(yy)).append("\">").append(esc(s)).append("</text>\n");
            maxTextW = Math.max(maxTextW, x + s.length() * CHAR_W * ("title".equals(cls) ? 1.25 : 1));
        }

        void textEnd(double x, double yy, String cls, String s) {
            body.append("<text class=\"").append(cls).append("\" x=\"").append(fmt(x)).append("\" y=\"").append(fmt(yy))
                    .append("\" text-anchor=\"end\">").append(esc(s)).append("</text>\n");
        }
    }

    /** The pool's declaration as the plan prints it. */
    static String declaration(Pool p) { return new Step.AllocPool(p).format(); }

    /** Byte counts as the printed plan shows them: 192 B, 256 KiB, 2 MiB (a larger unit only when exact). */
    static String bytes(long b) {
        if (b >= 1L << 30 && b % (1L << 30) == 0) return (b >> 30) + " GiB";
        if (b >= 1L << 20 && b % (1L << 20) == 0) return (b >> 20) + " MiB";
        if (b >= 1L << 10 && b % (1L << 10) == 0) return (b >> 10) + " KiB";
        return b + " B";
    }

    static String fmt(double v) {
        if (v == Math.rint(v)) return Long.toString((long) v);
        return String.format(Locale.ROOT, "%.1f", v);
    }

    /** Escapes text for XML content and attribute values, dropping characters XML 1.0 forbids. */
    static String esc(String s) {
        var sb = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '&' -> sb.append("&amp;");
                case '<' -> sb.append("&lt;");
                case '>' -> sb.append("&gt;");
                case '"' -> sb.append("&quot;");
                case '\'' -> sb.append("&#39;");
                default -> { if (c >= 0x20 || c == '\n' || c == '\t') sb.append(c); }
            }
        }
        return sb.toString();
    }

    static final String STYLE = """
            <defs>
            <pattern id="gatun-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
            <line x1="0" y1="0" x2="0" y2="6" stroke="#000000" stroke-opacity="0.45" stroke-width="2"/>
            </pattern>
            </defs>
            <style>
            text { font-family: ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 12px; fill: #222222; }
            .background { fill: #ffffff; }
            .title { font-size: 15px; font-weight: bold; }
            .section { font-size: 13px; font-weight: bold; fill: #555555; }
            .panel-title { font-weight: bold; }
            .panel.comm .panel-title { fill: #a84d00; }
            .axis { stroke: #333333; stroke-width: 1; }
            .grid { stroke: #e6e6e6; stroke-width: 1; }
            .tick { font-size: 11px; fill: #444444; }
            .axis-label { font-size: 11px; fill: #666666; }
            .plot-bg { fill: #fbfbfb; stroke: #cccccc; }
            .buffer, .swatch { stroke: #333333; stroke-width: 0.8; }
            .buffer.comm, .swatch.comm { fill: #f6a04d; }
            .buffer.symm-input, .swatch.symm-input { fill: #c39bd3; }
            .buffer.regular, .swatch.regular { fill: #7fb3e0; }
            .buffer.output, .swatch.output { fill: #82c785; }
            .buffer.constant, .swatch.constant { fill: #bbbbbb; }
            .buffer.reused { stroke-dasharray: 3 2; }
            .reuse-mark { pointer-events: none; stroke: none; }
            .buffer:hover { stroke-width: 2; }
            .buffer-label { font-size: 10px; pointer-events: none; }
            .max-live { stroke: #d62728; stroke-width: 1.5; stroke-dasharray: 6 4; }
            .max-live-label { fill: #d62728; font-weight: bold; }
            .pool-size-label { fill: #666666; font-size: 11px; }
            .key { font-size: 11px; fill: #333333; white-space: pre; }
            </style>
            """;
}
