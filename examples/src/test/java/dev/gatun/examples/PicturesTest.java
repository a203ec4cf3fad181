package dev.gatun.examples;

import dev.gatun.ir.viz.GraphDot;
import dev.gatun.ir.viz.GraphMermaid;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;
import dev.gatun.planner.viz.PlanSvg;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;
import org.xml.sax.InputSource;

import javax.xml.XMLConstants;
import javax.xml.parsers.DocumentBuilderFactory;
import java.io.StringReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** The pictures of plans and graphs: the SVG parsed as XML, and the Pictures command. */
class PicturesTest {
    static final String SVG_NS = "http://www.w3.org/2000/svg";

    static Document parse(String xml) throws Exception {
        var f = DocumentBuilderFactory.newInstance();
        f.setNamespaceAware(true);
        f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
        f.setFeature(XMLConstants.FEATURE_SECURE_PROCESSING, true);
        return f.newDocumentBuilder().parse(new InputSource(new StringReader(xml)));
    }

    static List<Element> elements(Element root, String tag, String cls) {
        var out = new ArrayList<Element>();
        NodeList nl = root.getElementsByTagNameNS(SVG_NS, tag);
        for (int i = 0; i < nl.getLength(); i++) {
            var e = (Element) nl.item(i);
            if (cls == null || Arrays.asList(e.getAttribute("class").split("\\s+")).contains(cls)) out.add(e);
        }
        return out;
    }

    static String title(Element e) {
        var t = e.getElementsByTagNameNS(SVG_NS, "title");
        return t.getLength() == 0 ? null : t.item(0).getTextContent();
    }

    /** The seeds' plan with one-shot all-reduces: their communication buffers give the pool's panel buffers to draw. */
    static Plan seedsPlan() { return Pictures.plan(Seeds.graph(4), dev.gatun.runtime.CompileOptions.world(2).barrierFreeMax(0)); }

    static long placed(Plan p) { return p.steps().stream().filter(s -> s instanceof Step.Place).count(); }

    @Test
    void seedsSvgIsWellFormedXmlWithOneRectanglePerPlacedBuffer() throws Exception {
        Plan plan = seedsPlan();
        Element svg = parse(PlanSvg.render(plan)).getDocumentElement();
        assertThat(svg.getLocalName()).isEqualTo("svg");
        assertThat(svg.getNamespaceURI()).isEqualTo(SVG_NS);
        assertThat(Integer.parseInt(svg.getAttribute("width"))).isPositive();
        var rects = elements(svg, "rect", "buffer");
        var placedNames = plan.buffers().stream().filter(b -> b.placement() != null).map(b -> b.name()).toList();
        assertThat(placed(plan)).isEqualTo(8).isEqualTo(placedNames.size());
        assertThat(rects).hasSize(8);
        assertThat(rects.stream().map(r -> r.getAttribute("data-buffer")).toList()).containsExactlyInAnyOrderElementsOf(placedNames);
        for (Element r : rects) {
            String name = r.getAttribute("data-buffer");
            var at = plan.placement(name);
            assertThat(title(r)).as(name)
                    .startsWith(name + ": f32[4,4], 64 B at offset " + at.offset() + " of " + at.pool() + "\nlive: operations ");
            assertThat(Double.parseDouble(r.getAttribute("width"))).isPositive();
            assertThat(Double.parseDouble(r.getAttribute("height"))).isPositive();
        }
    }

