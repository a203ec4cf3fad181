package dev.gatun.models.text;

import dev.gatun.ir.json.Json;

import java.util.ArrayList;
import java.util.List;

/**
 * A {@code tokenizer.json} post-processor: what {@code encode(text, true)} adds around the text's ids (Llama's BOS
 * comes from here). Only the single-sequence form is implemented: {@link Tokenizer#encode} takes one text.
 * {@code ByteLevel} post-processing only trims offsets, which this tokenizer does not report, so it changes no id.
 */
sealed interface PostProcessor {

    String SUPPORTED = "TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence";

    int[] apply(int[] ids, boolean addSpecialTokens);

    /** The template's {@code single} form: the ids of its special tokens around the sequence's ({@code $A}). */
    record Template(List<int[]> parts) implements PostProcessor {
        /** The part that stands for the sequence's own ids. */
        static final int[] SEQUENCE = new int[0];

        public Template { parts = List.copyOf(parts); }

        @Override public int[] apply(int[] ids, boolean addSpecialTokens) {
            if (!addSpecialTokens) return ids;
            IntList out = new IntList(ids.length + 4);
            for (int[] p : parts) out.addAll(p == SEQUENCE ? ids : p);
            return out.toArray();
        }
    }

    record ByteLevel() implements PostProcessor {
        @Override public int[] apply(int[] ids, boolean addSpecialTokens) { return ids; }
    }

    record Sequence(List<PostProcessor> steps) implements PostProcessor {
        public Sequence { steps = List.copyOf(steps); }

        @Override public int[] apply(int[] ids, boolean addSpecialTokens) {
            for (PostProcessor p : steps) ids = p.apply(ids, addSpecialTokens);
            return ids;
        }
    }

    /** The post-processor a {@code tokenizer.json} object describes; an unknown kind is refused by name. */
    static PostProcessor of(JsonNode node) {
        return switch (node.type()) {
            case "TemplateProcessing" -> template(node);
            case "ByteLevel" -> new ByteLevel();
            case "RobertaProcessing", "BertProcessing" ->   // cls $A sep
                    new Template(List.of(new int[]{tokenId(node, "cls")}, Template.SEQUENCE, new int[]{tokenId(node, "sep")}));
            case "Sequence" -> new Sequence(node.children("processors").stream().map(PostProcessor::of).toList());
            default -> throw node.unsupportedType("post_processor", SUPPORTED);
        };
    }

    /** {@code single}: a list of {@code {"SpecialToken": {"id": ...}}} and {@code {"Sequence": {"id": "A"}}}. */
    private static Template template(JsonNode node) {
        List<int[]> parts = new ArrayList<>();
        JsonNode specials = node.child("special_tokens");
        Json.Arr single = node.array("single");
        for (int i = 0; i < single.size(); i++) {
            if (!(single.get(i) instanceof Json.Obj o)) throw node.error("field 'single[" + i + "]' is a JSON " + single.get(i).kind() + ", not an object");
            JsonNode piece = new JsonNode(node.file(), node.where() + ".single[" + i + "]", o);
            JsonNode special = piece.optChild("SpecialToken");
            if (special != null) {
                String name = special.string("id");
                JsonNode entry = specials.optChild(name);
                if (entry == null) throw special.error("names the special token '" + name + "', which 'special_tokens' does not list");
                Json.Arr ids = entry.array("ids");
                int[] part = new int[ids.size()];
                for (int k = 0; k < part.length; k++) part[k] = entry.integer(ids.get(k), entry.where() + ".ids[" + k + "]");
                parts.add(part);
            } else if (piece.optChild("Sequence") != null) {
                String seq = piece.child("Sequence").string("id");
                if (!seq.equals("A")) throw piece.error("names sequence '" + seq + "' in the single-sequence template; only A can be there");
                parts.add(Template.SEQUENCE);
            } else {
                throw piece.error("is neither a SpecialToken nor a Sequence");
            }
        }
        return new Template(parts);
    }

    /** Roberta/Bert processing's {@code "cls": ["<s>", 0]}. */
    private static int tokenId(JsonNode node, String key) {
        Json.Arr pair = node.array(key);
        if (pair.size() != 2) throw node.error("field '" + key + "' is not a [token, id] pair");
        return node.integer(pair.get(1), node.where() + "." + key + "[1]");
    }
}