    @Test
    void seedsSvgHasACommunicationPanelMaxLiveLinesAxesAndMarkedReuse() throws Exception {
        Plan plan = seedsPlan();
        Element svg = parse(PlanSvg.render(plan)).getDocumentElement();
        var panels = elements(svg, "g", "panel");
        assertThat(panels).hasSize(plan.pools().size()).hasSize(2);
        var comm = elements(svg, "g", "comm");
        assertThat(comm).hasSize(1);
        assertThat(elements(comm.getFirst(), "text", "panel-title").getFirst().getTextContent())
                .isEqualTo("pool0 = alloc_symmetric(192 B, type=SYMM_MEM, group=\"world\")   # max-live 192 B");
        assertThat(elements(comm.getFirst(), "rect", "buffer").stream().map(r -> r.getAttribute("data-buffer")))
                .containsExactlyInAnyOrder("buf0", "buf2", "buf4", "buf7");
        for (Element panel : panels) {
            assertThat(elements(panel, "line", "max-live")).hasSize(1);
            assertThat(elements(panel, "text", "max-live-label")).hasSize(1);
            assertThat(elements(panel, "text", "axis-label").stream().map(Element::getTextContent)).containsExactly("offset (bytes)", "time step (operation)");
        }
        assertThat(elements(comm.getFirst(), "text", "max-live-label").getFirst().getTextContent()).isEqualTo("max-live 192 B");
        // the seeds' pool is at its bound: the max-live line runs along the top of the pool's plot
        var bg = elements(comm.getFirst(), "rect", "plot-bg").getFirst();
        assertThat(elements(comm.getFirst(), "line", "max-live").getFirst().getAttribute("y1")).isEqualTo(bg.getAttribute("y"));
        var reused = elements(svg, "rect", "reused").stream().map(r -> r.getAttribute("data-buffer")).toList();
        assertThat(reused).containsExactlyInAnyOrder("buf7", "buf8");
    }

    @Test
    void picturesWritesFourFilesForEveryExample(@TempDir Path dir) throws Exception {
        Pictures.main(new String[]{dir.toString()});
        for (var e : Pictures.EXAMPLES.values()) {
            for (String suffix : List.of(".plan.svg", ".plan.html", ".dot", ".mmd"))
                assertThat(dir.resolve(e.name() + suffix)).as(e.name() + suffix).isNotEmptyFile();
            Plan plan = Pictures.plan(e.graph().get(), e.world());
            Element svg = parse(Files.readString(dir.resolve(e.name() + ".plan.svg"))).getDocumentElement();
            assertThat(elements(svg, "rect", "buffer")).as(e.name()).hasSize((int) placed(plan));
            assertThat(elements(svg, "g", "panel")).as(e.name()).hasSize(plan.pools().size());
            assertThat(Files.readString(dir.resolve(e.name() + ".dot"))).isEqualTo(GraphDot.render(e.graph().get()));
            assertThat(Files.readString(dir.resolve(e.name() + ".mmd"))).isEqualTo(GraphMermaid.render(e.graph().get()));
        }
        assertThat(Files.readString(dir.resolve("seeds.plan.svg"))).isEqualTo(PlanSvg.render(Pictures.plan(Seeds.graph(4), 2)));
    }

    @Test
    void picturesTakesOneExampleAndAWorldSize(@TempDir Path dir) throws Exception {
        Pictures.main(new String[]{"--world", "4", dir.toString(), "seeds"});
        try (var files = Files.list(dir)) {
            assertThat(files.map(p -> p.getFileName().toString()).sorted().toList())
                    .containsExactly("seeds.dot", "seeds.mmd", "seeds.plan.html", "seeds.plan.svg");
        }
        assertThat(Files.readString(dir.resolve("seeds.plan.svg"))).contains("world=4").isEqualTo(PlanSvg.render(Pictures.plan(Seeds.graph(4), 4)));
    }

    @Test
    void picturesReadsAGraphInJson(@TempDir Path dir) throws Exception {
        Path json = dir.resolve("g.json");
        Files.writeString(json, dev.gatun.ir.graph.GraphJson.toJson(Seeds.graph(4)));
        Path out = dir.resolve("out");
        Pictures.main(new String[]{"--world", "2", out.toString(), json.toString()});
        assertThat(Files.readString(out.resolve("seeds.plan.svg"))).isEqualTo(PlanSvg.render(Pictures.plan(Seeds.graph(4), 2)));
    }
}
